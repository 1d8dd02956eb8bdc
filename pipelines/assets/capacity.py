"""Capacity grid: every model x GPU x dtype x KV dtype x parallelism x context x engine profile.

Group `capacity`. One asset computes the grid and the context limits with
`capacity.grid` (Polars) from the run's `raw.models` and `raw.gpus`, partition by partition (one
model family each, `warehouse.capacity_grid.refresh_partitions`): only the partitions whose inputs
changed, or those a backfill names (`partitions` in the asset's config), each staged as Parquet and
loaded into the run's build. Blocking checks guard the publish: a grid that fails one never
reaches the marts.
"""

import os
import time
from collections.abc import Iterator

import dagster as dg
import polars as pl
from pydantic import Field

from capacity.engine_constants import (
    TRTLLM_DEFAULT_VERSION,
    VLLM_SUPPORTED_VERSIONS,
    known_vllm_release,
)
from capacity.engines.sglang_constants import SGLANG_DEFAULT_VERSION
from capacity.grid import GridOptions
from models_registry.sources.bundled import read_catalog_entries
from pipelines.assets.common import (
    REGISTRY_DEPS,
    key,
    raw_spec,
    relation_result,
    sql_asset,
    sum_over_partitions,
)
from pipelines.resources import RegistryResource, WarehouseResource
from warehouse.capacity_grid import THIS_RUN_PARTS, PartitionError, compare_sample, refresh_partitions
from warehouse.grid_inputs import grid_input_rows
from warehouse.sql import load_frame

CAPACITY_GROUP = "capacity"
GRID = key("raw", "capacity_grid")
SAMPLE_ROWS_PER_MODEL = 2
VLLM_RELEASE_ENV = "CAPPLAN_VLLM_RELEASE"
SGLANG_RELEASE_ENV = "CAPPLAN_SGLANG_RELEASE"
TRTLLM_RELEASE_ENV = "CAPPLAN_TRTLLM_RELEASE"


class GridConfig(dg.Config):
    """A backfill: recompute only these partitions (model families, as in raw.grid_partitions);
    every other one is published as the last run published it. Empty (the nightly): recompute
    each partition whose inputs changed."""

    partitions: list[str] = Field(default_factory=list, description="Partitions to recompute (empty: what changed).")
    vllm_release: str = Field(
        default="",
        description=f"The vLLM release the grid plans at (empty: {VLLM_RELEASE_ENV}, else the newest capplan knows).",
    )
    sglang_release: str = Field(
        default="", description=f"SGLang's release (empty: {SGLANG_RELEASE_ENV}, else {SGLANG_DEFAULT_VERSION})."
    )
    trtllm_release: str = Field(
        default="", description=f"TensorRT-LLM's release (empty: {TRTLLM_RELEASE_ENV}, else {TRTLLM_DEFAULT_VERSION})."
    )


def grid_options(config: GridConfig) -> GridOptions:
    """The grid's options: vLLM at the release the fleet pins (config, then the environment), else the newest;
    SGLang and TensorRT-LLM at the run config's release, then the environment's, else the one their rules were read
    for. A release capplan
    has no rules for (or not a version) fails the run in one line instead of planning at a guess."""
    release = config.vllm_release or os.environ.get(VLLM_RELEASE_ENV, "")
    if release and not known_vllm_release(release):
        raise dg.Failure(
            description=f"{VLLM_RELEASE_ENV}={release}: no rules for that vLLM release "
            f"(known: {', '.join(VLLM_SUPPORTED_VERSIONS)})"
        )
    try:
        return GridOptions(
            vllm_version=release or None,
            sglang_version=config.sglang_release or os.environ.get(SGLANG_RELEASE_ENV) or SGLANG_DEFAULT_VERSION,
            trtllm_version=config.trtllm_release or os.environ.get(TRTLLM_RELEASE_ENV) or TRTLLM_DEFAULT_VERSION,
        )
    except ValueError as e:
        raise dg.Failure(description=str(e)) from None


