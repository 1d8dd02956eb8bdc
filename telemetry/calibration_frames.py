"""The calibration fit (capacity.calibration) over the warehouse's predictions, as frames, and back.

- `observations(deployments, predictions)`: one `Observation` per predicted deployment that
  measured at least one term (weights, activation peak, non-torch, KV pool).
- `calibration_frame(fit)`: the `raw.calibration` rows (scope x term); `speed_observations` and
  `capacity.calibration.fit_speed` add the speed terms (tpot, ttft, output_throughput: measured /
  predicted of capacity.performance at the observed load), reported beside the memory terms.
- `deployment_calibration_frame(...)`: per observed deployment, the correction applied (full fit)
  and the leave-one-out KV pool (`raw.deployment_calibration`).
- `fit_from_frame(frame)`: the fit rebuilt from `raw.calibration`, for the assets downstream
  (limits, admission budgets, placements) — the warehouse table is the one source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from capacity.calibration import (
    CALIBRATED_TERM,
    SPEED_TERMS,
    TERM_KIND,
    TERMS,
    Band,
    CalibrationFit,
    CalibrationRow,
    Correction,
    DeploymentCalibration,
    Observation,
    ScopeKey,
    SpeedObservation,
    calibrated_pool,
    fit_calibration,
    fit_speed,
    leave_one_out,
    pool_numbers,
)
from capacity.engines.registry import engine_profile
from models_registry.planning import Catalog
from telemetry.predictions import predict_row
from telemetry.schema import schema_problem

CALIBRATION_SCHEMA: dict[str, Any] = {
    "scope": pl.String,  # label: level(field=value, ...)
    "level": pl.String,
    "engine": pl.String,
    "engine_version": pl.String,  # minor series, e.g. 0.11
    "engine_profile": pl.String,
    "gpu": pl.String,
    "model_family": pl.String,
    "term": pl.String,
    "correction_kind": pl.String,
    "n_observations": pl.Int64,
    "scope_observations": pl.Int64,
    "median": pl.Float64,
    "mad": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "usable": pl.Boolean,
    "min_observations": pl.Int64,
    "deployments": pl.List(pl.String),
}

DEPLOYMENT_CALIBRATION_SCHEMA: dict[str, Any] = {
    "deployment_id": pl.String,
    "calibrated": pl.Boolean,
    "calibration_scope": pl.String,
    "calibration_level": pl.String,
    "n_observations": pl.Int64,
    "weights_ratio": pl.Float64,
    "activation_ratio": pl.Float64,
    "non_torch_delta_bytes": pl.Float64,
    "calibrated_kv_pool_bytes": pl.Int64,
    "calibrated_num_gpu_blocks": pl.Int64,
    "calibrated_b_max": pl.Int64,
    "calibrated_kv_capacity_tokens": pl.Int64,
    "loo_calibration_scope": pl.String,
    "loo_n_observations": pl.Int64,
    "loo_kv_pool_bytes": pl.Int64,
}

_MEASURED = {
    "weights": "weights_bytes",
    "activation_peak": "activation_peak_bytes",
    "non_torch": "non_torch_bytes",
}
_PREDICTED = {
    "weights": "predicted_weights_bytes",
    "activation_peak": "predicted_activation_peak_bytes",
    "non_torch": "predicted_non_torch_bytes",
    "kv_pool": "predicted_kv_pool_bytes",
}

# which deployment an observation is of: the scope keys the fit groups it by (engine .. model family)
_DEPLOYMENT_COLUMNS = ("deployment_id", "engine", "engine_version", "gpu", "model_family")


def _deployment(row: Mapping[str, Any]) -> dict[str, Any]:
    """The deployment columns of a joined prediction row, as the observation classes' keyword arguments."""
    return {name: row[name] for name in _DEPLOYMENT_COLUMNS}


