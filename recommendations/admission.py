"""Admission budgets: what a router should admit to each observed deployment.

Per deployment, the KV capacity comes from the best source available (`capacity_source`):
the engine's own block count (`measured`, from its log or `vllm:cache_config_info`), else the
calibrated prediction (`calibrated`, where a calibration scope applies), else capplan's prediction
(`predicted`). Capacity is counted in tokens held by sequences of max_model_len (vLLM's
"Maximum concurrency" x max_model_len; for full-attention models the pool's block slots).

- `token_budget = floor(kv_capacity_tokens x headroom)`: KV tokens in flight (prompt plus the
  requested max_tokens of every admitted request) the router should not exceed;
- `sequence_budget_at_max_len = floor(B_max(max_model_len) x headroom)` (at least 1 when B_max
  is): concurrent requests that are safe even if every one grows to max_model_len;
- `sequence_budget = min(max_num_seqs, floor(token_budget / tokens_per_sequence))`, where
  `tokens_per_sequence` is what the deployment's sequences held at its observed peak
  (`peak_kv_usage x kv_capacity_tokens / peak_requests_running`), else max_model_len;
- `max_request_tokens`: the longest request to admit (the effective context limit at
  concurrency 1).

`over_capacity` (the asset check warns on it): the deployment preempted sequences in the window,
or queued requests with its KV cache full (peak usage >= 0.98), or its observed peak KV demand
exceeds the capacity capplan now attributes to it. `over_budget`: its peak demand exceeded the
token budget (the headroom was used).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

import duckdb
import polars as pl

DEFAULT_HEADROOM = 0.9
SATURATED_KV_USAGE = 0.98

ADMISSION_SCHEMA: dict[str, Any] = {
    "deployment_id": pl.String,
    "model": pl.String,
    "served_model_name": pl.String,
    "gpu": pl.String,
    "tp": pl.Int32,
    "pp": pl.Int32,
    "engine": pl.String,
    "engine_version": pl.String,
    "max_model_len": pl.Int64,
    "max_num_seqs": pl.Int64,
    "capacity_source": pl.String,  # measured | calibrated | predicted
    "kv_capacity_tokens": pl.Int64,
    "b_max_at_max_len": pl.Int64,
    "headroom": pl.Float64,
    "token_budget": pl.Int64,
    "sequence_budget_at_max_len": pl.Int64,
    "tokens_per_sequence": pl.Int64,
    "tokens_per_sequence_source": pl.String,  # observed | max_model_len
    "sequence_budget": pl.Int64,
    "max_request_tokens": pl.Int64,
    "calibrated": pl.Boolean,
    "calibration_scope": pl.String,
    "n_observations": pl.Int64,
    "peak_kv_usage": pl.Float64,
    "peak_requests_running": pl.Float64,
    "peak_requests_waiting": pl.Float64,
    "preemptions_in_window": pl.Float64,
    "peak_kv_tokens": pl.Int64,
    "over_budget": pl.Boolean,
    "over_capacity": pl.Boolean,
    "status_reason": pl.String,
}


def _num(value: object) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)  # type: ignore[arg-type]


def budget_row(
    deployment: Mapping[str, Any],
    prediction: Mapping[str, Any],
    calibration: Mapping[str, Any] | None,
    limit_at_one: int | None,
    served_model_name: str | None = None,
    *,
    headroom: float = DEFAULT_HEADROOM,
) -> dict[str, Any]:
    """One ADMISSION_SCHEMA row from a deployment_summary row, its prediction row, its
    deployment_calibration row (or None) and its effective limit at concurrency 1."""
    calibrated = bool(calibration and calibration.get("calibrated"))
    if prediction.get("measured_kv_capacity_tokens") is not None:
        source, tokens, seqs_max = "measured", prediction["measured_kv_capacity_tokens"], prediction["measured_b_max"]
    elif calibrated and calibration and calibration.get("calibrated_kv_capacity_tokens") is not None:
        source = "calibrated"
        tokens, seqs_max = calibration["calibrated_kv_capacity_tokens"], calibration["calibrated_b_max"]
    else:
        source = "predicted"
        tokens, seqs_max = prediction["predicted_kv_capacity_tokens"], prediction["predicted_b_max"]
    tokens = int(tokens or 0)
    seqs_max = int(seqs_max or 0)
    max_len = int(prediction["max_model_len"])
    token_budget = math.floor(tokens * headroom)
    at_max_len = max(1, math.floor(seqs_max * headroom)) if seqs_max >= 1 else 0
    usage = _num(deployment.get("peak_kv_usage"))
    running = _num(deployment.get("peak_requests_running"))
    waiting = _num(deployment.get("peak_requests_waiting"))
    preemptions = _num(deployment.get("preemptions_in_window"))
    # what the deployment's sequences held at its peak, in the engine's own pool when it reported one
    observed_pool = prediction.get("measured_kv_capacity_tokens") or tokens
    peak_tokens = round(usage * observed_pool) if usage is not None and observed_pool else None
    if peak_tokens and running and running >= 1:
        per_sequence, per_source = max(1, math.ceil(peak_tokens / running)), "observed"
    else:
        per_sequence, per_source = max_len, "max_model_len"
    sequences = token_budget // per_sequence if per_sequence else 0
    max_seqs = prediction.get("max_num_seqs")
    if max_seqs:
        sequences = min(sequences, int(max_seqs))
    reasons = []
    if preemptions and preemptions > 0:
        reasons.append(f"{preemptions:,.0f} preemption(s) in the window")
    if waiting and waiting > 0 and usage is not None and usage >= SATURATED_KV_USAGE:
        reasons.append(f"requests queued ({waiting:,.0f}) with the KV cache at {usage:.0%}")
    if peak_tokens is not None and peak_tokens > tokens:
        reasons.append(f"peak KV demand {peak_tokens:,} tokens above the {source} capacity {tokens:,}")
    over_capacity = bool(reasons)
    over_budget = peak_tokens is not None and peak_tokens > token_budget
    if over_budget and not over_capacity:
        reasons.append(f"peak KV demand {peak_tokens:,} tokens above the budget {token_budget:,} (headroom used)")
    return {
        "deployment_id": deployment["deployment_id"],
        "model": prediction.get("model_id"),
        "served_model_name": served_model_name,
        "gpu": prediction.get("gpu"),
        "tp": prediction.get("tp"),
        "pp": prediction.get("pp"),
        "engine": prediction.get("engine"),
        "engine_version": prediction.get("engine_version"),
        "max_model_len": max_len,
        "max_num_seqs": max_seqs,
        "capacity_source": source,
        "kv_capacity_tokens": tokens,
        "b_max_at_max_len": seqs_max,
        "headroom": headroom,
        "token_budget": token_budget,
        "sequence_budget_at_max_len": at_max_len,
        "tokens_per_sequence": per_sequence,
        "tokens_per_sequence_source": per_source,
        "sequence_budget": sequences,
        "max_request_tokens": limit_at_one if limit_at_one is not None else max_len,
        "calibrated": calibrated,
        "calibration_scope": calibration.get("calibration_scope") if calibration else None,
        "n_observations": int(calibration.get("n_observations") or 0) if calibration else 0,
        "peak_kv_usage": usage,
        "peak_requests_running": running,
        "peak_requests_waiting": waiting,
        "preemptions_in_window": preemptions,
        "peak_kv_tokens": peak_tokens,
        "over_budget": over_budget,
        "over_capacity": over_capacity,
        "status_reason": "; ".join(reasons) or None,
    }


def served_names(observations: pl.DataFrame) -> dict[str, str]:
    """The latest served model name each deployment reported (`--served-model-name`, `model_name`)."""
    if observations.is_empty():
        return {}
    latest = (
        observations.filter(pl.col("served_model_name").is_not_null())
        .sort("observed_at", descending=True, nulls_last=True)
        .group_by("deployment_id", maintain_order=True)
        .agg(pl.col("served_model_name").first())
    )
    return dict(latest.iter_rows())


def admission_budgets(
    deployments: pl.DataFrame,
    predictions: pl.DataFrame,
    calibrations: pl.DataFrame,
    limits: pl.DataFrame,
    observations: pl.DataFrame,
    *,
    headroom: float = DEFAULT_HEADROOM,
) -> pl.DataFrame:
    """One row per predicted deployment. `calibrations` is `deployment_calibration_frame` joined
    with the calibrated capacity columns (`calibrated_kv_capacity_tokens`, `calibrated_b_max`)."""
    if not 0 < headroom <= 1:
        raise ValueError(f"headroom must be in (0, 1], got {headroom}")
    by_id = {row["deployment_id"]: row for row in deployments.iter_rows(named=True)}
    calibration = {row["deployment_id"]: row for row in calibrations.iter_rows(named=True)}
    at_one = {
        row["deployment_id"]: row["effective_limit"]
        for row in limits.filter((pl.col("kind") == "deployment") & (pl.col("concurrency") == 1)).iter_rows(named=True)
    }
    names = served_names(observations)
    rows = [
        budget_row(
            by_id[p["deployment_id"]],
            p,
            calibration.get(p["deployment_id"]),
            at_one.get(p["deployment_id"]),
            names.get(p["deployment_id"]),
            headroom=headroom,
        )
        for p in predictions.filter(pl.col("prediction_status") == "predicted")
        .sort("deployment_id")
        .iter_rows(named=True)
    ]
    return pl.DataFrame(rows, schema=ADMISSION_SCHEMA)


# --- export for routers ------------------------------------------------------------------------------

EXPORT_FIELDS = (
    "deployment_id",
    "model",
    "served_model_name",
    "gpu",
    "tp",
    "pp",
    "max_model_len",
    "max_request_tokens",
    "token_budget",
    "sequence_budget",
    "sequence_budget_at_max_len",
    "kv_capacity_tokens",
    "capacity_source",
    "headroom",
    "calibrated",
    "n_observations",
    "over_capacity",
)


def admission_document(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """`marts.admission_budgets` of the published run as one JSON-ready object for routers."""
    columns = ", ".join(EXPORT_FIELDS)
    frame = con.execute(f"select {columns} from marts.admission_budgets order by deployment_id").pl()
    run = con.execute(
        "select run_id, run_date, started_at from marts.runs "
        "where run_id = coalesce((select any_value(run_id) from marts.admission_budgets), run_id) "
        "order by started_at desc limit 1"
    ).fetchone()
    run_id, run_date, started_at = run if run else (None, None, None)
    return {
        "schema_version": 1,
        "generated_by": "capplan export admission",
        "run_id": run_id,
        "run_date": run_date.isoformat() if isinstance(run_date, dt.date) else run_date,
        "run_started_at": started_at.isoformat() if isinstance(started_at, dt.datetime) else started_at,
        "fields": {
            "max_request_tokens": "longest request (prompt + max_tokens) to admit",
            "token_budget": "KV tokens in flight (prompt + max_tokens of admitted requests) not to exceed",
            "sequence_budget": "concurrent requests to admit",
            "sequence_budget_at_max_len": "concurrent requests that are safe even at max_model_len each",
        },
        "deployments": frame.to_dicts(),
    }
