"""`nightly_job` as production runs it: a Dagster instance on PostgreSQL (deploy/dagster.yaml,
loaded as is) and the job's own executor, each step in a process of its own. Twice, on the same
registry and warehouse; the published marts equal an in-process run's, run stamps aside.
A run launched while another process holds the warehouse fails before any step starts.

Needs CAPPLAN_TEST_PG_URL (skipped without it on a developer machine, failed under CI); the
instance gets a database of its own on that server, dropped afterwards.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest
from sqlalchemy.engine import make_url

from pipelines.definitions import nightly_job_def
from tests.conftest import pg_scratch, require_extra
from tests.test_warehouse_fixtures import PipelineEnv, make_env, warehouse_lock_held
from warehouse.publish import Warehouse

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
STAMP_COLUMNS = {"run_id", "run_date"}


def mart_contents(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every current mart's rows in a stable order, without the run stamp and the timestamps
    (marts.runs and the history relations say which run, not what it computed)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = [
            name
            for (name,) in con.execute(
                "select table_name from information_schema.tables where table_schema = 'marts' "
                "and table_name <> 'runs' and table_name not like '%\\_history' escape '\\' order by 1"
            ).fetchall()
        ]
        contents = {}
        for table in tables:
            kept = [
                name
                for name, dtype in con.execute(
                    "select column_name, data_type from information_schema.columns "
                    "where table_schema = 'marts' and table_name = $t order by ordinal_position",
                    {"t": table},
                ).fetchall()
                if name not in STAMP_COLUMNS and not dtype.upper().startswith("TIMESTAMP")
            ]
            selected = ", ".join(f'"{name}"' for name in kept)
            rows = con.execute(f"select {selected} from marts.{table} order by all").fetchall()
            contents[table] = sorted((_settled(row) for row in rows), key=repr)
        return contents
    finally:
        con.close()


def _settled(value: Any) -> Any:
    """Floats to 12 significant digits: a float sum polars spreads over threads can end one ulp apart from
    one process to the next (the sample fleet's TTFT means did); every other value is compared exactly."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, tuple | list):
        return type(value)(_settled(v) for v in value)
    return value


@pytest.fixture
def dagster_pg(pg_admin_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A database of its own for Dagster's storage, exported as deploy/dagster.yaml reads it."""
    require_extra("postgres", "dagster_postgres")
    name = f"capplan_dagster_{uuid.uuid4().hex[:12]}"
    with pg_scratch(pg_admin_url, f'CREATE DATABASE "{name}"', f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'):
        url = make_url(pg_admin_url)
        for var, value in {
            "DAGSTER_PG_HOST": url.host or "127.0.0.1",
            "DAGSTER_PG_PORT": str(url.port or 5432),
            "DAGSTER_PG_DB": name,
            "DAGSTER_PG_USER": url.username or "",
            "DAGSTER_PG_PASSWORD": url.password or "",
        }.items():
            monkeypatch.setenv(var, value)
        yield name


@pytest.fixture(autouse=True)
def _fresh_forkserver() -> Iterator[None]:
    """Step processes fork from a forkserver that keeps the environment it started with (one per
    run worker process in production, see pipelines/executor.py); these tests run several
    instances and warehouses in one process, so each test stops it before and after its runs."""
    from multiprocessing import forkserver

    forkserver._forkserver._stop()  # type: ignore[attr-defined]
    yield
    forkserver._forkserver._stop()  # type: ignore[attr-defined]


def _export(env: PipelineEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in env.env().items():
        monkeypatch.setenv(name, value)


def _production(env: PipelineEnv, monkeypatch: pytest.MonkeyPatch) -> PipelineEnv:
    """`env` exported (read by the step processes, forked from this environment), with
    deploy/dagster.yaml as its Dagster instance's configuration."""
    (env.root / "var").mkdir(parents=True)
    _export(env, monkeypatch)
    shutil.copyfile(PROJECT_ROOT / "deploy" / "dagster.yaml", env.dagster_home / "dagster.yaml")
    return env


def test_nightly_on_postgres_with_one_process_per_step_twice_equals_in_process(
    tmp_path: Path, dagster_pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reference: the same job in one process, on its own registry and warehouse (same catalog).
    reference = make_env(tmp_path / "in-process")
    (reference.root / "var").mkdir(parents=True, exist_ok=True)
    _export(reference, monkeypatch)
    with dg.DagsterInstance.ephemeral() as ephemeral:
        in_process = nightly_job_def().execute_in_process(instance=ephemeral, raise_on_error=False)
    assert in_process.success
    expected = mart_contents(reference.warehouse)
    assert expected["capacity_grid"] and expected["models"]

    env = PipelineEnv(
        root=tmp_path / "multiprocess",
        catalog=reference.catalog,
        registry_url=f"sqlite:///{tmp_path / 'multiprocess' / 'var' / 'registry.db'}",
        warehouse=tmp_path / "multiprocess" / "var" / "warehouse.duckdb",
    )
    _production(env, monkeypatch)
    recon = dg.reconstructable(nightly_job_def)
    run_ids = []
    with dg.DagsterInstance.from_config(str(env.dagster_home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        for _ in range(2):
            result = dg.execute_job(recon, instance=instance, raise_on_error=False)
            failures = [e.message for e in result.all_events if e.is_failure]
            assert result.success, failures
            run_ids.append(result.run_id)
            started = [e for e in result.all_events if e.event_type_value == "STEP_WORKER_STARTED"]
            pids = {e.event_specific_data.metadata["pid"].value for e in started}  # type: ignore[union-attr]
            assert len(started) > 1 and len(pids) == len(started)  # every step in a process of its own
            assert mart_contents(env.warehouse) == expected
        for run_id in run_ids:  # recorded in PostgreSQL, visible to the webserver and daemon
            run = instance.get_run_by_id(run_id)
            assert run is not None and run.is_success
        assert instance.event_log_storage.get_concurrency_info("warehouse").slot_count == 1

    con = duckdb.connect(str(env.warehouse), read_only=True)
    try:
        published = [r for (r,) in con.execute("select run_id from marts.runs order by started_at").fetchall()]
    finally:
        con.close()
    assert published == run_ids
    assert not Warehouse(env.warehouse).builds()  # nothing left behind by the run workers


def test_a_launched_run_fails_before_any_step_while_another_process_holds_the_warehouse(
    tmp_path: Path, dagster_pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _production(make_env(tmp_path), monkeypatch)
    with warehouse_lock_held(env.warehouse, "other-run", 120):
        with dg.DagsterInstance.from_config(str(env.dagster_home)) as instance:
            result = dg.execute_job(dg.reconstructable(nightly_job_def), instance=instance, raise_on_error=False)
        assert not result.success
        assert not [e for e in result.all_events if e.event_type_value == "STEP_START"]
        assert any("another capplan run is refreshing" in repr(e.event_specific_data) for e in result.all_events)
        assert not env.warehouse.exists() and not Warehouse(env.warehouse).builds()


def test_a_launched_run_whose_step_fails_publishes_nothing_and_leaves_no_build_or_lock_behind(
    tmp_path: Path, dagster_pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _production(make_env(tmp_path), monkeypatch)
    with dg.DagsterInstance.from_config(str(env.dagster_home)) as instance:
        result = dg.execute_job(  # publish alone, on a fresh build: it finds no raw.models and fails
            dg.reconstructable(nightly_job_def),
            instance=instance,
            raise_on_error=False,
            asset_selection=[dg.AssetKey(["marts", "runs"])],
        )
    assert not result.success
    failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    started = [e.step_key for e in result.all_events if e.event_type_value == "STEP_START"]
    assert failed == started == ["marts__runs"]
    assert not env.warehouse.exists() and not Warehouse(env.warehouse).builds()
    probe = "import sys; from warehouse.publish import Warehouse; Warehouse(sys.argv[1]).lock('next').acquire()"
    subprocess.run([sys.executable, "-c", probe, str(env.warehouse)], cwd=PROJECT_ROOT, check=True, timeout=60)
