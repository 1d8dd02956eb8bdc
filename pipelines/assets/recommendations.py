"""Recommendations: effective context limits, admission budgets, placements and procurement.

Group `recommendations`. Each asset reads the run's registry and calibration from `raw` and calls
the pure functions of `recommendations`; the marts are views over staging. Checks warn
when a deployment admits more than its (calibrated) capacity, and when a workload has no feasible
placement or the procurement plan leaves one unserved.
"""

import time
from collections.abc import Iterator

import dagster as dg
import polars as pl

from capacity.planning_types import BucketPlan
from pipelines.assets.common import REGISTRY_DEPS, describe, key, raw_spec, relation_result, sql_asset, warning_result
from pipelines.assets.telemetry import run_catalog
from pipelines.resources import PlanningResource, WarehouseResource
from recommendations.admission import admission_budgets as budgets_frame
from recommendations.buckets import bucket_demands, bucket_frame
from recommendations.feature_value import feature_value_frame
from recommendations.limit_partitions import LIMITS_TABLE, MAP_TABLE, refresh_limit_partitions
from recommendations.limits import deployment_limits
from recommendations.packing import pack_offers, packed_frame
from recommendations.placements import placement_frames
from recommendations.workloads import load_workloads, workloads_path
from telemetry.calibration_frames import fit_from_frame
from telemetry.prefix_cache import model_hit_rates
from warehouse.sql import load_frame

RECOMMENDATIONS_GROUP = "recommendations"
# what the `recommendations` asset writes, in this order
PLACEMENT_TABLES = (
    "recommended_placements",
    "procurement_plan",
    "procurement_buckets",
    "workloads",
    "packed_placements",
)


@dg.multi_asset(
    name="effective_context_limits",
    specs=[
        raw_spec(table, [key("raw", "telemetry_deployments"), key("raw", "calibration"), *REGISTRY_DEPS])
        for table in ("effective_context_limits", LIMITS_TABLE, MAP_TABLE)
    ],
    group_name=RECOMMENDATIONS_GROUP,
)
def effective_context_limits(
    context: dg.AssetExecutionContext, planning: PlanningResource, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult]:
    """min(model limit, memory-derived limit, calibrated limit) per deployment (every run) and per
    model x GPU x TP (only for the partitions whose models or corrections changed)."""
    registry = run_catalog(warehouse)
    with warehouse.build() as con:
        deployments = con.sql("select * from raw.telemetry_deployments").pl()
        fit = fit_from_frame(con.sql("select * from raw.calibration").pl(), planning.calibration_min_observations)
        start = time.perf_counter()
        limits = deployment_limits(deployments, registry, fit)
        load_frame(con, "raw", "effective_context_limits", limits, warehouse.run_params())
        refresh = refresh_limit_partitions(
            con,
            con.sql("select * from raw.models").pl(),
            con.sql("select * from raw.gpus").pl(),
            registry,
            fit,
            stage_dir=warehouse.stage_dir(),
            run=warehouse.run_params(),
        )
        seconds = time.perf_counter() - start
        context.log.info(
            f"{limits.height + refresh.rows:,} effective context limits in {seconds:.2f} s "
            f"(partitions computed {len(refresh.computed)}, reused {len(refresh.reused)})"
        )
        calibrated = limits.filter(pl.col("calibrated")).height
        yield relation_result(
            con,
            "raw",
            "effective_context_limits",
            {"compute_seconds": dg.MetadataValue.float(round(seconds, 3)), "calibrated_deployment_rows": calibrated},
        )
        yield relation_result(con, "raw", LIMITS_TABLE)
        yield relation_result(
            con,
            "raw",
            MAP_TABLE,
            {
                "partitions_computed": dg.MetadataValue.json(refresh.computed),
                "partitions_reused": dg.MetadataValue.json(refresh.reused),
                "staged_parquet_files": dg.MetadataValue.json(refresh.files),
            },
        )


