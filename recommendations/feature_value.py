"""What each serving feature buys, per workload: the cheapest placement with the feature as the workload has it,
against the same workload with the feature off (`raw.feature_value`, `marts.feature_value`).

One row per workload x model x feature. A feature adds its row by adding a `FeatureCase` to `FEATURES`: how a
workload has it (stated in workloads.yaml, or measured by the fleet's telemetry), and the workload without it.
Prefix caching is the first: a workload's shared prefix is held once (more sequences per replica) and its hit
rate shortens the prefill (TTFT, where a TTFT target binds); without it, the engine's prefix cache is off.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import polars as pl

from capacity.calibration import CalibrationFit
from capacity.placement import PlacementResult, place
from capacity.planning_types import WorkloadProfile
from models_registry.planning import Catalog
from recommendations.placements import correction_lookup, plan_each, procurement_gpus
from recommendations.workloads import WorkloadsFile


class ServingFeature(StrEnum):
    """The serving features whose value is reported (a `StrEnum`: the `feature` column's values)."""

    PREFIX_CACHING = "prefix_caching"


class RateSource(StrEnum):
    """Where the rate a row is valued at comes from."""

    STATED = "stated"  # the workload's own value (workloads.yaml)
    MEASURED = "measured"  # the fleet's telemetry for the model (marts.prefix_cache_hit_rates)


@dataclass(frozen=True, slots=True)
class Valued:
    """A workload with a feature as it is to be valued, and what it says about the feature."""

    profile: WorkloadProfile
    setting: str  # the feature's setting, in words
    rate: float | None  # the feature's rate (prefix caching: the hit rate); None: none
    rate_source: RateSource | None


@dataclass(frozen=True, slots=True)
class FeatureCase:
    """How one feature is valued: `prepare(profile, model_id, measured)` gives the workload with the feature as
    it has it (None: the workload does not use it), `without(profile)` the same workload with it off."""

    feature: ServingFeature
    prepare: Callable[[WorkloadProfile, str, Mapping[str, float]], Valued | None]
    without: Callable[[WorkloadProfile], WorkloadProfile]


def _prefix_prepare(profile: WorkloadProfile, model_id: str, measured: Mapping[str, float]) -> Valued | None:
    """The workload's shared prefix and hit rate; a hit rate the fleet measured for the model where it states
    none."""
    prefix = profile.prefix_caching
    source = RateSource.STATED if prefix.hit_rate is not None else None
    if prefix.hit_rate is None and model_id in measured:
        prefix = replace(prefix, hit_rate=measured[model_id])
        source = RateSource.MEASURED
    if not prefix.stated or prefix.enabled is False:
        return None
    rate = "" if prefix.hit_rate is None else f", hit rate {prefix.hit_rate:.0%}"
    setting = f"shared prefix {prefix.shared_prefix_tokens:,} tokens{rate}"
    return Valued(replace(profile, prefix_caching=prefix), setting, prefix.hit_rate, source)


def _prefix_off(profile: WorkloadProfile) -> WorkloadProfile:
    return replace(profile, prefix_caching=replace(profile.prefix_caching, enabled=False))


FEATURES: tuple[FeatureCase, ...] = (FeatureCase(ServingFeature.PREFIX_CACHING, _prefix_prepare, _prefix_off),)

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


def _side(result: PlacementResult, suffix: str) -> dict[str, Any]:
    best = result.best
    if best is None:
        return {f"gpu_{suffix}": None, f"gpus_{suffix}": None, f"b_max_{suffix}": None, f"usd_per_hour_{suffix}": None}
    return {
        f"gpu_{suffix}": best.gpu,
        f"gpus_{suffix}": best.gpus_total,
        f"b_max_{suffix}": best.b_max,
        f"usd_per_hour_{suffix}": best.usd_per_hour,
    }


def feature_value_frame(
    workloads: WorkloadsFile, catalog: Catalog, fit: CalibrationFit, measured: Mapping[str, float] | None = None
) -> pl.DataFrame:
    """`raw.feature_value`: per workload x model x feature it uses, the cheapest placement with and without it.
    `measured`: the prefix-cache hit rate per model the fleet measured (`telemetry.prefix_cache.model_hit_rates`)."""
    gpus = procurement_gpus(workloads, catalog)
    correction_for = correction_lookup(fit)
    rows: list[dict[str, Any]] = []
    for case in FEATURES:

        def valued(profile: WorkloadProfile, model_id: str, model: Any, case: FeatureCase = case) -> dict[str, Any]:
            chosen = case.prepare(profile, model_id, measured or {})
            if chosen is None:
                return {}
            results = [
                place(
                    model.spec,
                    p,
                    gpus,
                    model_id=model_id,
                    checkpoint_bytes=model.checkpoint_bytes,
                    correction_for=correction_for,
                )
                for p in (chosen.profile, case.without(chosen.profile))
            ]
            row = {
                "workload": profile.name,
                "model": model_id,
                "feature": case.feature.value,
                "setting": chosen.setting,
                "rate": chosen.rate,
                "rate_source": chosen.rate_source.value if chosen.rate_source else None,
                **_side(results[0], "with"),
                **_side(results[1], "without"),
            }
            if row["gpus_with"] is not None and row["gpus_without"] is not None:
                row["gpus_saved"] = row["gpus_without"] - row["gpus_with"]
                row["usd_per_hour_saved"] = row["usd_per_hour_without"] - row["usd_per_hour_with"]
            else:
                row["reason"] = results[0].reason() if results[0].best is None else results[1].reason()
            return row

        planned, skipped = plan_each(workloads.profiles, catalog, valued)
        rows.extend(row for row in planned if row)
        by_name = {p.name: p for p in workloads.profiles}
        for workload, model_id, reason in skipped:
            if case.prepare(by_name[workload], model_id, measured or {}) is not None:
                rows.append({"workload": workload, "model": model_id, "feature": case.feature.value, "reason": reason})
    return pl.DataFrame([{k: r.get(k) for k in FEATURE_VALUE_SCHEMA} for r in rows], schema=FEATURE_VALUE_SCHEMA).sort(
        "workload", "model", "feature"
    )
