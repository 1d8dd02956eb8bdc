"""`capplan procure`'s answer: the fleet plan as one JSON object, from the published marts or computed.

Both sources give the same three frames (`raw.recommended_placements`, `raw.procurement_plan`,
`raw.procurement_buckets`, or the marts over them), so one function turns either into the contract:
what to buy per SKU, which layout each workload takes and what binds it, and $ per million output
tokens per choice and for the fleet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from capacity.calibration import CalibrationFit
from capacity.columns import LAYOUT_KEYS
from capacity.planning_types import BucketPlan
from models_registry.planning import Catalog
from recommendations.buckets import bucket_demands, bucket_frame
from recommendations.placements import placement_frames
from recommendations.workloads import WorkloadsFile

NO_CALIBRATION = CalibrationFit([], {}, 3)

PURCHASE_KEYS = (
    "gpu",
    "gpu_name",
    "gpus_bought",
    "gpus_used",
    "nodes",
    "spare_gpus",
    "usd_per_gpu_hour",
    "usd_per_hour",
    "workloads",
)
ASSIGNMENT_KEYS = (
    "workload",
    *LAYOUT_KEYS,
    "context_tokens",
    "max_model_len",
    "target_concurrency",
    "planned_per_replica",
    "replicas",
    "gpus_total",
    "usd_per_hour",
    "usd_per_million_output_tokens",
    "binding",
    "tpot_ms",
    "ttft_ms",
    "kv_tier",
    "host_memory_gib",
    "host_usd_per_hour",
    "kv_tier_reason",
)
BUCKET_KEYS = (
    "workload",
    "model",
    "bucket",
    "input_tokens",
    "output_tokens",
    "gpu",
    "layout",
    "share",
    "requests_per_second",
    "batch_per_replica",
    "layout_replicas",
    "binding",
    "usd_per_million_output_tokens",
)


def fleet_frames(
    workloads: WorkloadsFile, catalog: Catalog, fit: CalibrationFit = NO_CALIBRATION
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The nightly's three recommendation frames for these workloads: placements, purchases, buckets."""
    demands, unbucketed = bucket_demands(workloads, catalog, fit)
    placements, procurement, plan = placement_frames(workloads, catalog, fit, bucket_demands=demands)
    buckets = bucket_frame(plan.buckets or BucketPlan("none", True, False, (), {}, {}, {}), unbucketed)
    return placements, procurement, buckets


def _pick(row: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: row.get(k) for k in keys}


def fleet_contract(placements: pl.DataFrame, procurement: pl.DataFrame, buckets: pl.DataFrame) -> dict[str, Any]:
    """The plan as `capplan procure --json` prints it (the caller adds `source` and where it came from)."""
    assigned = placements.filter(pl.col("in_fleet_plan")).sort("workload", "model")
    infeasible = placements.filter(~pl.col("feasible"))
    served = buckets.filter(pl.col("gpu").is_not_null()).sort("workload", "model", "bucket", "layout")
    first = procurement.row(0, named=True) if procurement.height else {}
    tokens_per_hour = 0.0
    for row in assigned.iter_rows(named=True):
        per_second = row.get("output_tokens_per_second")
        tokens_per_hour += (per_second or 0.0) * row["replicas"] * 3600
    for row in served.iter_rows(named=True):
        tokens_per_hour += row["requests_per_second"] * row["output_tokens"] * 3600
    usd_per_hour = float(first.get("fleet_usd_per_hour") or 0.0)
    unserved = list(first.get("unserved") or [])
    unserved += [f"{w}:{m}: {why}" for w, m, why in infeasible.select("workload", "model", "reason").iter_rows()]
    unserved += [
        f"{w}:{m}: {why}"
        for w, m, why in buckets.filter(pl.col("reason").is_not_null())
        .select("workload", "model", "reason")
        .iter_rows()
    ]
    notes = [n for n in (first.get("notes"),) if n]
    return {
        "method": first.get("method"),
        "optimal": first.get("optimal"),
        "whole_nodes": first.get("whole_nodes"),
        "gpus": int(first.get("fleet_gpus") or 0),
        "usd_per_hour": round(usd_per_hour, 4),
        "usd_per_million_output_tokens": round(usd_per_hour / tokens_per_hour * 1e6, 4) if tokens_per_hour else None,
        "purchases": [_pick(r, PURCHASE_KEYS) for r in procurement.sort("gpu").iter_rows(named=True)],
        "assignments": [_pick(r, ASSIGNMENT_KEYS) for r in assigned.iter_rows(named=True)],
        "buckets": [_pick(r, BUCKET_KEYS) for r in served.iter_rows(named=True)],
        "unserved": sorted(dict.fromkeys(unserved)),
        "notes": notes,
    }
