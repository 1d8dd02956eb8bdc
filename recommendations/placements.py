"""Recommended placements per model x workload profile, and the fleet's procurement plan, as frames.

`placement_frames(workloads, catalog, fit)` runs `capacity.placement.place` for every model of
every workload (calibrated capacity where the fit has a usable scope for the GPU), keeps the best
`alternatives` options of each, and solves the fleet plan over all of them
(`capacity.placement.plan_procurement`). A model x workload with no feasible placement, or a model
the registry does not hold, is one row with `feasible = false` and the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import polars as pl

from capacity.calibration import CalibrationFit, Correction
from capacity.engines.registry import engine_profile
from capacity.grid import GridModel
from capacity.placement import CorrectionFor, PlacementOption, PlacementResult, ProcurementPlan, place
from capacity.planning_types import BucketDemand, WorkloadProfile
from capacity.procurement import plan_fleet
from capacity.spec import GpuSku, ModelSpec, SpecError
from capacity.tiered_placement import media, tiered, tiered_result
from models_registry.planning import Catalog
from recommendations.limits import grid_weight_dtype
from recommendations.workloads import WorkloadsFile

DEFAULT_ALTERNATIVES = 10
T = TypeVar("T")

PLACEMENT_SCHEMA: dict[str, Any] = {
    "workload": pl.String,
    "model": pl.String,
    "model_family": pl.String,
    "rank": pl.Int64,
    "feasible": pl.Boolean,
    "gpu": pl.String,
    "gpus_per_node": pl.Int64,
    "tp": pl.Int32,
    "pp": pl.Int32,
    "dp": pl.Int32,
    "ep": pl.Int32,
    "gpus_per_replica": pl.Int64,
    "weight_dtype": pl.String,
    "kv_dtype": pl.String,
    "weight_format": pl.String,
    "kv_cache_dtype": pl.String,
    "engine": pl.String,
    "engine_version": pl.String,
    "context_tokens": pl.Int64,
    "max_model_len": pl.Int64,
    "target_concurrency": pl.Int64,
    "headroom": pl.Float64,
    "b_max": pl.Int64,
    "b_max_predicted": pl.Int64,
    "planned_per_replica": pl.Int64,
    "replicas": pl.Int64,
    "gpus_total": pl.Int64,
    "planned_capacity": pl.Int64,
    "usd_per_gpu_hour": pl.Float64,
    "usd_per_replica_hour": pl.Float64,
    "usd_per_hour": pl.Float64,
    "usd_per_sequence_hour": pl.Float64,
    "binding": pl.String,
    "b_latency": pl.Int64,
    "tpot_ms": pl.Float64,
    "ttft_ms": pl.Float64,
    "output_tokens_per_second": pl.Float64,
    "usd_per_million_output_tokens": pl.Float64,
    "kv_tier": pl.String,
    "host_memory_gib": pl.Float64,
    "host_usd_per_hour": pl.Float64,
    "kv_tier_reason": pl.String,
    "calibrated": pl.Boolean,
    "calibration_scope": pl.String,
    "n_observations": pl.Int64,
    "feasible_options": pl.Int64,
    "in_fleet_plan": pl.Boolean,
    "reason": pl.String,
}

PROCUREMENT_SCHEMA: dict[str, Any] = {
    "gpu": pl.String,
    "gpu_name": pl.String,
    "gpus_used": pl.Int64,
    "gpus_bought": pl.Int64,
    "nodes": pl.Int64,
    "spare_gpus": pl.Int64,
    "usd_per_gpu_hour": pl.Float64,
    "usd_per_hour": pl.Float64,
    "workloads": pl.List(pl.String),
    "fleet_gpus": pl.Int64,
    "fleet_usd_per_hour": pl.Float64,
    "method": pl.String,
    "optimal": pl.Boolean,
    "whole_nodes": pl.Boolean,
    "unserved": pl.List(pl.String),
    "notes": pl.String,
}


def correction_lookup(fit: CalibrationFit) -> Any:
    def correction_for(gpu: GpuSku, engine: str, version: str | None, family: str) -> Correction | None:
        if not engine_profile(engine, version).overhead_calibrated:
            return None
        return fit.lookup(engine, version, gpu.id, family)

    return correction_for


def procurement_gpus(workloads: WorkloadsFile, catalog: Catalog) -> list[GpuSku]:
    """The registry's GPUs procurement may choose from (`ProcurementSettings.buys`: allowed, and by default
    priced at a list or contract price)."""
    return [g for g in catalog.gpus.values() if workloads.procurement.buys(g)]


def unplannable(catalog: Catalog, model_id: str) -> str:
    """Why a workload's model cannot be placed: the registry's error, or that it is not there."""
    return catalog.model_errors.get(model_id) or f"{model_id} is not in the registry"


Skipped = tuple[str, str, str]  # (workload, model, why it cannot run)


def plan_each(
    profiles: Iterable[WorkloadProfile], catalog: Catalog, plan: Callable[[WorkloadProfile, str, GridModel], T]
) -> tuple[list[T], list[Skipped]]:
    """`plan(profile, model_id, model)` for every model of every profile, in order; (workload, model, reason)
    for a model the registry cannot plan or `plan` refuses (SpecError)."""
    planned: list[T] = []
    skipped: list[Skipped] = []
    for profile in profiles:
        for model_id in profile.models:
            model = catalog.models.get(model_id)
            if model is None:
                skipped.append((profile.name, model_id, unplannable(catalog, model_id)))
                continue
            try:
                planned.append(plan(profile, model_id, model))
            except SpecError as exc:
                skipped.append((profile.name, model_id, str(exc)))
    return planned, skipped


@dataclass(frozen=True, slots=True)
class Placer:
    """Places variants of a workload for one model on the GPUs procurement may buy (`capacity.placement.place`,
    calibrated as the placements are)."""

    model: GridModel
    model_id: str
    gpus: tuple[GpuSku, ...]
    correction_for: CorrectionFor

    def __call__(self, profile: WorkloadProfile) -> PlacementResult:
        return place(
            self.model.spec,
            profile,
            self.gpus,
            model_id=self.model_id,
            checkpoint_bytes=self.model.checkpoint_bytes,
            correction_for=self.correction_for,
        )


def placement_results(
    workloads: WorkloadsFile, catalog: Catalog, fit: CalibrationFit
) -> tuple[list[PlacementResult], list[Skipped]]:
    """`place` for every model of every workload; (workload, model, reason) for those that cannot run. With
    host RAM priced, a workload with a hit rate also gets host-tier and recompute options
    (`capacity.tiered_placement`)."""
    gpus = tuple(procurement_gpus(workloads, catalog))
    prices = media(workloads.procurement.host_memory, workloads.procurement.local_nvme)
    correction_for = correction_lookup(fit)

    def placed(profile: WorkloadProfile, model_id: str, model: GridModel) -> PlacementResult:
        placer = Placer(model, model_id, gpus, correction_for)
        if not tiered(profile, prices):
            return placer(profile)
        return tiered_result(placer, profile, model.spec, {g.id: g for g in gpus}, prices)

    return plan_each(workloads.profiles, catalog, placed)


def _option_row(option: PlacementOption, result: PlacementResult, spec: ModelSpec, in_plan: bool) -> dict[str, Any]:
    w = result.workload
    family = spec.family
    return {
        "workload": option.workload,
        "model": option.model,
        "model_family": family,
        "rank": option.rank,
        "feasible": True,
        "gpu": option.gpu,
        "gpus_per_node": option.gpus_per_node,
        "tp": option.tp,
        "pp": option.pp,
        "dp": option.dp,
        "ep": option.ep,
        "gpus_per_replica": option.gpus_per_replica,
        "weight_dtype": grid_weight_dtype(spec, option.weight_dtype),
        "kv_dtype": option.kv_dtype,
        "weight_format": option.weight_format,
        "kv_cache_dtype": option.kv_cache_dtype,
        "engine": option.engine,
        "engine_version": option.engine_version,
        "context_tokens": option.context_tokens,
        "max_model_len": option.max_model_len,
        "target_concurrency": w.target_concurrency,
        "headroom": w.headroom,
        "b_max": option.b_max,
        "b_max_predicted": option.b_max_predicted,
        "planned_per_replica": option.planned_per_replica,
        "replicas": option.replicas,
        "gpus_total": option.gpus_total,
        "planned_capacity": option.planned_capacity,
        "usd_per_gpu_hour": option.usd_per_gpu_hour,
        "usd_per_replica_hour": option.usd_per_replica_hour,
        "usd_per_hour": option.usd_per_hour,
        "usd_per_sequence_hour": option.usd_per_sequence_hour(w.target_concurrency),
        "binding": option.binding,
        "b_latency": option.b_latency,
        "tpot_ms": option.tpot_ms,
        "ttft_ms": option.ttft_ms,
        "output_tokens_per_second": option.output_tokens_per_second,
        "usd_per_million_output_tokens": option.usd_per_million_output_tokens,
        "kv_tier": option.host_tier.placement.value if option.host_tier else None,
        "host_memory_gib": option.host_tier.host_gib if option.host_tier else None,
        "host_usd_per_hour": option.host_tier.usd_per_hour if option.host_tier else None,
        "kv_tier_reason": option.host_tier.reason if option.host_tier else None,
        "calibrated": option.calibrated,
        "calibration_scope": option.calibration_scope,
        "n_observations": option.n_observations,
        "feasible_options": len(result.options),
        "in_fleet_plan": in_plan,
        "reason": None,
    }


def placement_frames(
    workloads: WorkloadsFile,
    catalog: Catalog,
    fit: CalibrationFit,
    *,
    alternatives: int = DEFAULT_ALTERNATIVES,
    bucket_demands: list[BucketDemand] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, ProcurementPlan]:
    """`raw.recommended_placements` and `raw.procurement_plan` (and the plan itself). Workloads
    with a request rate (`bucket_demands`, `recommendations.buckets`) are planned by
    request size in the same plan (`capacity.procurement.plan_fleet`; `plan.buckets`)."""
    results, skipped = placement_results(workloads, catalog, fit)
    available = {g.id: g.max_gpus_available for g in catalog.gpus.values() if g.max_gpus_available}
    plan = plan_fleet(results, bucket_demands or [], workloads.procurement.solver(available))
    plan = replace(plan, notes=(*plan.notes, *tier_notes(plan)))
    planned = {(o.workload, o.model, o.rank) for o in plan.assignments.values()}
    rows: list[dict[str, Any]] = []
    for result in results:
        model = catalog.models[result.model]
        family = model.spec.family
        kept = [o for o in result.options if o.rank <= alternatives or (o.workload, o.model, o.rank) in planned]
        for option in kept:
            rows.append(
                _option_row(option, result, model.spec, (option.workload, option.model, option.rank) in planned)
            )
        if not result.options:
            rows.append(
                _infeasible(
                    result.workload.name, result.model, family, result.workload.target_concurrency, result.reason()
                )
            )
    for workload, model_id, reason in skipped:
        profile = next(p for p in workloads.profiles if p.name == workload)
        known = catalog.models.get(model_id)
        rows.append(
            _infeasible(workload, model_id, known.spec.family if known else None, profile.target_concurrency, reason)
        )
    placements = pl.DataFrame(rows, schema=PLACEMENT_SCHEMA).sort("workload", "model", "rank", nulls_last=True)
    return placements, procurement_frame(plan, catalog, skipped), plan


def tier_notes(plan: ProcurementPlan) -> list[str]:
    """What the plan bought for each tiered workload's prefixes, and why (the procurement's notes)."""
    notes = []
    for (workload, model), option in plan.assignments.items():
        tier = option.host_tier
        if tier is not None:
            ram = f" + {tier.host_gib:,.1f} GiB {tier.placement.medium} (${tier.usd_per_hour:,.2f}/h, {tier.price_source})"
            notes.append(
                f"{workload}:{model}: KV tier {tier.placement.value} chosen (the cheapest option within the targets): "
                f"{option.gpus_total:,} x {option.gpu}{ram if tier.host_gib else ''}"
            )
    return notes


def _infeasible(workload: str, model: str, family: str | None, concurrency: int, reason: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(PLACEMENT_SCHEMA)
    row |= {
        "workload": workload,
        "model": model,
        "model_family": family,
        "feasible": False,
        "target_concurrency": concurrency,
        "feasible_options": 0,
        "in_fleet_plan": False,
        "calibrated": False,
        "n_observations": 0,
        "reason": reason,
    }
    return row


def procurement_frame(plan: ProcurementPlan, catalog: Catalog, skipped: list[tuple[str, str, str]]) -> pl.DataFrame:
    unserved = [f"{w}:{m}: {why}" for w, m, why in [*plan.unserved, *skipped]]
    rows = [
        {
            "gpu": p.gpu,
            "gpu_name": catalog.gpus[p.gpu].name if p.gpu in catalog.gpus else None,
            "gpus_used": p.gpus_used,
            "gpus_bought": p.gpus_bought,
            "nodes": p.nodes,
            "spare_gpus": p.spare_gpus,
            "usd_per_gpu_hour": p.usd_per_gpu_hour,
            "usd_per_hour": p.usd_per_hour,
            "workloads": list(p.workloads),
            "fleet_gpus": plan.gpus,
            "fleet_usd_per_hour": plan.usd_per_hour,
            "method": plan.method,
            "optimal": plan.optimal,
            "whole_nodes": plan.whole_nodes,
            "unserved": unserved,
            "notes": "; ".join(plan.notes) or None,
        }
        for p in plan.purchases
    ]
    return pl.DataFrame(rows, schema=PROCUREMENT_SCHEMA)