@dg.multi_asset(
    name="capacity_grid",
    specs=[
        raw_spec("deployments", REGISTRY_DEPS),
        raw_spec("capacity_grid", REGISTRY_DEPS),
        raw_spec("context_limits", REGISTRY_DEPS),
        raw_spec("grid_errors", REGISTRY_DEPS, {"duckdb"}),
        raw_spec("grid_partitions", REGISTRY_DEPS, {"duckdb", "parquet"}),
        raw_spec("grid_inputs", REGISTRY_DEPS),
    ],
    group_name=CAPACITY_GROUP,
)
def capacity_grid(
    context: dg.AssetExecutionContext, config: GridConfig, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult]:
    """Bring the grid and the context limits up to date with the run's models and GPUs, one
    partition (model family) at a time; write them to raw."""
    with warehouse.build() as con:
        models = con.sql("select * from raw.models").pl()
        gpus = con.sql("select * from raw.gpus").pl()
        options = grid_options(config)
        start = time.perf_counter()
        try:
            refresh = refresh_partitions(
                con,
                models,
                gpus,
                stage_dir=warehouse.stage_dir(),
                run=warehouse.run_params(),
                options=options,
                backfill=config.partitions or None,
            )
        except PartitionError as exc:
            raise dg.Failure(description=str(exc)) from None
        load_frame(con, "raw", "grid_errors", refresh.errors)
        inputs = grid_input_rows(models, gpus, options).with_columns(
            pl.lit(warehouse.started_at).alias("run_started_at")
        )
        load_frame(con, "raw", "grid_inputs", inputs, warehouse.run_params())
        elapsed = time.perf_counter() - start
        context.log.info(
            f"grid: {refresh.grid_rows:,} rows, {refresh.deployments:,} deployments, {refresh.models} models "
            f"x {gpus.height} GPUs; partitions computed {len(refresh.computed)} ({refresh.compute_seconds:.2f} s, "
            f"loaded in {refresh.load_seconds:.2f} s), reused {len(refresh.reused)}"
        )
        timing = {
            "seconds": dg.MetadataValue.float(round(elapsed, 3)),
            "compute_seconds": dg.MetadataValue.float(round(refresh.compute_seconds, 3)),
            "load_seconds": dg.MetadataValue.float(round(refresh.load_seconds, 3)),
            "models": refresh.models,
            "gpus": gpus.height,
        }
        partitions = {
            "partitions_computed": dg.MetadataValue.json(refresh.computed),
            "partitions_reused": dg.MetadataValue.json(refresh.reused),
            "staged_parquet_files": dg.MetadataValue.json(refresh.files),
            "staged_parquet_bytes": refresh.parquet_bytes,
        }
        yield relation_result(con, "raw", "deployments")
        yield relation_result(con, "raw", "capacity_grid", timing)
        yield relation_result(con, "raw", "context_limits")
        yield relation_result(con, "raw", "grid_errors")
        yield relation_result(con, "raw", "grid_partitions", partitions)
        yield relation_result(con, "raw", "grid_inputs")


staging_deployments = sql_asset("staging", "deployments", group_name=CAPACITY_GROUP)
staging_capacity_grid = sql_asset("staging", "capacity_grid", group_name=CAPACITY_GROUP)
staging_context_limits = sql_asset("staging", "context_limits", group_name=CAPACITY_GROUP)

# Checks read raw (this run's rows): they run right after the grid asset, before any staging view.
# partitions this run computed: the scalar cross-check samples those (reused ones were checked when computed)
COMPUTED_PARTS = (
    "(select part_id from raw.grid_partitions where run_id = (select run_id from raw.run) and computed)"
)


