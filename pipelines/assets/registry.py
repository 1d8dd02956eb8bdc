"""Registry sync and GPU catalog: bring the registry up to date, copy what it holds into `raw`.

Groups `registry` (models) and `gpu_catalog` (GPU SKUs). Each sync runs the Alembic migrations
first and then the registry's idempotent ingest; a rejected item becomes a row of the matching
`raw.*_ingest_errors` table and the rest of the run goes on.
"""

from collections.abc import Iterator

import dagster as dg

from models_registry.frames import current_models_frame, gpu_skus_frame, ingest_errors_frame, sync_gpus, sync_models
from pipelines.assets.common import describe, key, relation_result, sql_asset
from pipelines.resources import RegistryResource, WarehouseResource
from warehouse.sql import load_frame

REGISTRY_GROUP = "registry"
GPU_GROUP = "gpu_catalog"


@dg.multi_asset(
    name="registry_models",
    specs=[
        dg.AssetSpec(key("raw", "models"), description=describe("raw", "models"), kinds={"duckdb", "sqlalchemy"}),
        dg.AssetSpec(
            key("raw", "model_ingest_errors"),
            description=describe("raw", "model_ingest_errors"),
            kinds={"duckdb"},
        ),
    ],
    group_name=REGISTRY_GROUP,
)
def registry_models(
    context: dg.AssetExecutionContext, registry: RegistryResource, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult]:
    """Migrate the registry, ingest the catalog's models, copy the current revisions to raw."""
    report = sync_models(registry.url, registry.catalog_path())
    context.log.info(
        f"registry {registry.safe_url()}: {report.models.seen} models seen, {report.models.added} added, "
        f"{report.models.updated} updated, {report.models.failed} rejected"
    )
    models = current_models_frame(registry.url)
    errors = ingest_errors_frame(report.errors, report.run_id)
    counts = {
        "models_seen": report.models.seen,
        "models_added": report.models.added,
        "models_updated": report.models.updated,
        "models_unchanged": report.models.unchanged,
        "models_rejected": report.models.failed,
        "registry_ingest_run_id": report.run_id or 0,
    }
    with warehouse.build() as con:
        load_frame(con, "raw", "models", models)
        yield relation_result(con, "raw", "models", counts)
        load_frame(con, "raw", "model_ingest_errors", errors)
        yield relation_result(con, "raw", "model_ingest_errors")


@dg.multi_asset(
    name="gpu_catalog",
    specs=[
        dg.AssetSpec(key("raw", "gpus"), description=describe("raw", "gpus"), kinds={"duckdb", "sqlalchemy"}),
        dg.AssetSpec(
            key("raw", "gpu_ingest_errors"), description=describe("raw", "gpu_ingest_errors"), kinds={"duckdb"}
        ),
    ],
    group_name=GPU_GROUP,
)
def gpu_catalog(
    context: dg.AssetExecutionContext, registry: RegistryResource, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult]:
    """Migrate the registry, ingest the GPU catalog, copy every SKU to raw."""
    report = sync_gpus(registry.url, registry.catalog_path())
    context.log.info(
        f"registry {registry.safe_url()}: {report.gpus.seen} GPU SKUs seen, {report.gpus.added} added, "
        f"{report.gpus.updated} updated, {report.gpus.failed} rejected"
    )
    gpus = gpu_skus_frame(registry.url)
    errors = ingest_errors_frame(report.errors, report.run_id)
    counts = {
        "gpus_seen": report.gpus.seen,
        "gpus_added": report.gpus.added,
        "gpus_updated": report.gpus.updated,
        "gpus_unchanged": report.gpus.unchanged,
        "gpus_rejected": report.gpus.failed,
    }
    with warehouse.build() as con:
        load_frame(con, "raw", "gpus", gpus)
        yield relation_result(con, "raw", "gpus", counts)
        load_frame(con, "raw", "gpu_ingest_errors", errors)
        yield relation_result(con, "raw", "gpu_ingest_errors")


staging_models = sql_asset("staging", "models", group_name=REGISTRY_GROUP)
staging_gpus = sql_asset("staging", "gpus", group_name=GPU_GROUP)

assets = [registry_models, gpu_catalog, staging_models, staging_gpus]
asset_checks: list[dg.AssetChecksDefinition] = []
