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


@pytest.mark.slow  # three whole nightlies (~90 s on 2 cores)
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
    assert len(list(warehouse.parent.glob("warehouse.duckdb.corrupt-*"))) == 1, "the corrupt file is kept"
    doctor = runner.invoke(app, ["doctor"])
    assert "ok      warehouse" in doctor.stdout, doctor.stdout