def observations(deployments: pl.DataFrame, predictions: pl.DataFrame) -> list[Observation]:
    """Predicted deployments with at least one measured term, in deployment order."""
    measured_columns = [c for c in _MEASURED.values() if c in deployments.columns]
    joined = predictions.filter((pl.col("prediction_status") == "predicted") & pl.col("not_modelled").is_null()).join(
        deployments.select("deployment_id", *measured_columns), on="deployment_id", how="left"
    )
    result: list[Observation] = []
    for row in joined.sort("deployment_id").iter_rows(named=True):
        measured: dict[str, int | None] = {term: row.get(column) for term, column in _MEASURED.items()}
        measured["kv_pool"] = row.get("measured_kv_pool_bytes")
        if all(value is None for value in measured.values()):
            continue
        predicted = {term: int(row[column]) for term, column in _PREDICTED.items()}
        result.append(Observation(**_deployment(row), predicted=predicted, measured=measured))
    return result


def _row(r: CalibrationRow, scope_n: int, min_observations: int) -> dict[str, Any]:
    b = r.band
    return {
        "scope": r.scope.label(),
        "level": r.scope.level,
        "engine": r.scope.engine,
        "engine_version": r.scope.engine_version,
        "engine_profile": r.scope.engine_profile,
        "gpu": r.scope.gpu,
        "model_family": r.scope.model_family,
        "term": r.term,
        "correction_kind": r.correction_kind,
        "n_observations": r.n_observations,
        "scope_observations": scope_n,
        "median": b.median if b else None,
        "mad": b.mad if b else None,
        "ci_low": b.low if b else None,
        "ci_high": b.high if b else None,
        "usable": r.usable,
        "min_observations": min_observations,
        "deployments": list(r.deployments),
    }


_SPEED_COLUMNS = {  # term -> (measured column in deployments, predicted column in predictions)
    "tpot": ("measured_tpot_mean_ms", "predicted_tpot_ms"),
    "ttft": ("measured_ttft_mean_ms", "predicted_ttft_ms"),
    "output_throughput": ("measured_output_tokens_per_second", "predicted_output_tokens_per_second"),
}


def speed_observations(deployments: pl.DataFrame, predictions: pl.DataFrame) -> list[SpeedObservation]:
    """Predicted deployments with a measured and a predicted speed term, in deployment order."""
    measured = [m for m, _ in _SPEED_COLUMNS.values() if m in deployments.columns]
    if not measured or "predicted_tpot_ms" not in predictions.columns:
        return []
    joined = predictions.filter((pl.col("prediction_status") == "predicted") & pl.col("not_modelled").is_null()).join(
        deployments.select("deployment_id", *measured), on="deployment_id", how="inner"
    )
    result: list[SpeedObservation] = []
    for row in joined.sort("deployment_id").iter_rows(named=True):
        ratios: dict[str, float | None] = {}
        for term, (m, p) in _SPEED_COLUMNS.items():
            got, want = row.get(m), row.get(p)
            ratios[term] = got / want if got is not None and want and got > 0 else None
        if any(r is not None for r in ratios.values()):
            result.append(SpeedObservation(**_deployment(row), ratios=ratios))
    return result


def calibration_frame(fit: CalibrationFit, speed: list[tuple[CalibrationRow, int]] | None = None) -> pl.DataFrame:
    """`raw.calibration`: the memory fit's rows, then the speed terms' (`fit_speed`)."""
    rows = [_row(r, fit.corrections[r.scope].n_observations, fit.min_observations) for r in fit.rows]
    rows += [_row(r, n, fit.min_observations) for r, n in speed or ()]
    return pl.DataFrame(rows, schema=CALIBRATION_SCHEMA)


