"""`capplan nightly` and `capplan sql`: the commands users run, on a small catalog in tmp_path,
and (slow) the whole bundled catalog from a fresh directory, timed."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from tests.test_warehouse_fixtures import (
    CATALOG_MODELS,
    PipelineEnv,
    exported_env,
    make_env,
    warehouse_lock_held,
)
from warehouse.sql import example_queries

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def pipeline_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PipelineEnv:
    return exported_env(tmp_path, monkeypatch)


CAPPLAN = Path(sys.executable).with_name("capplan")
ISSUE_QUERY = (
    "select gpu, max(b_max) from marts.capacity_grid "
    "where model = 'meta-llama/Llama-3.1-70B-Instruct' and context = 32768 group by gpu"
)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(scope="module")
def nightly_done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PipelineEnv, str]]:
    """One `capplan nightly` on a small catalog, shared by the tests that only read its result."""
    env = make_env(tmp_path_factory.mktemp("nightly"))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.env().items():
            patch.setenv(name, value)
        result = CliRunner().invoke(app, ["nightly"])
        assert result.exit_code == 0, result.output
        yield env, result.output


def test_nightly_shows_progress_and_a_summary(nightly_done: tuple[PipelineEnv, str]) -> None:
    env, output = nightly_done
    assert re.search(r"✓ .*raw\.capacity_grid [\d,]+", output)
    assert "✓ check grid_matches_scalar_estimate" in output and "✓ marts.runs" in output
    assert re.search(rf"models\s+{len(CATALOG_MODELS)}\b", output)
    assert re.search(r"GPUs\s+2\b", output)
    assert re.search(r"grid rows\s+[\d,]+", output)
    assert re.search(r"run time\s+[\d.]+ s", output)
    assert str(env.warehouse.resolve()) in output
    assert re.search(r"telemetry\s+\d+ files \(", output) and re.search(r"predictions\s+\d+ observed", output)
    tried = re.findall(r'^\s+(\S+) sql "(.+)"$', output, flags=re.MULTILINE)
    assert len(tried) == 3
    command = tried[0][0]  # runs without an activated venv: on PATH, or the script's own path
    assert shutil.which(command) if command == "capplan" else Path(command).is_file(), command
    pasted = [sql for _command, sql in tried]
    con = duckdb.connect(str(env.warehouse), read_only=True)
    try:
        for sql in pasted:  # the three example queries run as printed
            con.execute(sql).fetchall()
    finally:
        con.close()


def test_the_nightly_run_is_recorded_in_the_dagster_instance(nightly_done: tuple[PipelineEnv, str]) -> None:
    """What `dg dev` shows: the run, successful, with its asset materializations."""
    import dagster as dg

    env, output = nightly_done
    run_id = re.search(r"Published run (\S+)", output).group(1)  # type: ignore[union-attr]
    with dg.DagsterInstance.from_config(str(env.dagster_home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.is_success and run.tags["capplan/trigger"] == "capplan nightly"
        assert instance.get_latest_materialization_event(dg.AssetKey(["marts", "runs"])) is not None
    assert f"DAGSTER_HOME={env.dagster_home}" in output


@pytest.mark.slow  # a whole nightly of its own (the slow group holds those)
def test_a_pasted_log_without_a_gpu_is_kept_and_says_why_it_was_not_predicted(
    runner: CliRunner, pipeline_env: PipelineEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drop = tmp_path / "drop"
    drop.mkdir()
    log = (PROJECT_ROOT / "telemetry/sample/chat-llama8b-h100/startup.log").read_text()
    pasted = "\n".join(line for line in log.splitlines() if "nvidia-smi" not in line and "GPU 0:" not in line)
    (drop / "pasted.log").write_text(pasted + "\n")
    monkeypatch.setenv("CAPPLAN_TELEMETRY_DIR", str(drop))
    result = runner.invoke(app, ["nightly"])
    assert result.exit_code == 0, result.output
    assert re.search(r"telemetry\s+1 files \(drop_folder .*\): 1 observations", result.output), result.output
    assert re.search(r"predictions\s+1 observed deployments: 0 predicted, 1 skipped \(1 x no GPU", result.output)
    con = duckdb.connect(str(pipeline_env.warehouse), read_only=True)
    try:
        status, reason = con.execute(
            "select prediction_status, prediction_reason from marts.prediction_vs_measured"
        ).fetchone()  # type: ignore[misc]
    finally:
        con.close()
    assert status == "skipped" and reason.startswith("no GPU")


def test_sql_answers_the_issue_query_in_every_format(runner: CliRunner, nightly_done: tuple[PipelineEnv, str]) -> None:
    table = runner.invoke(app, ["sql", ISSUE_QUERY])
    assert table.exit_code == 0, table.output
    assert "h100-sxm-80gb" in table.output and "l4-24gb" in table.output and "2 rows" in table.output

    as_csv = runner.invoke(app, ["sql", "--format", "csv", ISSUE_QUERY + " order by gpu"])
    rows = list(csv.reader(io.StringIO(as_csv.output)))
    assert rows[0] == ["gpu", "max(b_max)"]
    assert [r[0] for r in rows[1:]] == ["h100-sxm-80gb", "l4-24gb"] and int(rows[1][1]) > 0

    as_json = runner.invoke(app, ["sql", "--format", "json", "select * from marts.gpus order by gpu"])
    records = json.loads(as_json.output)
    assert [r["gpu"] for r in records] == ["h100-sxm-80gb", "l4-24gb"]
    assert isinstance(records[0]["aliases"], list) and isinstance(records[0]["price_date"], str)

    from_file = runner.invoke(app, ["sql", "--file", str(PROJECT_ROOT / "warehouse/queries/recent_runs.sql")])
    assert from_file.exit_code == 0 and "1 row" in from_file.output


def test_sql_is_read_only_and_errors_are_one_line(runner: CliRunner, nightly_done: tuple[PipelineEnv, str]) -> None:
    for statement in ("create table marts.x (a int)", "delete from marts.runs", "select * from nope"):
        result = runner.invoke(app, ["sql", statement])
        assert result.exit_code == 2, statement
        assert result.output.count("\n") == 1 and result.output.startswith("capplan: error: ")
    con = duckdb.connect(str(nightly_done[0].warehouse), read_only=True)
    assert con.execute("select count(*) from marts.runs").fetchone() == (1,)
    con.close()


def test_sql_without_a_warehouse_says_how_to_build_one(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["sql", "--warehouse", str(tmp_path / "none.duckdb"), "select 1"])
    assert result.exit_code == 2 and "capplan nightly" in result.output
    assert runner.invoke(app, ["sql", "select 1", "--format", "xml"]).exit_code == 2


def test_a_second_nightly_exits_with_a_clear_message(runner: CliRunner, pipeline_env: PipelineEnv) -> None:
    with warehouse_lock_held(pipeline_env.warehouse, "other-nightly", 60) as holder:
        result = runner.invoke(app, ["nightly", "--wait", "1"])
        assert result.exit_code == 2
        assert f"pid {holder.pid}" in result.output and "run other-nightly" in result.output
        assert "after waiting 1 s" in result.output
        assert not pipeline_env.warehouse.exists()


@pytest.mark.slow
def test_nightly_on_the_bundled_catalog_from_a_fresh_directory(tmp_path: Path) -> None:
    """The README's first command after the install: defaults only, timed; then the example queries."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAPPLAN_", "DAGSTER_HOME"))}
    start = time.perf_counter()
    result = subprocess.run(
        [str(CAPPLAN), "nightly"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    elapsed = time.perf_counter() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(f"\ncapplan nightly, bundled catalog, fresh directory: {elapsed:.1f} s")
    print(result.stdout)
    warehouse = tmp_path / "var" / "warehouse.duckdb"
    assert warehouse.is_file() and (tmp_path / "var" / "registry.db").is_file()
    # no DAGSTER_HOME, no ./dagster.yaml: the run is kept in a persistent instance under var/dagster
    assert f"DAGSTER_HOME={tmp_path.resolve() / 'var' / 'dagster'} dagster dev" in result.stdout
    import dagster as dg

    with dg.DagsterInstance.from_config(str(tmp_path / "var" / "dagster")) as instance:
        assert [r.is_success for r in instance.get_runs()] == [True]

    answer = subprocess.run(
        [str(CAPPLAN), "sql", "--format", "json", ISSUE_QUERY], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert answer.returncode == 0, answer.stderr
    by_gpu = {row["gpu"]: row["max(b_max)"] for row in json.loads(answer.stdout)}
    assert len(by_gpu) >= 25 and by_gpu["h100-sxm-80gb"] > 0 and by_gpu["h200-sxm-141gb"] > by_gpu["h100-sxm-80gb"]

    # Timings are benchmarks' business (benchmarks/queries.py, benchmarks/README.md), not a test's:
    # here every example query must run and return rows on the published warehouse.
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        for name, sql in example_queries().items():
            assert con.execute(sql).fetchall() is not None, name
    finally:
        con.close()


@pytest.mark.slow
def test_nightly_killed_while_publishing_leaves_a_whole_snapshot(runner: CliRunner, pipeline_env: PipelineEnv) -> None:
    """SIGKILL a real `capplan nightly` in its last steps: readers still get one complete run."""
    assert runner.invoke(app, ["nightly"]).exit_code == 0
    con = duckdb.connect(str(pipeline_env.warehouse), read_only=True)
    before = con.execute("select list(run_id order by started_at) from marts.runs").fetchone()[0]  # type: ignore[index]
    con.close()

    victim = subprocess.Popen(
        [str(CAPPLAN), "nightly"], cwd=pipeline_env.root, stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    assert victim.stdout is not None
    for line in victim.stdout:
        if "✓ marts.capacity_grid" in line:  # what is left: a check and the publish
            victim.send_signal(signal.SIGKILL)
            break
    assert victim.wait(timeout=120) == -signal.SIGKILL

    con = duckdb.connect(str(pipeline_env.warehouse), read_only=True)
    try:
        runs = con.execute("select list(run_id order by started_at) from marts.runs").fetchone()[0]  # type: ignore[index]
        assert runs == before or runs[:-1] == before, "the previous snapshot, or the complete new one"
        current, rows, grid_rows = con.execute(
            "select r.run_id, r.capacity_grid_rows, (select count(*) from marts.capacity_grid) "
            "from marts.runs r order by started_at desc limit 1"
        ).fetchone()  # type: ignore[misc]
        assert current == runs[-1] and rows == grid_rows
        assert con.execute("select count(distinct run_id) from marts.capacity_grid").fetchone() == (1,)
    finally:
        con.close()
    again = runner.invoke(app, ["nightly"])
    assert again.exit_code == 0, again.output
    from warehouse.publish import Warehouse

    assert Warehouse(pipeline_env.warehouse).builds() == []


def test_a_check_without_a_description_is_said_by_its_numbers() -> None:
    import dagster as dg

    from pipelines.commands.nightly import _metadata_line

    metadata = {
        "rows": dg.MetadataValue.int(0),
        "negative_values": dg.MetadataValue.int(3),
        "problems": dg.MetadataValue.md("- one\n- two"),  # a list, not a reason: left out
        "scope": dg.MetadataValue.text("vllm 0.11"),
    }
    assert _metadata_line(metadata) == "rows=0, negative_values=3, scope=vllm 0.11"
    assert "see the check in dg dev" in _metadata_line({})
