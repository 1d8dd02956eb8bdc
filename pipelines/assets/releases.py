"""What an engine upgrade changes for the fleet: the grid by engine release.

Group `recommendations`. The nightly grid plans vLLM at one release (CAPPLAN_VLLM_RELEASE, else the
newest capplan has rules for); the fleet runs several. This asset plans the models x GPUs of the
fleet's vLLM deployments at each release they run and at the newest, and keeps the rows that differ
(`recommendations.grid_diff.fleet_release_diffs`, marts.grid_diff's own SQL). It is bounded by the
fleet, not the catalog: the SAMPLE fleet's seven older releases take about 3 s.
"""

import time

import dagster as dg

from pipelines.assets.common import REGISTRY_DEPS, describe, key, relation_result, sql_asset
from pipelines.resources import WarehouseResource
from recommendations.grid_diff import fleet_release_diffs
from warehouse.sql import load_frame

GROUP = "recommendations"


@dg.asset(
    key=key("raw", "release_diff"),
    deps=[key("raw", "telemetry_deployments"), *REGISTRY_DEPS],
    group_name=GROUP,
    description=describe("raw", "release_diff"),
    kinds={"duckdb", "polars"},
)
def release_diff(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """The fleet's vLLM releases against the newest: the grid rows an upgrade changes."""
    with warehouse.build() as con:
        start = time.perf_counter()
        frame = fleet_release_diffs(
            con.sql("select * from raw.models").pl(),
            con.sql("select * from raw.gpus").pl(),
            con.sql("select * from raw.telemetry_deployments").pl(),
        )
        load_frame(con, "raw", "release_diff", frame)
        seconds = time.perf_counter() - start
        releases = sorted(set(frame["fleet_release"].to_list()))
        context.log.info(f"release diff: {frame.height:,} rows for the fleet's releases {releases} ({seconds:.2f} s)")
        return relation_result(
            con, "raw", "release_diff", {"seconds": dg.MetadataValue.float(round(seconds, 3)), "releases": releases}
        )


marts_release_diff = sql_asset("marts", "release_diff", group_name=GROUP)

assets = [release_diff, marts_release_diff]
asset_checks: list[dg.AssetChecksDefinition] = []
