"""Marts: the relations platform teams query, and the run that publishes them atomically.

Group `marts`. Each mart is pure SQL over staging (`warehouse/marts/<table>.sql`, rows stamped
with the run id and date). `marts/runs` depends on every mart: it records the run's provenance,
appends each mart to its history table and swaps the new snapshot in (`warehouse.publish`).
"""

from collections.abc import Iterable

import dagster as dg

from pipelines.assets.common import describe, key, sql_asset, sum_over_partitions
from pipelines.executor import WAREHOUSE_POOL
from pipelines.resources import RegistryResource, WarehouseResource
from warehouse.provenance import frame_sha256, run_provenance

MARTS_GROUP = "marts"

staging_ingest_errors = sql_asset("staging", "ingest_errors", group_name=MARTS_GROUP)
marts_models = sql_asset("marts", "models", group_name=MARTS_GROUP)
marts_gpus = sql_asset("marts", "gpus", group_name=MARTS_GROUP)
marts_deployments = sql_asset("marts", "deployments", group_name=MARTS_GROUP)
marts_capacity_grid = sql_asset("marts", "capacity_grid", group_name=MARTS_GROUP)
marts_context_limits = sql_asset("marts", "context_limits", group_name=MARTS_GROUP)
# History kept in place (run-keyed raw tables): views over every retained run (the current-run
# marts defined over them are those views at the published run).
marts_deployments_history = sql_asset("marts", "deployments_history", group_name=MARTS_GROUP)
marts_capacity_grid_history = sql_asset("marts", "capacity_grid_history", group_name=MARTS_GROUP)
marts_context_limits_history = sql_asset("marts", "context_limits_history", group_name=MARTS_GROUP)
marts_ingest_errors = sql_asset("marts", "ingest_errors", group_name=MARTS_GROUP)
# what changed since the previous run and why (a view over the history; no history of its own)
marts_grid_diff = sql_asset("marts", "grid_diff", group_name=MARTS_GROUP)


@dg.asset_check(
    asset=key("marts", "capacity_grid"),
    blocking=True,
    additional_deps=[key("raw", "capacity_grid"), key("raw", "deployments")],
    description="One row per deployment and per deployment x context, and the mart's joins add or drop none.",
)
def capacity_grid_unique(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    with warehouse.read() as con:
        row = con.execute(
            """
            select
                (select count(*) from marts.capacity_grid),
                (select count(*) - count(distinct gpu) from staging.gpus)
            """
        ).fetchone()
        mart_rows, duplicate_gpus = (int(v) for v in row) if row else (0, 0)
        counts = sum_over_partitions(
            con,
            """
            select
                (select count(*) from raw.capacity_grid where part_id = $p),
                (select count(*) from (select distinct deployment_id, context from raw.capacity_grid
                    where part_id = $p)),
                (select count(*) from raw.deployments where part_id = $p),
                (select count(*) from (
                    select distinct model, gpu, engine, engine_version, weight_dtype, kv_dtype, tp, pp, dp, ep
                    from raw.deployments where part_id = $p
                ))
            """,
        )
    raw_rows, distinct, deployments, distinct_deployments = counts or (0, 0, 0, 0)
    return dg.AssetCheckResult(
        passed=mart_rows == raw_rows == distinct and deployments == distinct_deployments and duplicate_gpus == 0,
        metadata={
            "mart_rows": mart_rows,
            "raw_rows": raw_rows,
            "distinct_deployment_contexts": distinct,
            "deployments": deployments,
            "distinct_deployment_keys": distinct_deployments,
            "duplicate_gpu_ids": duplicate_gpus,
        },
    )


def publish_asset(marts: Iterable[dg.AssetKey]) -> dg.AssetsDefinition:
    """`marts/runs`: depends on every mart given, and publishes the run's snapshot."""
    upstream: list[dg.AssetKey] = sorted(marts, key=lambda k: tuple(k.path))

    @dg.asset(
        key=key("marts", "runs"),
        deps=upstream,
        group_name=MARTS_GROUP,
        description=describe("marts", "runs"),
        kinds={"duckdb"},
        pool=WAREHOUSE_POOL,  # limit 1 in the instance config: one run publishes at a time
    )
    def publish(
        context: dg.AssetExecutionContext, registry: RegistryResource, warehouse: WarehouseResource
    ) -> dg.MaterializeResult:
        provenance = run_provenance(registry.catalog_path(), registry.user_catalog_path())
        with warehouse.build() as con:
            provenance["input_hashes"] |= {
                "registry_models": frame_sha256(
                    con.sql("select repo_id, config_sha256, checkpoint_bytes from raw.models").pl(),
                    ("repo_id", "config_sha256", "checkpoint_bytes"),
                ),
                "registry_gpus": frame_sha256(
                    con.sql("select slug, content_sha256 from raw.gpus").pl(), ("slug", "content_sha256")
                ),
            }
        row = provenance | {
            "catalog_dir": str(registry.catalog_path()),
            "registry_url": registry.safe_url(),
        }
        result = warehouse.publish(row)
        context.log.info(f"published run {result.run_id} to {result.path} in {result.seconds:.2f} s")
        return dg.MaterializeResult(
            metadata={
                "warehouse": str(result.path.resolve()),
                "published_seconds": dg.MetadataValue.float(round(result.seconds, 3)),
                "file_bytes": result.file_bytes,
                "history_runs": result.history_runs,
                "row_counts": dg.MetadataValue.json(result.row_counts),
                "publish_steps_seconds": dg.MetadataValue.json(result.steps),
                "formula_version": str(provenance["formula_version"]),
                "git_sha": str(provenance["git_sha"]),
            }
        )

    return publish


assets = [
    staging_ingest_errors,
    marts_models,
    marts_gpus,
    marts_deployments,
    marts_capacity_grid,
    marts_context_limits,
    marts_deployments_history,
    marts_capacity_grid_history,
    marts_context_limits_history,
    marts_ingest_errors,
    marts_grid_diff,
]
asset_checks = [capacity_grid_unique]