@dg.asset_check(asset=GRID, blocking=True, description="The grid has rows.")
def grid_not_empty(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    with warehouse.read() as con:
        row = con.execute(
            f"select count(*) from raw.capacity_grid where part_id in {THIS_RUN_PARTS}"
        ).fetchone()
    rows = int(row[0]) if row else 0
    return dg.AssetCheckResult(passed=rows > 0, metadata={"rows": rows})


@dg.asset_check(
    asset=GRID,
    blocking=True,
    additional_deps=[key("raw", "deployments")],
    description="No negative memory or counts anywhere, and where a deployment fits its KV budget "
    "is positive and at least one sequence fits.",
)
def no_negative_budgets(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    with warehouse.read() as con:
        row = sum_over_partitions(
            con,
            """
            select
                count(*) filter (where fits and (kv_budget_bytes_per_gpu <= 0 or num_blocks <= 0 or b_max < 1)),
                count(*) filter (
                    where num_blocks < 0 or kv_cache_tokens < 0 or b_max < 0 or b_max_memory < 0
                    or weights_bytes_per_gpu < 0 or overhead_bytes_per_gpu < 0 or kv_bytes_per_token < 0
                ),
                count(*) filter (where fits)
            from raw.capacity_grid as g
            inner join raw.deployments as d on g.part_id = d.part_id and g.deployment_id = d.deployment_id
            where g.part_id = $p and d.part_id = $p
            """,
        )
    bad_fits, negatives, fitting = (int(v) for v in row) if row else (0, 0, 0)
    return dg.AssetCheckResult(
        passed=bad_fits == 0 and negatives == 0,
        metadata={"fitting_rows": fitting, "fits_without_budget": bad_fits, "negative_values": negatives},
    )


@dg.asset_check(
    asset=GRID,
    blocking=True,
    additional_deps=[key("raw", "deployments"), key("raw", "model_ingest_errors"), key("raw", "grid_errors")],
    description="Every model of the catalog has grid rows or an ingest error that says why not.",
)
def every_catalog_model_planned_or_reported(
    registry: RegistryResource, warehouse: WarehouseResource
) -> dg.AssetCheckResult:
    entries, _errors = read_catalog_entries(registry.catalog_path())
    catalog = {entry.repo_id for entry in entries}
    with warehouse.read() as con:
        planned = {
            str(r[0])
            for r in con.execute(
                f"select distinct model from raw.deployments where part_id in {THIS_RUN_PARTS}"
            ).fetchall()
        }
        reported = {
            str(r[0])
            for r in con.execute(
                "select item_key from raw.model_ingest_errors union select item_key from raw.grid_errors"
            ).fetchall()
        }
    missing = sorted(catalog - planned - reported)
    return dg.AssetCheckResult(
        passed=not missing,
        metadata={
            "catalog_models": len(catalog),
            "planned": len(catalog & planned),
            "reported": len((catalog - planned) & reported),
            "missing": dg.MetadataValue.json(missing[:50]),
        },
    )


@dg.asset_check(
    asset=GRID,
    blocking=True,
    additional_deps=[key("raw", "deployments")],
    description=f"A repeatable sample of {SAMPLE_ROWS_PER_MODEL} grid rows per model of every partition this "
    "run computed equals the scalar `capplan estimate` (capacity.estimate.estimate) in every shared column.",
)
def grid_matches_scalar_estimate(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    with warehouse.read() as con:
        # deployments first (a tenth of the rows), then one context of each: a window over the wide
        # grid would hash all its rows, the nightly's largest memory peak at fleet scale
        sample = con.execute(
            f"""
            with picked as (
                select part_id, deployment_id from raw.deployments where part_id in {COMPUTED_PARTS}
                qualify row_number() over (
                    partition by model order by hash(gpu, engine, engine_version, weight_dtype, kv_dtype, tp, pp)
                ) <= $per_model
            )
            select d.* exclude (part_id), g.context, g.max_concurrency, g.b_max_memory, g.b_max, g.fits
            from picked as p
            join raw.deployments as d using (part_id, deployment_id)
            join raw.capacity_grid as g using (part_id, deployment_id)
            qualify row_number() over (partition by p.part_id, p.deployment_id order by hash(g.context)) = 1
            """,
            {"per_model": SAMPLE_ROWS_PER_MODEL},
        ).pl()
        computed = con.execute(f"select count(*) from raw.deployments where part_id in {COMPUTED_PARTS}").fetchone()
        models = con.execute(
            "select * from raw.models where list_contains($models, repo_id)",
            {"models": sample.get_column("model").unique().to_list() if sample.height else []},
        ).pl()
        gpus = con.sql("select * from raw.gpus").pl()
    checked, mismatches = compare_sample(sample, models, gpus)
    computed_rows = int(computed[0]) if computed else 0
    return dg.AssetCheckResult(
        passed=(checked > 0 or computed_rows == 0) and not mismatches,
        metadata={
            "computed_deployments": computed_rows,
            "rows_checked": checked,
            "mismatches": len(mismatches),
            "first_mismatches": dg.MetadataValue.md("\n".join(f"- {m.line()}" for m in mismatches[:10]) or "none"),
        },
    )


assets = [capacity_grid, staging_deployments, staging_capacity_grid, staging_context_limits]
asset_checks = [
    grid_not_empty,
    no_negative_budgets,
    every_catalog_model_planned_or_reported,
    grid_matches_scalar_estimate,
]
