"""The partitioned grid through `capplan nightly`: one partition per model family, recomputed only
when its inputs change or a backfill names it, its rows stored once however many runs publish it.

Runs, on the small test catalog (Llama-3.1-8B and -70B: partition `llama`; Qwen3-32B: `qwen3`):
1. a nightly; 2. the same again (nothing changed); then Qwen3-32B's config is edited in the catalog
(max_position_embeddings 40,960 -> 32,768) and 3. `capplan nightly --partition qwen3` backfills it;
and, in a fresh directory with the edited catalog, 4. a full recompute to compare against.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from tests.test_warehouse_fixtures import PipelineEnv, make_env, query
from warehouse.capacity_grid import PARTITION_ID_SHIFT
from warehouse.publish import Warehouse

QWEN = "Qwen/Qwen3-32B"
QWEN_CONFIG = Path("configs/Qwen/Qwen3-32B/config.json")
GRID_MARTS = ("deployments", "capacity_grid", "context_limits")
HISTORY_MARTS = (*GRID_MARTS, "effective_context_limits")


def _nightly(env: PipelineEnv, *args: str) -> str:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.env().items():
            patch.setenv(name, value)
        result = CliRunner().invoke(app, ["nightly", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _run_ids(env: PipelineEnv) -> list[str]:
    return [r[0] for r in query(env.warehouse, "select run_id from marts.runs order by started_at")]


def _partitions(env: PipelineEnv, run_id: str) -> dict[str, tuple[Any, ...]]:
    rows = query(
        env.warehouse,
        "select partition, part_key, part_id, computed_by_run_id, computed, grid_rows, deployments "
        "from raw.grid_partitions where run_id = $run order by partition",
        {"run": run_id},
    )
    return {r[0]: r[1:] for r in rows}


def _current(path: Path, mart: str) -> list[tuple[Any, ...]]:
    return query(path, f"select * exclude (run_id, run_date) from marts.{mart} order by all")


def _staged_files(env: PipelineEnv) -> list[str]:
    with dg.DagsterInstance.from_config(str(env.dagster_home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["raw", "grid_partitions"]))
        assert event is not None and event.asset_materialization is not None
        return list(event.asset_materialization.metadata["staged_parquet_files"].value)  # type: ignore[arg-type]


def _edit_qwen(catalog: Path) -> None:
    path = catalog / QWEN_CONFIG
    config = json.loads(path.read_text(encoding="utf-8"))
    assert config["max_position_embeddings"] == 40960
    config["max_position_embeddings"] = 32768
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    env = make_env(tmp_path_factory.mktemp("partitions"))
    snapshots: list[dict[str, list[tuple[Any, ...]]]] = []
    staged: list[list[str]] = []

    outputs: list[str] = []

    def one(*args: str) -> None:
        outputs.append(_nightly(env, *args))
        # what a full copy per run would have kept: each mart as published, run stamp included
        snapshots.append({m: query(env.warehouse, f"select * from marts.{m} order by all") for m in HISTORY_MARTS})
        staged.append(_staged_files(env))

    one()
    one()
    _edit_qwen(env.catalog)
    one("--partition", "qwen3")
    fresh = make_env(tmp_path_factory.mktemp("fresh"))
    _edit_qwen(fresh.catalog)
    _nightly(fresh)
    yield {
        "env": env,
        "fresh": fresh,
        "snapshots": snapshots,
        "staged": staged,
        "outputs": outputs,
        "run_ids": _run_ids(env),
    }


@pytest.mark.slow  # four whole nightlies in the module fixture (~90 s on 2 cores)
def test_the_grid_is_partitioned_by_model_family(runs: dict[str, Any]) -> None:
    env: PipelineEnv = runs["env"]
    first = _partitions(env, runs["run_ids"][0])
    assert sorted(first) == ["llama", "qwen3"]
    assert all(row[3] for row in first.values())  # computed by the first run
    by_model = query(
        env.warehouse,
        "select model, count(distinct deployment_id // (1::bigint << $shift)) from marts.deployments group by model",
        {"shift": PARTITION_ID_SHIFT},
    )
    assert all(n == 1 for _model, n in by_model)  # a partition's deployment ids share their high bits
    assert not Warehouse(env.warehouse).stages()  # the staging area went with the publish


@pytest.mark.slow  # four whole nightlies in the module fixture (~90 s on 2 cores)
def test_an_unchanged_night_reuses_every_partition_and_stores_no_rows_again(runs: dict[str, Any]) -> None:
    env: PipelineEnv = runs["env"]
    run1, run2, _run3 = runs["run_ids"]
    first, second = _partitions(env, run1), _partitions(env, run2)
    assert {name: row[:3] for name, row in second.items()} == {name: row[:3] for name, row in first.items()}
    assert not any(row[3] for row in second.values())  # nothing computed
    assert "partitions      2 (0 computed, 2 unchanged: reused; see raw.grid_partitions)" in runs["outputs"][1]
    assert "partitions      2 (2 computed, 0 unchanged" in runs["outputs"][0]
    assert all(row[2] == run1 for row in second.values())
    assert runs["staged"][1] == []  # and nothing staged
    # the grid of two runs is stored once: one row per row of each partition version
    stored = query(env.warehouse, "select count(*) from raw.capacity_grid")[0][0]
    versions = query(env.warehouse, "select sum(grid_rows) from (select distinct part_id, grid_rows from raw.grid_partitions)")
    assert stored == versions[0][0]


@pytest.mark.slow  # four whole nightlies in the module fixture (~90 s on 2 cores)
def test_a_backfill_recomputes_only_its_partition(runs: dict[str, Any]) -> None:
    env: PipelineEnv = runs["env"]
    _run1, run2, run3 = runs["run_ids"]
    before, after = _partitions(env, run2), _partitions(env, run3)
    assert after["llama"] == before["llama"]  # same version, computed by run 1, reused
    assert after["qwen3"][0] != before["qwen3"][0] and after["qwen3"][2:4] == (run3, True)
    assert runs["staged"][2] and all(f.startswith("qwen3/") for f in runs["staged"][2])
    assert {f.rsplit("/", 1)[1] for f in runs["staged"][2]} == {
        "deployments.parquet",
        "capacity_grid.parquet",
        "context_limits.parquet",
    }
    old, new = runs["snapshots"][1], runs["snapshots"][2]
    for mart in GRID_MARTS:  # llama's rows untouched, ids included; qwen3's changed
        llama = [[r[2:] for r in s[mart] if r[3] != QWEN] for s in (old, new)]
        assert llama[0] == llama[1] and llama[0], mart
        qwen = [[r[2:] for r in s[mart] if r[3] == QWEN] for s in (old, new)]
        assert qwen[0] != qwen[1] and qwen[1], mart
    # the edit removes the 40,960-token context: one grid row fewer per Qwen3 deployment
    deployments = after["qwen3"][5]
    assert deployments == before["qwen3"][5] and after["qwen3"][4] == before["qwen3"][4] - deployments
    contexts = query(env.warehouse, "select max(context) from marts.capacity_grid where model = $m", {"m": QWEN})
    assert contexts == [(32768,)]


@pytest.mark.slow  # four whole nightlies in the module fixture (~90 s on 2 cores)
def test_the_backfilled_marts_equal_a_full_recompute(runs: dict[str, Any]) -> None:
    env: PipelineEnv = runs["env"]
    fresh: PipelineEnv = runs["fresh"]
    for mart in (*GRID_MARTS, "effective_context_limits", "recommended_placements", "procurement_plan"):
        assert _current(env.warehouse, mart) == _current(fresh.warehouse, mart), mart


@pytest.mark.slow  # four whole nightlies in the module fixture (~90 s on 2 cores)
def test_history_reads_as_the_old_full_copy_per_run_would(runs: dict[str, Any]) -> None:
    env: PipelineEnv = runs["env"]
    for mart in HISTORY_MARTS:
        copies = sorted(row for snapshot in runs["snapshots"] for row in snapshot[mart])
        history = query(env.warehouse, f"select * from marts.{mart}_history order by all")
        assert history == copies, mart
    runs_by_version = query(
        env.warehouse, "select count(distinct run_id), count(distinct part_id) from raw.limit_partitions"
    )
    assert runs_by_version == [(3, 3)]  # 3 runs x 2 partitions publish 3 versions of the limits


@pytest.mark.slow  # four whole nightlies in the module fixture (~90 s on 2 cores)
def test_a_backfill_of_an_unknown_partition_says_which_exist(runs: dict[str, Any]) -> None:
    env: PipelineEnv = runs["env"]
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.env().items():
            patch.setenv(name, value)
        result = CliRunner().invoke(app, ["nightly", "--partition", "nope"])
    assert result.exit_code == 1
    assert "no partition 'nope' in the catalog; partitions: llama, qwen3" in result.output
    assert "Traceback" not in result.output
    assert _run_ids(env) == runs["run_ids"]  # nothing published


def test_publish_drops_partition_versions_no_retained_run_refers_to(tmp_path: Path) -> None:
    store = Warehouse(tmp_path / "wh.duckdb", history_runs=1)
    for run, parts in (("r1", (1, 2)), ("r2", (2, 3))):
        with store.lock(run):
            store.begin(run)
            with store.connect(run) as con:
                con.execute(
                    "create table if not exists raw.grid_partitions (run_id varchar, run_date date, part_id bigint)"
                )
                con.execute("create table if not exists raw.capacity_grid (part_id bigint, context bigint)")
                for part in parts:
                    con.execute("insert into raw.grid_partitions values ($run, current_date, $p)", {"run": run, "p": part})
                    con.execute("delete from raw.capacity_grid where part_id = $p", {"p": part})
                    con.execute("insert into raw.capacity_grid values ($p, 1024), ($p, 2048)", {"p": part})
            store.stage_path(run).mkdir()
            store.publish(run, {"started_at": dt.datetime.now(dt.UTC)})
        assert not store.stage_path(run).exists()
    kept = query(store.path, "select part_id, count(*) from raw.capacity_grid group by 1 order by 1")
    assert kept == [(2, 2), (3, 2)]  # r1 trimmed (history_runs=1): its part 1 went with it


def _to_layout_before_partitions(path: Path) -> None:
    """Rewrite a published warehouse as the nightly before partitions wrote it: the grid's raw
    tables keyed by run_id (every run's rows), effective_context_limits_history a table of copies."""
    con = duckdb.connect(str(path))
    try:
        for table in GRID_MARTS:
            con.execute(f"create table raw.{table}_old as select * from staging.{table}")
        con.execute(
            "create table marts.ecl_old as select * from marts.effective_context_limits_history; "
            "drop view marts.effective_context_limits; drop view marts.effective_context_limits_history; "
            "alter table marts.ecl_old rename to effective_context_limits_history; "
            "create or replace view marts.effective_context_limits as "
            "select * from marts.effective_context_limits_history where run_id = (select run_id from raw.run); "
            "create or replace table raw.effective_context_limits as "
            "select * exclude (run_id, run_date) from marts.effective_context_limits_history; "
            "drop table raw.grid_limits; drop table raw.limit_partitions; drop table raw.grid_partitions"
        )
        for table in GRID_MARTS:
            con.execute(f"drop table raw.{table}; alter table raw.{table}_old rename to {table}")
    finally:
        con.close()


@pytest.mark.slow  # two whole nightlies (~40 s on 2 cores)
def test_a_warehouse_from_before_partitions_keeps_its_history(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    _nightly(env)
    before = {m: query(env.warehouse, f"select * from marts.{m} order by all") for m in HISTORY_MARTS}
    _to_layout_before_partitions(env.warehouse)
    assert "part_id" not in {r[0] for r in query(env.warehouse, "describe raw.capacity_grid")}
    _nightly(env)
    first, second = _run_ids(env)
    for mart in HISTORY_MARTS:
        kept = query(env.warehouse, f"select * from marts.{mart}_history where run_id = $r order by all", {"r": first})
        assert kept == before[mart], mart
        assert _current(env.warehouse, mart) == [row[2:] for row in before[mart]], mart  # same catalog, same rows
    legacy = query(env.warehouse, "select partition, computed_by_run_id from raw.grid_partitions where run_id = $r", {"r": first})
    assert legacy == [("all", first)]
    assert sorted(_partitions(env, second)) == ["llama", "qwen3"]


def _models(rows: Sequence[tuple[str, str | None, str]]) -> Any:
    import polars as pl

    return pl.DataFrame(
        {"repo_id": [r[0] for r in rows], "family": [r[1] for r in rows], "config_json": [r[2] for r in rows]},
        schema={"repo_id": pl.String, "family": pl.String, "config_json": pl.String},
    )


def test_partition_names_are_safe_file_names_and_big_families_split_in_buckets() -> None:
    from warehouse.capacity_grid import MODELS_PER_PARTITION, partition_name, partition_names

    assert partition_name("Qwen3 MoE/../x") == "qwen3_moe_x"
    assert partition_name(None) == partition_name("") == partition_name("../") == "other"
    assert MODELS_PER_PARTITION == 32
    small = partition_names(_models([(f"a/m{i}", "llama", "{}") for i in range(32)]))
    assert set(small.to_list()) == {"llama"}
    big = partition_names(_models([(f"a/m{i}", "llama", "{}") for i in range(33)]))
    assert set(big.to_list()) <= {"llama-0", "llama-1"} and big.n_unique() == 2  # ceil(33 / 32) buckets
    again = partition_names(_models([(f"a/m{i}", "llama", "{}") for i in range(33)][::-1]))
    assert dict(zip([f"a/m{i}" for i in range(33)][::-1], again.to_list(), strict=True)) == dict(
        zip([f"a/m{i}" for i in range(33)], big.to_list(), strict=True)
    )  # by repo id, not by row order


def test_a_partition_key_follows_its_own_models_only() -> None:
    import polars as pl

    from warehouse.capacity_grid import grid_partitions

    gpus = pl.DataFrame(schema={"slug": pl.String})
    rows = [("a/l1", "llama", '{"x": 1}'), ("a/l2", "llama", '{"x": 2}'), ("b/q1", "qwen3", '{"y": 1}')]
    before = {p.name: p.part_key for p in grid_partitions(_models(rows), gpus, code_version="c")}
    edited = [*rows[:2], ("b/q1", "qwen3", '{"y": 2}')]
    after = {p.name: p.part_key for p in grid_partitions(_models(edited), gpus, code_version="c")}
    assert after["llama"] == before["llama"] and after["qwen3"] != before["qwen3"]
    other_code = {p.name: p.part_key for p in grid_partitions(_models(rows), gpus, code_version="d")}
    assert other_code["llama"] != before["llama"]  # other capacity code: every partition again
