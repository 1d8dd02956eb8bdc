"""`capplan nightly --rebuild` end to end on a small catalog (issue 25, recovery): a corrupt
warehouse stops the nightly with one line naming the recovery; `--rebuild` moves it aside and
rebuilds it from the registry and the telemetry, carrying over the history it can still read."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from tests.test_warehouse_fixtures import PipelineEnv, exported_env


@pytest.fixture
def pipeline_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PipelineEnv:
    monkeypatch.chdir(tmp_path)
    return exported_env(tmp_path, monkeypatch)


def _runs(path: Path) -> list[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return [str(r[0]) for r in con.execute("select run_id from marts.runs order by started_at").fetchall()]
    finally:
        con.close()


def _grid_history_runs(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        row = con.execute("select count(distinct run_id) from marts.capacity_grid_history").fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def _damage_a_history_table(path: Path) -> str:
    """Overwrite the start of two data blocks of the biggest copied mart history; returns its name."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        table = con.execute(
            "select table_name from duckdb_tables() where schema_name = 'marts' and table_name like '%_history' "
            "order by estimated_size desc limit 1"
        ).fetchone()
        assert table is not None
        blocks = con.execute(
            "select distinct block_id from pragma_storage_info($t) where block_id >= 0 order by 1 limit 2",
            {"t": f"marts.{table[0]}"},
        ).fetchall()
        block_size = con.execute("select block_size from pragma_database_size()").fetchone()
    finally:
        con.close()
    assert blocks and block_size
    with path.open("r+b") as handle:
        for (block,) in blocks:
            handle.seek(3 * 4096 + int(block) * int(block_size[0]) + 8)
            handle.write(b"\xff" * 64)
    return str(table[0])


@pytest.mark.slow  # five whole nightlies (~150 s on 2 cores)
def test_rebuild_keeps_readable_history_and_recovers_a_corrupt_file(pipeline_env: PipelineEnv) -> None:
    runner = CliRunner()
    warehouse = pipeline_env.warehouse
    first = runner.invoke(app, ["nightly"])
    assert first.exit_code == 0, first.output
    [run_1] = _runs(warehouse)

    rebuilt = runner.invoke(app, ["nightly", "--rebuild"])  # a readable file: its history is carried over
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "the warehouse opens; moved it aside to" in rebuilt.output
    assert "carried over marts.runs (1 runs)" in rebuilt.output and "carried over raw history" in rebuilt.output
    runs = _runs(warehouse)
    assert len(runs) == 2 and runs[0] == run_1
    assert _grid_history_runs(warehouse) == 2, "the grid's history kept in place came along"
    assert len(list(warehouse.parent.glob("warehouse.duckdb.before-rebuild-*"))) == 1

    damaged = _damage_a_history_table(warehouse)  # opens fine; the run fails where it reads that table
    failed = runner.invoke(app, ["nightly"])
    assert failed.exit_code == 1, failed.output
    assert "Corrupt database file" in failed.stderr and "capplan nightly --rebuild" in failed.stderr
    assert "Traceback" not in failed.output
    salvaged = runner.invoke(app, ["nightly", "--rebuild"])
    assert salvaged.exit_code == 0, salvaged.output
    assert f"marts.{damaged} cannot be read" in salvaged.output, "a rebuild reads every table to say why"
    assert f"history lost: marts.{damaged} (" in salvaged.output and "carried over marts.runs (2 runs)" in salvaged.output
    assert len(_runs(warehouse)) == 3 and _grid_history_runs(warehouse) == 3

    warehouse.write_bytes(os.urandom(200_000))
    refused = runner.invoke(app, ["nightly"])
    assert refused.exit_code == 2, refused.output
    errors = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "not a DuckDB database file" in errors[0], errors
    assert "capplan nightly --rebuild" in errors[0] and "Traceback" not in refused.output

    recovered = runner.invoke(app, ["nightly", "--rebuild"])
    assert recovered.exit_code == 0, recovered.output
    assert "history not carried over: warehouse.duckdb.corrupt-" in recovered.output
    assert len(_runs(warehouse)) == 1, "a new warehouse, from the registry and the telemetry"
    assert len(list(warehouse.parent.glob("warehouse.duckdb.corrupt-*"))) == 2, "the corrupt files are kept"
    doctor = runner.invoke(app, ["doctor"])
    assert "ok      warehouse" in doctor.stdout, doctor.stdout
