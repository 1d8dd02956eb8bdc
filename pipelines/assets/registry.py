"""Registry sync and GPU catalog: bring the registry up to date, copy what it holds into `raw`.

Groups `registry` (models) and `gpu_catalog` (GPU SKUs). Each sync runs the Alembic migrations
first and then the registry's idempotent ingest; a rejected item becomes a row of the matching
`raw.*_ingest_errors` table and the rest of the run goes on.
"""

from collections.abc import Iterator

import dagster as dg
import polars as pl

from models_registry.frames import current_models_frame, gpu_skus_frame, ingest_errors_frame, sync_gpus, sync_models
from models_registry.ingest import KindCounts
from pipelines.assets.common import describe, key, relation_result, sql_asset
from pipelines.resources import RegistryResource, WarehouseResource
from warehouse.sql import load_frame

REGISTRY_GROUP = "registry"
GPU_GROUP = "gpu_catalog"


def _raw_specs(table: str, errors_table: str) -> list[dg.AssetSpec]:
    """The raw copy of a registry table and the raw table of the sync's rejects."""
    return [
        dg.AssetSpec(key("raw", table), description=describe("raw", table), kinds={"duckdb", "sqlalchemy"}),
        dg.AssetSpec(key("raw", errors_table), description=describe("raw", errors_table), kinds={"duckdb"}),
    ]


@dg.multi_asset(name="registry_models", specs=_raw_specs("models", "model_ingest_errors"), group_name=REGISTRY_GROUP)
def registry_models(
    context: dg.AssetExecutionContext, registry: RegistryResource, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult]:
    """Migrate the registry, ingest the catalog's models, copy the current revisions to raw."""
    report = sync_models(registry.url, registry.catalog_path())
    context.log.info(_sync_line(registry, "models", report.models))
    counts = _sync_counts("models", report.models) | {"registry_ingest_run_id": report.run_id or 0}
    errors = ingest_errors_frame(report.errors, report.run_id)
    yield from _copy_to_raw(
        warehouse, "models", current_models_frame(registry.url), counts, "model_ingest_errors", errors
    )


@dg.multi_asset(name="gpu_catalog", specs=_raw_specs("gpus", "gpu_ingest_errors"), group_name=GPU_GROUP)
def gpu_catalog(
    context: dg.AssetExecutionContext, registry: RegistryResource, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult]:
    """Migrate the registry, ingest the GPU catalog, copy every SKU to raw."""
    report = sync_gpus(registry.url, registry.catalog_path(), registry.user_catalog_path())
    context.log.info(_sync_line(registry, "GPU SKUs", report.gpus))
    errors = ingest_errors_frame(report.errors, report.run_id)
    yield from _copy_to_raw(
        warehouse, "gpus", gpu_skus_frame(registry.url), _sync_counts("gpus", report.gpus), "gpu_ingest_errors", errors
    )


def _sync_line(registry: RegistryResource, items: str, counts: KindCounts) -> str:
    return (
        f"registry {registry.safe_url()}: {counts.seen} {items} seen, {counts.added} added, "
        f"{counts.updated} updated, {counts.failed} rejected"
    )


def _sync_counts(prefix: str, counts: KindCounts) -> dict[str, int]:
    """What one sync did to one kind, as the raw table's metadata (`models_seen`, `gpus_added`...)."""
    done = {"seen": counts.seen, "added": counts.added, "updated": counts.updated, "unchanged": counts.unchanged}
    return {f"{prefix}_{k}": v for k, v in done.items()} | {f"{prefix}_rejected": counts.failed}


def _copy_to_raw(
    warehouse: WarehouseResource,
    table: str,
    frame: pl.DataFrame,
    counts: dict[str, int],
    errors_table: str,
    errors: pl.DataFrame,
) -> Iterator[dg.MaterializeResult]:
    """The registry's rows and the sync's rejects into raw, one result each."""
    with warehouse.build() as con:
        load_frame(con, "raw", table, frame)
        yield relation_result(con, "raw", table, counts)
        load_frame(con, "raw", errors_table, errors)
        yield relation_result(con, "raw", errors_table)


staging_models = sql_asset("staging", "models", group_name=REGISTRY_GROUP)
staging_gpus = sql_asset("staging", "gpus", group_name=GPU_GROUP)

assets = [registry_models, gpu_catalog, staging_models, staging_gpus]
asset_checks: list[dg.AssetChecksDefinition] = []