@dg.asset(
    key=key("raw", "admission_budgets"),
    deps=[
        key("raw", "telemetry_deployments"),
        key("raw", "telemetry_predictions"),
        key("raw", "deployment_calibration"),
        key("raw", "effective_context_limits"),
        key("raw", "telemetry_observations"),
    ],
    group_name=RECOMMENDATIONS_GROUP,
    description=describe("raw", "admission_budgets"),
    kinds={"duckdb", "polars"},
)
def admission_budgets(planning: PlanningResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """The token and sequence budget per observed deployment."""
    with warehouse.build() as con:
        frame = budgets_frame(
            con.sql("select * from raw.telemetry_deployments").pl(),
            con.sql("select * from raw.telemetry_predictions").pl(),
            con.sql("select * from raw.deployment_calibration").pl(),
            con.sql(
                "select * exclude (run_id, run_date) from raw.effective_context_limits "
                "where kind = 'deployment' and run_id = (select run_id from raw.run)"
            ).pl(),
            con.sql("select * from raw.telemetry_observations").pl(),
            headroom=planning.admission_headroom,
        )
        load_frame(con, "raw", "admission_budgets", frame)
        over = frame.filter(pl.col("over_capacity")).height
        return relation_result(con, "raw", "admission_budgets", {"over_capacity": over})


@dg.multi_asset(
    name="recommendations",
    specs=[
        raw_spec(table, [key("raw", "calibration"), *REGISTRY_DEPS])
        for table in PLACEMENT_TABLES
    ],
    group_name=RECOMMENDATIONS_GROUP,
)
def recommendations(
    context: dg.AssetExecutionContext, planning: PlanningResource, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult]:
    """Place every model of every workload profile; solve the fleet's procurement plan."""
    registry = run_catalog(warehouse)
    profiles = load_workloads(workloads_path(planning.workloads_path or None))
    for name, reason in profiles.errors:
        context.log.warning(f"workloads file {profiles.path}: {name}: {reason}")
    with warehouse.build() as con:
        fit = fit_from_frame(con.sql("select * from raw.calibration").pl(), planning.calibration_min_observations)
        start = time.perf_counter()
        demands, unbucketed = bucket_demands(profiles, registry, fit)
        placements, procurement, plan = placement_frames(profiles, registry, fit, bucket_demands=demands)
        seconds = time.perf_counter() - start
        context.log.info(
            f"{len(profiles.profiles)} workloads: {placements.filter(pl.col('feasible')).height} placements, "
            f"plan {plan.method} {'optimal' if plan.optimal else 'not proven optimal'}: "
            f"{plan.gpus} GPUs, ${plan.usd_per_hour:,.2f}/h, {seconds:.2f} s"
        )
        load_frame(con, "raw", "recommended_placements", placements)
        yield relation_result(
            con, "raw", "recommended_placements", {"compute_seconds": dg.MetadataValue.float(round(seconds, 3))}
        )
        load_frame(con, "raw", "procurement_plan", procurement)
        yield relation_result(
            con,
            "raw",
            "procurement_plan",
            {
                "method": plan.method,
                "optimal": plan.optimal,
                "fleet_gpus": plan.gpus,
                "fleet_usd_per_hour": dg.MetadataValue.float(round(plan.usd_per_hour, 4)),
            },
        )
        bucket_plan = plan.buckets or BucketPlan("none", True, False, (), {}, {}, {})
        load_frame(con, "raw", "procurement_buckets", bucket_frame(bucket_plan, unbucketed))
        yield relation_result(
            con,
            "raw",
            "procurement_buckets",
            {"choices": len(bucket_plan.choices), "usd_per_hour": dg.MetadataValue.float(round(bucket_plan.usd_per_hour, 4))},
        )
        load_frame(con, "raw", "workloads", profiles.frame())
        yield relation_result(con, "raw", "workloads", {"workloads_file": str(profiles.path)})
        load_frame(con, "raw", "packed_placements", packed_frame(pack_offers(placements, profiles, registry)))
        yield relation_result(con, "raw", "packed_placements")


@dg.asset(
    key=key("raw", "feature_value"),
    deps=[key("raw", "calibration"), key("raw", "telemetry_deployments"), *REGISTRY_DEPS],
    group_name=RECOMMENDATIONS_GROUP,
    description=describe("raw", "feature_value"),
    kinds={"duckdb", "polars"},
)
def feature_value(planning: PlanningResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """What each serving feature a workload uses buys: its cheapest placement with and without it."""
    registry = run_catalog(warehouse)
    profiles = load_workloads(workloads_path(planning.workloads_path or None))
    with warehouse.build() as con:
        fit = fit_from_frame(con.sql("select * from raw.calibration").pl(), planning.calibration_min_observations)
        measured = model_hit_rates(con.sql("select * from raw.telemetry_deployments").pl())
        frame = feature_value_frame(profiles, registry, fit, measured)
        load_frame(con, "raw", "feature_value", frame)
        return relation_result(con, "raw", "feature_value", {"rows": frame.height})


def _staging(table: str) -> dg.AssetsDefinition:
    return sql_asset("staging", table, group_name=RECOMMENDATIONS_GROUP)


def _mart(table: str) -> dg.AssetsDefinition:
    return sql_asset("marts", table, group_name=RECOMMENDATIONS_GROUP)


LIMIT_TABLES = ("effective_context_limits", "admission_budgets")
TABLES = LIMIT_TABLES + PLACEMENT_TABLES + ("feature_value",)
STAGING = [_staging(t) for t in TABLES]
MARTS = [_mart(t) for t in TABLES] + [_mart("effective_context_limits_history")]  # history kept in place


# --- checks ------------------------------------------------------------------------------------------


@dg.asset_check(
    asset=key("marts", "admission_budgets"),
    description="Warns when a deployment admits more than its calibrated capacity: preemptions, requests queued "
    "with the KV cache full, or peak KV demand above the capacity capplan attributes to it.",
)
def admission_within_calibrated_capacity(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    with warehouse.read() as con:
        rows = con.execute(
            "select deployment_id, model, gpu, capacity_source, token_budget, sequence_budget, status_reason "
            "from marts.admission_budgets where over_capacity order by deployment_id"
        ).pl()
        total = con.execute("select count(*) from marts.admission_budgets").fetchone()
    lines = [
        f"- {r['deployment_id']} ({r['model']} on {r['gpu']}): {r['status_reason']}; budget "
        f"{r['token_budget']:,} tokens / {r['sequence_budget']:,} sequences ({r['capacity_source']} capacity)"
        for r in rows.iter_rows(named=True)
    ]
    first = rows.head(2).iter_rows(named=True)
    return warning_result(
        (
            f"{rows.height} deployment(s) admit more than their calibrated capacity: "
            + "; ".join(f"{r['deployment_id']} ({r['status_reason']})" for r in first)
            + ("; ..." if rows.height > 2 else "")
            if rows.height
            else None
        ),
        {
            "deployments": int(total[0]) if total else 0,
            "over_capacity": rows.height,
            "over_capacity_deployments": dg.MetadataValue.md("\n".join(lines) or "none"),
        },
    )


@dg.asset_check(
    asset=key("raw", "recommended_placements"),
    additional_deps=[key("raw", "procurement_plan"), key("raw", "workloads")],
    description="Warns when a workload entry could not be read, a model x workload has no feasible placement, "
    "or the procurement plan leaves a workload unserved.",
)
def every_workload_placed(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    with warehouse.read() as con:
        infeasible = con.execute(
            "select workload, model, reason from raw.recommended_placements where not feasible order by all"
        ).fetchall()
        invalid = con.execute("select workload, error from raw.workloads where not valid order by all").fetchall()
        unserved = con.execute("select distinct unnest(unserved) from raw.procurement_plan order by 1").fetchall()
        planned = con.execute("select count(*) from raw.recommended_placements where in_fleet_plan").fetchone()
    lines = [f"- {w} / {m}: {why}" for w, m, why in infeasible]
    lines += [f"- workloads file: {w}: {why}" for w, why in invalid]
    problems = [f"{len(infeasible)} model x workload(s) with no feasible placement"] if infeasible else []
    problems += [f"{len(invalid)} unreadable workload entr(ies)"] if invalid else []
    problems += [f"unserved by the procurement plan: {', '.join(str(u[0]) for u in unserved)}"] if unserved else []
    return warning_result(
        "; ".join([*problems, *(f"e.g. {w} / {m}: {why}" for w, m, why in infeasible[:1])]) or None,
        {
            "placements_in_plan": int(planned[0]) if planned else 0,
            "infeasible": len(infeasible),
            "invalid_entries": len(invalid),
            "unserved": len(unserved),
            "problems": dg.MetadataValue.md("\n".join(lines) or "none"),
        },
    )


assets = [effective_context_limits, admission_budgets, recommendations, feature_value, *STAGING, *MARTS]
asset_checks = [admission_within_calibrated_capacity, every_workload_placed]
