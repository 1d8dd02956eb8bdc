"""The real Dagster definitions, materialized in-process against tmp_path (a small catalog).

Two runs back to back: the second replaces the marts rather than adding to them, the marts are
identical apart from the run stamp, and history keeps both runs. A broken model is reported and the
rest of the run goes on; a failing blocking check and a held lock publish nothing.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest

from pipelines.resources import WarehouseResource
from tests.test_warehouse_fixtures import (
    BROKEN_MODEL,
    CATALOG_MODELS,
    NIGHTLY_CORE_GROUPS,
    PipelineEnv,
    exported_env,
    make_env,
    materialize_everything,
    query,
    warehouse_lock_held,
)
from warehouse.lock import read_owner
from warehouse.publish import Warehouse
from warehouse.sql import WAREHOUSE_DIR, columns, header_comment


@pytest.fixture
def pipeline_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PipelineEnv:
    return exported_env(tmp_path, monkeypatch)


MARTS = ("models", "gpus", "deployments", "capacity_grid", "context_limits", "ingest_errors")
RUN_COLUMNS = ("run_id", "run_date")


def _marts_without_run_stamp(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every mart's rows, run_id and run_date left out, in a stable order."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {
            table: con.execute(f"select * exclude (run_id, run_date) from marts.{table} order by all").fetchall()
            for table in MARTS
        }
    finally:
        con.close()


def _header_columns(header: str) -> list[str]:
    """The names after `columns:` in a SQL file's header, up to the next `key:` line."""
    lines = header.split("columns:", 1)[1].splitlines()
    text = [lines[0]] + [line for line in _until_key(lines[1:])]
    return [word for word in re.split(r"[,\s]+", " ".join(text)) if word]


def _until_key(lines: list[str]) -> list[str]:
    taken = []
    for line in lines:
        if re.match(r"^[a-z][a-z _]*:", line.strip()):
            break
        taken.append(line)
    return taken


def _core_relations() -> list[tuple[str, str]]:
    """(layer, table) of the staging and marts assets of the groups these tests materialize."""
    from pipelines.definitions import build_definitions

    defs = build_definitions()

    graph = defs.resolve_asset_graph()
    keys = [k for k in graph.get_all_asset_keys() if graph.get(k).group_name in NIGHTLY_CORE_GROUPS]
    return sorted((k.path[0], k.path[1]) for k in keys if k.path[0] in ("staging", "marts"))


