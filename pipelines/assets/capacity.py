"""Capacity grid: every model x GPU x dtype x KV dtype x parallelism x context x engine profile.

Group `capacity`. One asset computes the grid and the context limits with
`capacity.grid` (Polars) from the run's `raw.models` and `raw.gpus`, and writes them to `raw`
itself (no IO manager pickles the frame). Blocking checks guard the publish: a grid that fails
one never reaches the marts.
"""

import time
from collections.abc import Iterator

import dagster as dg

from models_registry.sources.bundled import read_catalog_entries
from pipelines.assets.common import describe, key, relation_result, sql_asset
from pipelines.resources import RegistryResource, WarehouseResource
from warehouse.capacity_grid import capacity_frames, compare_sample
from warehouse.sql import load_frame

CAPACITY_GROUP = "capacity"
GRID = key("raw", "capacity_grid")
SAMPLE_ROWS_PER_MODEL = 2


def _raw_spec(table: str, kinds: set[str]) -> dg.AssetSpec:
    return dg.AssetSpec(
        key("raw", table),
        description=describe("raw", table),
        deps=[key("raw", "models"), key("raw", "gpus")],
        kinds=kinds,
    )


@dg.multi_asset(
    name="capacity_grid",
    specs=[
        _raw_spec("deployments", {"duckdb", "polars"}),
        _raw_spec("capacity_grid", {"duckdb", "polars"}),
        _raw_spec("context_limits", {"duckdb", "polars"}),
        _raw_spec("grid_errors", {"duckdb"}),
    ],
    group_name=CAPACITY_GROUP,
)
def capacity_grid(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> Iterator[dg.MaterializeResult]:
    """Compute the grid and the context limits for the run's models and GPUs; write them to raw."""
    with warehouse.build() as con:
        models = con.sql("select * from raw.models").pl()
        gpus = con.sql("select * from raw.gpus").pl()
        start = time.perf_counter()
        frames = capacity_frames(models, gpus)
        computed = time.perf_counter() - start
        context.log.info(
            f"grid: {frames.grid.height:,} rows, {frames.deployments.height:,} deployments, {frames.models} models "
            f"x {gpus.height} GPUs in {computed:.2f} s"
        )
        start = time.perf_counter()
        run = warehouse.run_params()  # these three keep every retained run's rows, keyed by run_id
        load_frame(con, "raw", "deployments", frames.deployments, run)
        load_frame(con, "raw", "capacity_grid", frames.grid, run)
        load_frame(con, "raw", "context_limits", frames.context_limits, run)
        load_frame(con, "raw", "grid_errors", frames.errors)
        written = time.perf_counter() - start
        timing = {
            "compute_seconds": dg.MetadataValue.float(round(computed, 3)),
            "write_seconds": dg.MetadataValue.float(round(written, 3)),
            "models": frames.models,
            "gpus": gpus.height,
        }
        yield relation_result(con, "raw", "deployments")
        yield relation_result(con, "raw", "capacity_grid", timing)
        yield relation_result(con, "raw", "context_limits")
        yield relation_result(con, "raw", "grid_errors")


staging_deployments = sql_asset("staging", "deployments", group_name=CAPACITY_GROUP)
staging_capacity_grid = sql_asset("staging", "capacity_grid", group_name=CAPACITY_GROUP)
staging_context_limits = sql_asset("staging", "context_limits", group_name=CAPACITY_GROUP)

# Checks read raw (this run's rows): they run right after the grid asset, before any staging view.
RAW_WIDE_GRID = """
    select d.* exclude (run_id, run_date), g.context, g.max_concurrency, g.b_max_memory, g.b_max, g.fits
    from raw.capacity_grid as g
    inner join raw.deployments as d on g.run_id = d.run_id and g.deployment_id = d.deployment_id
    where g.run_id = (select run_id from raw.run)
"""


@dg.asset_check(asset=GRID, blocking=True, description="The grid has rows.")
def grid_not_empty(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    with warehouse.read() as con:
        row = con.execute(
            "select count(*) from raw.capacity_grid where run_id = (select run_id from raw.run)"
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
        row = con.execute(
            """
            select
                count(*) filter (where fits and (kv_budget_bytes_per_gpu <= 0 or num_blocks <= 0 or b_max < 1)),
                count(*) filter (
                    where num_blocks < 0 or kv_cache_tokens < 0 or b_max < 0 or b_max_memory < 0
                    or weights_bytes_per_gpu < 0 or overhead_bytes_per_gpu < 0 or kv_bytes_per_token < 0
                ),
                count(*) filter (where fits)
            from (
            """
            + RAW_WIDE_GRID
            + ")"
        ).fetchone()
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
                "select distinct model from raw.deployments where run_id = (select run_id from raw.run)"
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
    description=f"A repeatable sample of {SAMPLE_ROWS_PER_MODEL} grid rows per model equals the scalar "
    "`capplan estimate` (capacity.memory.estimate) in every shared column.",
)
def grid_matches_scalar_estimate(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    with warehouse.read() as con:
        sample = con.execute(
            "select * from ("
            + RAW_WIDE_GRID
            + """)
            qualify row_number() over (
                partition by model
                order by hash(gpu, engine, engine_version, weight_dtype, kv_dtype, tp, pp, context)
            ) <= $per_model
            """,
            {"per_model": SAMPLE_ROWS_PER_MODEL},
        ).pl()
        models = con.sql("select * from raw.models").pl()
        gpus = con.sql("select * from raw.gpus").pl()
    checked, mismatches = compare_sample(sample, models, gpus)
    return dg.AssetCheckResult(
        passed=checked > 0 and not mismatches,
        metadata={
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
