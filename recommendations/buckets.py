"""The request-size bucket part of the fleet plan (`capacity.procurement`, after Mélange) as `raw.procurement_buckets`.

Every workload with a `request_rate` is cut into buckets of its length distributions; each model of
it is sized per bucket on every priced GPU (`bucket_demands`: `capacity.procurement.bucket_demand`,
calibrated where the fit applies, like the placements). The fleet plan
(`recommendations.placements.placement_frames`, `capacity.procurement.plan_fleet`) buys
for them and the other workloads in one MILP; `bucket_frame(plan.buckets, ...)` has one row per
bucket x layout that serves part of the bucket, with the bucket part's totals repeated on each
row (the GPUs its replicas use; `raw.procurement_plan` has what is bought, in whole nodes); a
workload x model it cannot serve is one row with its reason.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from capacity.calibration import CalibrationFit
from capacity.grid import GridModel
from capacity.planning_types import BucketDemand, BucketPlan, WorkloadProfile
from capacity.procurement import bucket_demand, workload_buckets
from models_registry.planning import Catalog
from recommendations.placements import Skipped, correction_lookup, plan_each, procurement_gpus
from recommendations.workloads import WorkloadsFile

BUCKET_SCHEMA: dict[str, Any] = {
    "workload": pl.String,
    "model": pl.String,
    "bucket": pl.String,
    "input_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "bucket_share": pl.Float64,
    "bucket_requests_per_second": pl.Float64,
    "gpu": pl.String,
    "layout": pl.String,
    "gpus_per_replica": pl.Int64,
    "share": pl.Float64,
    "requests_per_second": pl.Float64,
    "batch_per_replica": pl.Int64,
    "tpot_ms": pl.Float64,
    "ttft_ms": pl.Float64,
    "requests_per_second_per_replica": pl.Float64,
    "replica_load": pl.Float64,
    "layout_replicas": pl.Int64,
    "binding": pl.String,
    "usd_per_million_output_tokens": pl.Float64,
    "plan_gpus": pl.List(pl.String),
    "plan_usd_per_hour": pl.Float64,
    "plan_usd_per_million_output_tokens": pl.Float64,
    "method": pl.String,
    "optimal": pl.Boolean,
    "whole_nodes": pl.Boolean,
    "reason": pl.String,
    "notes": pl.String,
}


def bucket_demands(
    workloads: WorkloadsFile, catalog: Catalog, fit: CalibrationFit
) -> tuple[list[BucketDemand], list[Skipped]]:
    """A demand per model of every workload with a request rate; (workload, model, reason) otherwise."""
    gpus = procurement_gpus(workloads, catalog)

    def demand(profile: WorkloadProfile, model_id: str, model: GridModel) -> BucketDemand:
        assert profile.request_rate_per_s is not None  # only profiles with a rate are planned
        return bucket_demand(
            model.spec,
            profile,
            workload_buckets(profile),
            gpus,
            model_id=model_id,
            request_rate_per_s=profile.request_rate_per_s,
            checkpoint_bytes=model.checkpoint_bytes,
            correction_for=correction_lookup(fit),
        )

    rated = [p for p in workloads.profiles if p.request_rate_per_s is not None]
    return plan_each(rated, catalog, demand)


def bucket_frame(plan: BucketPlan, skipped: list[tuple[str, str, str]]) -> pl.DataFrame:
    totals = {
        "plan_gpus": [f"{g}: {n}" for g, n in sorted(plan.gpus_bought.items())],
        "plan_usd_per_hour": plan.usd_per_hour,
        "plan_usd_per_million_output_tokens": plan.usd_per_million_output_tokens,
        "method": plan.method,
        "optimal": plan.optimal,
        "whole_nodes": plan.whole_nodes,
        "notes": "; ".join(plan.notes) or None,
    }
    rows: list[dict[str, Any]] = []
    for c in plan.choices:
        label = c.bucket.label
        rows.append(
            {
                "workload": c.workload,
                "model": c.model,
                "bucket": label,
                "input_tokens": c.bucket.input_tokens,
                "output_tokens": c.bucket.output_tokens,
                "bucket_share": c.bucket.share,
                "bucket_requests_per_second": c.requests_per_second / c.share,
                "gpu": c.candidate.gpu,
                "layout": c.candidate.key,
                "gpus_per_replica": c.candidate.gpus_per_replica,
                "share": c.share,
                "requests_per_second": c.requests_per_second,
                "batch_per_replica": c.candidate.batch[label],
                "tpot_ms": c.candidate.tpot_ms[label],
                "ttft_ms": c.candidate.ttft_ms[label],
                "requests_per_second_per_replica": c.candidate.requests_per_second[label],
                "replica_load": c.replica_load,
                "layout_replicas": plan.replicas[(c.workload, c.model, c.candidate.key)],
                "binding": c.binding,
                "usd_per_million_output_tokens": c.usd_per_million_output_tokens,
                **totals,
            }
        )
    for workload, model, reason in [*plan.unserved, *skipped]:
        rows.append({"workload": workload, "model": model, "reason": reason, **totals})
    frame = pl.DataFrame([{k: r.get(k) for k in BUCKET_SCHEMA} for r in rows], schema=BUCKET_SCHEMA)
    return frame.sort("workload", "model", "bucket", "layout", nulls_last=True)