def _check_results(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    evaluations = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return {ev.check_name: ev.passed for ev in evaluations}  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def twice(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The pipeline materialized twice on the same registry and warehouse."""
    env = make_env(tmp_path_factory.mktemp("pipeline"))
    results = []
    snapshots = []
    for _ in range(2):
        result = materialize_everything(env)
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        results.append(result)
        snapshots.append(_marts_without_run_stamp(env.warehouse))
    return {"env": env, "results": results, "snapshots": snapshots}


def test_every_check_passes(twice: dict[str, Any]) -> None:
    """The checks of these groups (telemetry and recommendations checks are tested with them)."""
    for result in twice["results"]:
        assert _check_results(result) == {
            "grid_not_empty": True,
            "no_negative_budgets": True,
            "every_catalog_model_planned_or_reported": True,
            "grid_matches_scalar_estimate": True,
            "capacity_grid_unique": True,
        }


def test_a_second_run_replaces_the_marts_and_keeps_both_in_history(twice: dict[str, Any]) -> None:
    env: PipelineEnv = twice["env"]
    first, second = (r.run_id for r in twice["results"])
    runs = query(env.warehouse, "select run_id, models, gpus, capacity_grid_rows from marts.runs order by started_at")
    assert [r[0] for r in runs] == [first, second]
    assert runs[0][1:] == runs[1][1:]
    grid_rows = runs[1][3]
    assert grid_rows > 0
    assert query(env.warehouse, "select count(*), min(run_id), max(run_id) from marts.capacity_grid") == [
        (grid_rows, second, second)
    ], "the current mart holds only the latest run"
    for table in MARTS:
        history = query(
            env.warehouse, f"select run_id, count(*) from marts.{table}_history group by 1 order by min(run_date), 1"
        )
        current = query(env.warehouse, f"select count(*) from marts.{table}")[0][0]
        if current:
            assert sorted(history) == sorted([(first, current), (second, current)]), table
    assert not Warehouse(env.warehouse).builds(), "no build left behind"
    assert read_owner(Warehouse(env.warehouse).lock_path).pid is None, "the lock was released"


def test_two_runs_back_to_back_give_identical_marts(twice: dict[str, Any]) -> None:
    first, second = twice["snapshots"]
    assert set(first) == set(MARTS)
    assert first == second
    assert len(first["models"]) == len(CATALOG_MODELS)


def test_the_issue_query_answers(twice: dict[str, Any]) -> None:
    env: PipelineEnv = twice["env"]
    rows = query(
        env.warehouse,
        "select gpu, max(b_max) from marts.capacity_grid "
        "where model = 'meta-llama/Llama-3.1-70B-Instruct' and context = 32768 group by gpu order by gpu",
    )
    assert [gpu for gpu, _ in rows] == ["h100-sxm-80gb", "l4-24gb"]
    assert dict(rows)["h100-sxm-80gb"] > 0


def test_every_mart_column_is_documented_and_listed_in_the_header(twice: dict[str, Any]) -> None:
    env: PipelineEnv = twice["env"]
    con = duckdb.connect(str(env.warehouse), read_only=True)
    try:
        for layer, table in _core_relations():
            path = WAREHOUSE_DIR / layer / f"{table}.sql"
            names = [name for name, _type, _comment in columns(con, layer, table)]
            assert names, f"{layer}.{table} is missing from the warehouse"
            listed = _header_columns(header_comment(path.read_text(encoding="utf-8")))
            if table != "runs":
                assert listed == names, f"{layer}.{table}: header columns differ from the relation"
            if layer == "marts":
                undocumented = [n for n, _t, comment in columns(con, layer, table) if not comment]
                assert not undocumented, f"marts.{table}: no COMMENT ON for {undocumented}"
        for table in MARTS:  # history tables carry the same documentation
            missing = [n for n, _t, c in columns(con, "marts", f"{table}_history") if not c]
            assert not missing, f"marts.{table}_history: {missing}"
    finally:
        con.close()


def test_runs_record_provenance(twice: dict[str, Any]) -> None:
    env: PipelineEnv = twice["env"]
    (row,) = query(
        env.warehouse,
        "select formula_version, engine_profiles_sha256, input_hashes->>'catalog_models_yaml', "
        "input_hashes->>'registry_models', duration_s, capplan_version, dagster_version "
        "from marts.runs order by started_at desc limit 1",
    )
    formula, profiles, catalog_hash, registry_hash, duration, version, dagster_version = row
    assert len(formula) >= 16 and len(profiles) == 64
    assert len(catalog_hash) == 64 and len(registry_hash) == 64
    assert duration > 0 and version and dagster_version == dg.__version__


def test_a_model_that_fails_to_parse_is_reported_and_the_rest_goes_on(tmp_path: Path) -> None:
    env = make_env(tmp_path, broken=True)
    result = materialize_everything(env)
    assert result.success
    assert _check_results(result)["every_catalog_model_planned_or_reported"]
    errors = query(env.warehouse, "select source, item_key, stage, reason from marts.ingest_errors")
    assert [(e[0], e[1]) for e in errors] == [("registry_models", BROKEN_MODEL)]
    stage, reason = errors[0][2], errors[0][3]
    assert stage == "json" and "JSON" in reason and BROKEN_MODEL in reason
    planned = query(env.warehouse, "select distinct model from marts.capacity_grid order by 1")
    assert [m for (m,) in planned] == sorted(CATALOG_MODELS)


@pytest.mark.slow  # two whole materializations: the slow group holds those
def test_a_failing_blocking_check_publishes_nothing(pipeline_env: PipelineEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    assert materialize_everything(pipeline_env).success
    before = query(pipeline_env.warehouse, "select run_id from marts.runs")
    from pipelines.assets import capacity
    from warehouse.capacity_grid import Mismatch

    monkeypatch.setattr(capacity, "compare_sample", lambda *a: (1, [Mismatch("m", "g", "s", "b_max", 1, 2)]))
    result = materialize_everything(pipeline_env)
    assert not result.success
    assert _check_results(result)["grid_matches_scalar_estimate"] is False
    assert query(pipeline_env.warehouse, "select run_id from marts.runs") == before
    assert not Warehouse(pipeline_env.warehouse).builds(), "the failed run's build was discarded"


def test_a_second_run_stops_with_a_clear_message_while_one_runs(pipeline_env: PipelineEnv) -> None:
    with warehouse_lock_held(pipeline_env.warehouse, "holder", 60) as holder:
        result = materialize_everything(pipeline_env)
        assert not result.success
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        message = failure.step_failure_data.error.cause.message  # type: ignore[union-attr]
        assert "WarehouseBusy" in failure.step_failure_data.error.cause.cls_name  # type: ignore[union-attr]
        assert f"pid {holder.pid}" in message and "run holder" in message
        assert not pipeline_env.warehouse.exists(), "nothing was published"
    assert materialize_everything(pipeline_env).success, "the lock died with its holder"


@pytest.mark.slow  # two whole materializations, one after the other
def test_a_second_run_can_wait_for_the_first(pipeline_env: PipelineEnv) -> None:
    with warehouse_lock_held(pipeline_env.warehouse, "holder", 2):
        assert materialize_everything(pipeline_env, lock_wait_s=60).success


def test_checks_are_plain_functions(tmp_path: Path) -> None:
    """The grid checks called directly on a published warehouse with a bad grid."""
    from pipelines.assets.capacity import grid_not_empty, no_negative_budgets

    store = Warehouse(tmp_path / "wh.duckdb")
    with store.lock("bad"):
        store.begin("bad")
        with store.connect("bad") as con:
            con.execute(
                """
                create table raw.grid_partitions as
                select 'bad' as run_id, current_date as run_date, 'llama' as partition, 7::bigint as part_id,
                    true as computed
                """
            )
            con.execute(
                """
                create table raw.deployments as
                select 7::bigint as part_id, * from (values
                    (0::bigint, -1::bigint, 10::bigint, 100::bigint, 1::bigint, 1::bigint, 1::bigint),
                    (1::bigint, 5::bigint, 0::bigint, 0::bigint, 1::bigint, 1::bigint, 1::bigint)
                ) as t(deployment_id, kv_budget_bytes_per_gpu, num_blocks, kv_cache_tokens,
                       weights_bytes_per_gpu, overhead_bytes_per_gpu, kv_bytes_per_token)
                """
            )
            con.execute(
                """
                create table raw.capacity_grid as
                select 7::bigint as part_id, * from (values
                                      (0::bigint, 1024, 1.5, 5::bigint, 5::bigint, true),
                                      (1::bigint, 1024, 0.0, 0::bigint, 0::bigint, false))
                    as t(deployment_id, context, max_concurrency, b_max_memory, b_max, fits)
                """
            )
        store.publish("bad", {"started_at": dt.datetime.now(dt.UTC)})
    warehouse = WarehouseResource(path=str(store.path))
    assert grid_not_empty(warehouse=warehouse).passed
    verdict = no_negative_budgets(warehouse=warehouse)
    assert not verdict.passed
    assert verdict.metadata["fits_without_budget"].value == 1
