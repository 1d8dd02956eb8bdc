"""What each serving feature buys, per workload: the cheapest placement with the feature as the workload has it,
against the same workload without it (`raw.feature_value`, `marts.feature_value`).

One row per workload x model x feature. A feature adds its row by adding a `FeatureCase` to `FEATURES`: how a
workload has it (stated in workloads.yaml, or measured by the fleet's telemetry) and the two sides it compares,
each placed by `capacity.placement.place` (the same path as the placements and the fleet plan):

* prefix caching: a workload's shared prefix held once (more sequences per replica) and its hit rate shortening
  the prefill (TTFT, where a TTFT target binds); without it, the engine's prefix cache is off;
* KV offload, with host RAM or local NVMe priced (`procurement.host_memory`, `local_nvme`): the cheapest of
  the GPU, offloaded and recompute tiers (`capacity.tiered_placement`, the medium in the $) against the
  cheapest without offload;
* LoRA: one deployment serving every adapter (`adapters`: its slots charged) against what the fleet runs
  without multi-LoRA serving: a deployment per adapter (the adapter merged), each for an equal share of the
  sequences, ceil(C / adapters);
* speculative decoding: the workload with its draft (`speculative`, at its `acceptance_rate`: the draft's
  memory and the TPOT it buys) against the workload without, at the same latency targets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import polars as pl

from capacity.calibration import CalibrationFit
from capacity.grid import GridModel
from capacity.offload_procurement import CachePlacement, HostMemoryPrice
from capacity.placement import PlacementResult
from capacity.planning_types import WorkloadProfile
from capacity.spec import GpuSku
from capacity.tiered_placement import media, tiered, tiered_result
from models_registry.planning import Catalog
from recommendations.placements import Placer, correction_lookup, plan_each, procurement_gpus
from recommendations.workloads import WorkloadsFile


class ServingFeature(StrEnum):
    """The serving features whose value is reported (a `StrEnum`: the `feature` column's values)."""

    PREFIX_CACHING = "prefix_caching"
    KV_OFFLOAD = "kv_offload"
    LORA = "lora"
    SPECULATIVE = "speculative_decoding"


class RateSource(StrEnum):
    """Where the rate a row is valued at comes from."""

    STATED = "stated"  # the workload's own value (workloads.yaml)
    MEASURED = "measured"  # the fleet's telemetry for the model (marts.prefix_cache_hit_rates)


@dataclass(frozen=True, slots=True)
class Valued:
    """A workload with a feature as it is to be valued, and what it says about the feature."""

    profile: WorkloadProfile
    setting: str  # the feature's setting, in words
    rate: float | None  # the feature's rate (prefix caching and offload: the hit rate; speculative: acceptance)
    rate_source: RateSource | None


@dataclass(frozen=True, slots=True)
class Context:
    """What valuing a row may read beside the workload: the hit rates the fleet measured per model, the host RAM
    and NVMe prices (the offload media), and the GPUs procurement may buy."""

    measured: Mapping[str, float]
    media: Mapping[CachePlacement, HostMemoryPrice]
    gpus: Mapping[str, GpuSku]


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a row: the placements and how many deployments of the best one the fleet runs."""

    result: PlacementResult
    deployments: int = 1


@dataclass(frozen=True, slots=True)
class FeatureCase:
    """How one feature is valued: `prepare(profile, model_id, context)` gives the workload with the feature as
    it has it (None: the workload does not use it), `sides(valued, placer, context)` the placements with and
    without it."""

    feature: ServingFeature
    prepare: Callable[[WorkloadProfile, str, Context], Valued | None]
    sides: Callable[[Valued, Placer, Context], tuple[Side, Side]]


def _toggle(
    off: Callable[[WorkloadProfile], WorkloadProfile],
) -> Callable[[Valued, Placer, Context], tuple[Side, Side]]:
    """Sides that place the workload as it is and with the feature turned off by `off`."""

    def sides(valued: Valued, placer: Placer, _context: Context) -> tuple[Side, Side]:
        return Side(placer(valued.profile)), Side(placer(off(valued.profile)))

    return sides


def _hit_rate(profile: WorkloadProfile, model_id: str, context: Context) -> tuple[WorkloadProfile, RateSource | None]:
    """The workload with its hit rate: its own, else the one the fleet measured for the model."""
    prefix = profile.prefix_caching
    if prefix.hit_rate is not None:
        return profile, RateSource.STATED
    if model_id in context.measured:
        return replace(
            profile, prefix_caching=replace(prefix, hit_rate=context.measured[model_id])
        ), RateSource.MEASURED
    return profile, None


def _prefix_prepare(profile: WorkloadProfile, model_id: str, context: Context) -> Valued | None:
    """The workload's shared prefix and hit rate; a hit rate the fleet measured for the model where it states
    none."""
    rated, source = _hit_rate(profile, model_id, context)
    prefix = rated.prefix_caching
    if not prefix.stated or prefix.enabled is False:
        return None
    rate = "" if prefix.hit_rate is None else f", hit rate {prefix.hit_rate:.0%}"
    setting = f"shared prefix {prefix.shared_prefix_tokens:,} tokens{rate}"
    return Valued(rated, setting, prefix.hit_rate, source)


def _prefix_off(profile: WorkloadProfile) -> WorkloadProfile:
    return replace(profile, prefix_caching=replace(profile.prefix_caching, enabled=False))


def _offload_prepare(profile: WorkloadProfile, model_id: str, context: Context) -> Valued | None:
    """A workload with a hit rate, where an offload medium has a price (else there is no offload to buy)."""
    rated, source = _hit_rate(profile, model_id, context)
    if not tiered(rated, context.media):
        return None
    rate = rated.prefix_caching.hit_rate
    priced = ", ".join(f"{p.medium} ${m.usd_per_gib_hour:g}/GiB-h ({m.source})" for p, m in context.media.items())
    setting = f"hit rate {rate:.0%}, {priced}"
    return Valued(rated, setting, rate, source)


def _offload_sides(valued: Valued, placer: Placer, context: Context) -> tuple[Side, Side]:
    """Every tier against the tiers without offload (prefixes in the GPU pools, or recomputed)."""
    every = tiered_result(placer, valued.profile, placer.model.spec, context.gpus, context.media)
    kept = tuple(o for o in every.options if o.host_tier is None or not o.host_tier.placement.offloaded)
    return Side(every), Side(replace(every, options=kept))


def _lora_prepare(profile: WorkloadProfile, _model_id: str, _context: Context) -> Valued | None:
    """A workload serving LoRA adapters (`adapters`)."""
    adapters = profile.adapters
    if adapters is None:
        return None
    slots = adapters.slots or adapters.count
    setting = f"{adapters.count:,} adapters of rank {adapters.rank}, {slots:,} GPU slots"
    return Valued(profile, setting, None, None)


def _lora_sides(valued: Valued, placer: Placer, _context: Context) -> tuple[Side, Side]:
    """One multi-LoRA deployment against a deployment per adapter, each for ceil(C / adapters) sequences."""
    adapters = valued.profile.adapters
    assert adapters is not None  # _lora_prepare values no workload without them
    share = math.ceil(valued.profile.target_concurrency / adapters.count)
    apart = replace(valued.profile, adapters=None, target_concurrency=share)
    return Side(placer(valued.profile)), Side(placer(apart), deployments=adapters.count)


def _speculative_prepare(profile: WorkloadProfile, _model_id: str, _context: Context) -> Valued | None:
    """A workload with a draft (`speculative`), at its acceptance rate where it states one."""
    spec = profile.speculative
    if spec is None:
        return None
    rate = "" if profile.acceptance_rate is None else f", acceptance {profile.acceptance_rate:.0%}"
    setting = f"{spec.describe}{rate}"
    source = RateSource.STATED if profile.acceptance_rate is not None else None
    return Valued(profile, setting, profile.acceptance_rate, source)


def _speculative_off(profile: WorkloadProfile) -> WorkloadProfile:
    return replace(profile, speculative=None, acceptance_rate=None)


FEATURES: tuple[FeatureCase, ...] = (
    FeatureCase(ServingFeature.PREFIX_CACHING, _prefix_prepare, _toggle(_prefix_off)),
    FeatureCase(ServingFeature.KV_OFFLOAD, _offload_prepare, _offload_sides),
    FeatureCase(ServingFeature.LORA, _lora_prepare, _lora_sides),
    FeatureCase(ServingFeature.SPECULATIVE, _speculative_prepare, _toggle(_speculative_off)),
)

# what the report's section reads (shown under its table, to run with `capplan sql`)
FEATURE_VALUE_SQL = (
    "select workload, model, feature, setting, rate_source, gpus_with, gpus_without, gpus_saved, "
    "usd_per_hour_with, usd_per_hour_without, usd_per_hour_saved, reason from marts.feature_value "
    "order by workload, model, feature"
)
FEATURE_VALUE_SCHEMA: dict[str, Any] = {
    "workload": pl.String,
    "model": pl.String,
    "feature": pl.String,
    "setting": pl.String,
    "rate": pl.Float64,
    "rate_source": pl.String,
    "gpu_with": pl.String,
    "gpus_with": pl.Int64,
    "b_max_with": pl.Int64,
    "usd_per_hour_with": pl.Float64,
    "gpu_without": pl.String,
    "gpus_without": pl.Int64,
    "b_max_without": pl.Int64,
    "usd_per_hour_without": pl.Float64,
    "gpus_saved": pl.Int64,
    "usd_per_hour_saved": pl.Float64,
    "reason": pl.String,
}


def _side(side: Side, suffix: str) -> dict[str, Any]:
    """The row's columns for one side: the best option, times the deployments the fleet runs of it (its $
    with the host RAM it buys)."""
    best = side.result.best
    if best is None:
        return {f"gpu_{suffix}": None, f"gpus_{suffix}": None, f"b_max_{suffix}": None, f"usd_per_hour_{suffix}": None}
    return {
        f"gpu_{suffix}": best.gpu,
        f"gpus_{suffix}": best.gpus_total * side.deployments,
        f"b_max_{suffix}": best.b_max,
        f"usd_per_hour_{suffix}": (best.usd_per_hour + best.host_usd_per_hour) * side.deployments,
    }


def _row(case: FeatureCase, chosen: Valued, placer: Placer, context: Context) -> dict[str, Any]:
    with_it, without = case.sides(chosen, placer, context)
    row = {
        "workload": chosen.profile.name,
        "model": placer.model_id,
        "feature": case.feature.value,
        "setting": chosen.setting,
        "rate": chosen.rate,
        "rate_source": chosen.rate_source.value if chosen.rate_source else None,
        **_side(with_it, "with"),
        **_side(without, "without"),
    }
    if row["gpus_with"] is not None and row["gpus_without"] is not None:
        row["gpus_saved"] = row["gpus_without"] - row["gpus_with"]
        row["usd_per_hour_saved"] = row["usd_per_hour_without"] - row["usd_per_hour_with"]
    else:
        row["reason"] = with_it.result.reason() if with_it.result.best is None else without.result.reason()
    return row


def feature_value_frame(
    workloads: WorkloadsFile, catalog: Catalog, fit: CalibrationFit, measured: Mapping[str, float] | None = None
) -> pl.DataFrame:
    """`raw.feature_value`: per workload x model x feature it uses, the cheapest placement with and without it.
    `measured`: the prefix-cache hit rate per model the fleet measured (`telemetry.prefix_cache.model_hit_rates`)."""
    gpus = tuple(procurement_gpus(workloads, catalog))
    procurement = workloads.procurement
    context = Context(measured or {}, media(procurement.host_memory, procurement.local_nvme), {g.id: g for g in gpus})
    correction_for = correction_lookup(fit)
    rows: list[dict[str, Any]] = []
    by_name = {p.name: p for p in workloads.profiles}
    for case in FEATURES:

        def valued(
            profile: WorkloadProfile, model_id: str, model: GridModel, case: FeatureCase = case
        ) -> dict[str, Any]:
            chosen = case.prepare(profile, model_id, context)
            if chosen is None:
                return {}
            return _row(case, chosen, Placer(model, model_id, gpus, correction_for), context)

        planned, skipped = plan_each(workloads.profiles, catalog, valued)
        rows.extend(row for row in planned if row)
        for workload, model_id, reason in skipped:
            if case.prepare(by_name[workload], model_id, context) is not None:
                rows.append({"workload": workload, "model": model_id, "feature": case.feature.value, "reason": reason})
    return pl.DataFrame([{k: r.get(k) for k in FEATURE_VALUE_SCHEMA} for r in rows], schema=FEATURE_VALUE_SCHEMA).sort(
        "workload", "model", "feature"
    )