def fit_frames(
    deployments: pl.DataFrame, predictions: pl.DataFrame, catalog: Catalog, *, min_observations: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`raw.calibration` and `raw.deployment_calibration` from the run's deployments and predictions."""
    observed = observations(deployments, predictions)
    fit = fit_calibration(observed, min_observations=min_observations)
    loo = {r.deployment_id: r for r in leave_one_out(observed, fit)}
    speed = fit_speed(speed_observations(deployments, predictions), min_observations=min_observations)
    return calibration_frame(fit, speed), deployment_calibration_frame(deployments, catalog, fit, loo)


def deployment_calibration_frame(
    deployments: pl.DataFrame, catalog: Catalog, fit: CalibrationFit, loo: Mapping[str, DeploymentCalibration]
) -> pl.DataFrame:
    """Per predicted deployment: the correction the fit applies (most specific usable scope), the
    calibrated pool it gives, and for deployments that measured something the leave-one-out pool."""
    rows = []
    for row in deployments.sort("deployment_id").iter_rows(named=True):
        est, predicted = predict_row(row, catalog)
        if est is None:
            continue
        applied = (
            fit.lookup(est.engine, est.engine_version, predicted["gpu"], predicted["model_family"])
            if engine_profile(est.engine, est.engine_version).overhead_calibrated
            else None
        )

        if applied is not None:
            try:
                limit = est.max_model_len
                pool = calibrated_pool(est, applied)
                numbers = pool_numbers(pool, context=limit, max_model_len=limit, max_num_seqs=est.max_num_seqs)
                kv_budget = applied.kv_budget_of(est)
            except Exception:  # per-item isolation: a correction that does not apply leaves this one uncalibrated
                applied = None
        out: dict[str, Any] = {
            "deployment_id": row["deployment_id"],
            "calibrated": applied is not None,
            "n_observations": applied.n_observations if applied else 0,
        }
        if applied is not None:
            out |= {
                "calibration_scope": applied.scope.label(),
                "calibration_level": applied.scope.level,
                "weights_ratio": applied.weights_ratio,
                "activation_ratio": applied.activation_ratio,
                "non_torch_delta_bytes": applied.non_torch_delta_bytes,
                "calibrated_kv_pool_bytes": kv_budget,
                "calibrated_num_gpu_blocks": numbers.num_blocks,
                "calibrated_b_max": numbers.b_max,
                "calibrated_kv_capacity_tokens": numbers.kv_tokens,
            }
        held_out = loo.get(row["deployment_id"])
        if held_out is not None and held_out.loo_correction is not None:
            out |= {
                "loo_calibration_scope": held_out.loo_correction.scope.label(),
                "loo_n_observations": held_out.loo_correction.n_observations,
                "loo_kv_pool_bytes": held_out.loo_kv_pool,
            }
        if schema_problem(out, DEPLOYMENT_CALIBRATION_SCHEMA) is not None:  # absurd telemetry: keep it uncalibrated
            out = {"deployment_id": row["deployment_id"], "calibrated": False, "n_observations": 0}
        rows.append({name: out.get(name) for name in DEPLOYMENT_CALIBRATION_SCHEMA})
    return pl.DataFrame(rows, schema=DEPLOYMENT_CALIBRATION_SCHEMA)


def fit_from_frame(frame: pl.DataFrame, min_observations: int | None = None) -> CalibrationFit:
    """The fit as `raw.calibration` holds it (medians and bands per scope and term)."""
    bands: dict[ScopeKey, dict[str, Band]] = {}
    scope_n: dict[ScopeKey, int] = {}
    rows: list[CalibrationRow] = []
    found_min = min_observations
    for row in frame.iter_rows(named=True):
        if row["term"] in SPEED_TERMS:  # reported beside the memory fit, not part of it
            continue
        key = ScopeKey(
            row["level"], row["engine"], row["engine_version"], row["engine_profile"], row["gpu"], row["model_family"]
        )
        fitted = Band(int(row["n_observations"]), row["median"], row["mad"], row["ci_low"], row["ci_high"])
        scope_n[key] = int(row["scope_observations"])
        if found_min is None:
            found_min = int(row["min_observations"])
        if row["term"] in TERMS:
            bands.setdefault(key, {})[row["term"]] = fitted
        rows.append(
            CalibrationRow(
                key,
                row["term"],
                row["correction_kind"],
                fitted.n,
                fitted,
                bool(row["usable"]),
                tuple(row["deployments"] or ()),
            )
        )
    corrections = {key: Correction.from_bands(key, scope_n[key], bands.get(key, {})) for key in scope_n}
    return CalibrationFit(rows, corrections, found_min if found_min is not None else 3)


__all__ = [
    "CALIBRATED_TERM",
    "CALIBRATION_SCHEMA",
    "DEPLOYMENT_CALIBRATION_SCHEMA",
    "SPEED_TERMS",
    "TERM_KIND",
    "calibration_frame",
    "deployment_calibration_frame",
    "fit_frames",
    "fit_from_frame",
    "observations",
    "speed_observations",
]
