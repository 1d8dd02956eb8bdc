"""capplan's prediction for every observed deployment, with the same settings the engine reported.

`predict_deployments(deployments, catalog)` takes `telemetry.deployment_summary` (one
row per deployment) and returns one row per deployment (`PREDICTION_SCHEMA`): the DeploymentSpec
the settings map to (`capacity.calibration.observed_deployment`, the rule the public-log accuracy
set uses too), `capacity.estimate.estimate`'s terms for it, and what the engine's own numbers mean
in capplan's pool terms (a KV pool reported only as a block count is converted to bytes with the
predicted block size; the reported blocks give the measured B_max and KV capacity).

Speed: where the samples measured it (`telemetry.speed`), capplan's performance model
(`capacity.performance.performance`) at the observed busy-time concurrency per engine and the
observed mean prompt and output lengths: TPOT, TTFT and output tokens/s (per engine, times the
engines seen, like the measured rate over the whole deployment). `speed_reason` says why not.

A deployment that cannot be predicted (no model, a model the registry cannot plan, no GPU and
no device total, settings the engine profile rejects) gets `prediction_status = 'skipped'` and
the reason; it is never dropped.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import polars as pl

from capacity.calibration import (
    ObservedSettings,
    engine_profile,
    engine_series,
    observed_deployment,
    pool_numbers,
    pool_with_units,
)
from capacity.estimate import Estimate, estimate
from capacity.performance import speed_at
from capacity.pool import PoolUnit
from capacity.spec import GpuSku, ModelSpec, SpecError
from models_registry.planning import Catalog
from models_registry.resolve import with_resolved_draft
from telemetry.normalize import one_line
from telemetry.schema import schema_problem

METRICS_SOURCE = "prometheus"  # the source_kind of Prometheus text, scraped into a file or queried from the API

PREDICTION_SCHEMA: dict[str, Any] = {
    "deployment_id": pl.String,
    "prediction_status": pl.String,  # predicted | skipped
    "prediction_reason": pl.String,
    "not_modelled": pl.String,  # what capplan does not size in this deployment (Estimate.not_modelled); null: modelled
    "model_id": pl.String,
    "model_family": pl.String,
    "gpu": pl.String,
    "engine": pl.String,
    "engine_version": pl.String,  # the version predicted for (a representative one when unreported)
    "engine_series": pl.String,
    "engine_profile": pl.String,
    "weight_dtype": pl.String,  # capplan --dtype the settings map to
    "kv_dtype": pl.String,
    "weight_format": pl.String,
    "kv_cache_dtype": pl.String,
    "tp": pl.Int32,
    "pp": pl.Int32,
    "gpu_memory_bytes": pl.Int64,
    "gpu_memory_utilization": pl.Float64,
    "max_model_len": pl.Int64,
    "max_num_seqs": pl.Int64,
    "max_num_batched_tokens": pl.Int64,
    "block_size": pl.Int64,
    "context_tokens": pl.Int64,  # the T of "Maximum concurrency for T tokens" compared
    "predicted_weights_bytes": pl.Int64,
    "predicted_activation_peak_bytes": pl.Int64,
    "predicted_non_torch_bytes": pl.Int64,
    "predicted_cuda_graph_bytes": pl.Int64,
    "predicted_kv_pool_bytes": pl.Int64,
    "predicted_num_gpu_blocks": pl.Int64,
    "predicted_kv_cache_tokens": pl.Int64,
    "predicted_max_concurrency": pl.Float64,
    "predicted_b_max": pl.Int64,  # sequences of max_model_len tokens at once
    "predicted_kv_capacity_tokens": pl.Int64,  # tokens held in sequences of max_model_len
    "predicted_fits": pl.Boolean,
    "predicted_fit_reason": pl.String,
    "kv_block_bytes": pl.Int64,  # bytes of one KV block across the layers that share it (per GPU)
    "measured_kv_pool_bytes": pl.Int64,
    "measured_kv_pool_source": pl.String,  # log | blocks
    "measured_b_max": pl.Int64,
    "measured_kv_capacity_tokens": pl.Int64,
    "speed_concurrency": pl.Int64,  # B the speed was predicted at (observed concurrency per engine, rounded)
    "speed_input_tokens": pl.Int64,  # prompt length predicted at (observed mean, rounded)
    "speed_output_tokens": pl.Int64,  # output length predicted at (observed mean, rounded)
    "predicted_output_tokens_per_second": pl.Float64,  # per replica x engines seen
    "predicted_tpot_ms": pl.Float64,
    "predicted_ttft_ms": pl.Float64,
    "speed_reason": pl.String,  # why no speed prediction (null when predicted)
}


def _int(value: object) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)  # type: ignore[call-overload]


def settings_of(row: dict[str, Any]) -> ObservedSettings:
    """The settings columns of a deployment_summary row."""
    return ObservedSettings(
        tp=_int(row.get("tp")) or 1,
        pp=_int(row.get("pp")) or 1,
        dtype=row.get("weight_dtype"),
        quantization=row.get("quantization"),
        kv_cache_dtype=row.get("kv_cache_dtype"),
        engine=(row.get("engine") or "vllm"),
        engine_version=row.get("engine_version"),
        engine_generation=row.get("engine_generation"),
        gpu_memory_utilization=row.get("gpu_memory_utilization"),
        max_model_len=_int(row.get("max_model_len")),
        max_num_seqs=_int(row.get("max_num_seqs")),
        max_num_batched_tokens=_int(row.get("max_num_batched_tokens")),
        block_size=_int(row.get("block_size")),
        total_gpu_memory_bytes=_int(row.get("total_gpu_memory_bytes")),
        enforce_eager=row.get("enforce_eager"),
        triton_kernels=row.get("triton_kernels"),
        disable_custom_all_reduce=row.get("disable_custom_all_reduce"),
        gpu_peer_access=row.get("gpu_peer_access"),
        unmodelled_features=tuple(f for f in str(row.get("unmodelled_features") or "").split(",") if f),
        other_process_bytes=_int(row.get("other_process_bytes")),
        speculative_config=row.get("speculative_config"),
        dp=_int(row.get("dp")),
        ep=_int(row.get("ep")),
    )


def _name_the_gpu(row: dict[str, Any]) -> str:
    """How to tell capplan the GPU, for where this deployment's telemetry came from: metrics alone
    (Prometheus, scraped or queried) have no log to add `nvidia-smi -L` to, nor a folder for a sidecar."""
    sources = set(filter(None, str(row.get("sources") or "").split(",")))
    if sources <= {METRICS_SOURCE}:
        return (
            "its telemetry is Prometheus metrics only: scrape the DCGM exporter too, its DCGM_FI_DEV_FB_USED / "
            "DCGM_FI_DEV_FB_FREE series (their modelName label names the GPU) carrying the same deployment label"
        )
    return "name the GPU: `nvidia-smi -L` output in the log, or `gpu:` in a deployment.yaml beside it"


def predict_row(row: dict[str, Any], catalog: Catalog) -> tuple[Estimate | None, dict[str, Any]]:
    """The estimate for one deployment_summary row and its PREDICTION_SCHEMA row."""
    out: dict[str, Any] = {"deployment_id": row["deployment_id"], "model_id": row.get("model_id")}
    settings = settings_of(row)
    out |= {"engine": settings.engine, "tp": settings.tp, "pp": settings.pp, "gpu": row.get("gpu_sku")}

    base = dict(out)

    def skip(reason: str) -> tuple[None, dict[str, Any]]:
        """The deployment kept, unpredicted, with why (only the columns known before estimating)."""
        kept = {**base, "model_family": out.get("model_family")}
        return None, kept | {"prediction_status": "skipped", "prediction_reason": reason}

    model_id = row.get("model_id")
    if not model_id:
        return skip("no model known for this deployment (no log, export row or model_name label names one)")
    if model_id in catalog.model_errors:
        return skip(f"the registry cannot plan {model_id}: {catalog.model_errors[model_id]}")
    model = catalog.models.get(model_id)
    if model is None:
        return skip(f"{model_id} is not in the registry")
    out["model_family"] = model.spec.family
    gpu = catalog.gpus.get(row["gpu_sku"]) if row.get("gpu_sku") else None
    if row.get("gpu_sku") and gpu is None:
        return skip(f"GPU {row['gpu_sku']} is not in the registry")
    if gpu is None and settings.total_gpu_memory_bytes is None:
        return skip(f"no GPU and no device total reported: nothing to size the deployment on ({_name_the_gpu(row)})")
    try:
        deployment = observed_deployment(model.spec, settings)
        if deployment.speculative is not None:  # the draft the log names, sized from its config where capplan has it
            deployment = replace(deployment, speculative=with_resolved_draft(deployment.speculative))
        context = _int(row.get("max_concurrency_tokens")) or deployment.max_model_len
        est = estimate(
            model.spec,
            deployment,
            gpu=gpu,
            model_name=model_id,
            checkpoint_bytes=model.checkpoint_bytes,
            context_tokens=context,
        )
        limit = est.max_model_len
        predicted = pool_numbers(est.pool, context=limit, max_model_len=limit, max_num_seqs=est.max_num_seqs)
    except SpecError as exc:
        return skip(f"cannot estimate: {exc}")
    except Exception as exc:  # per-item isolation: settings the engine model cannot take skip this deployment
        return skip(f"cannot estimate these settings: {type(exc).__name__}: {one_line(exc, 160)}")
    out |= {
        "prediction_status": "predicted",
        "prediction_reason": "; ".join(est.notes) or None,
        "not_modelled": est.not_modelled,
        "engine_version": est.engine_version,
        "engine_series": engine_series(est.engine, est.engine_version),
        "engine_profile": engine_profile(est.engine, est.engine_version),
        "weight_dtype": deployment.weight_dtype,
        "kv_dtype": deployment.kv_dtype,
        "weight_format": est.weight_dtype,
        "kv_cache_dtype": est.kv_dtype,
        "gpu_memory_bytes": est.gpu_memory_bytes,
        "gpu_memory_utilization": est.gpu_memory_utilization,
        "max_model_len": limit,
        "max_num_seqs": est.max_num_seqs,
        "max_num_batched_tokens": est.pool.max_num_batched_tokens or None,
        "block_size": est.block_size,
        "context_tokens": est.context_tokens,
        "predicted_weights_bytes": est.weights_bytes_per_gpu,
        "predicted_activation_peak_bytes": est.activation_peak_bytes_per_gpu,
        "predicted_non_torch_bytes": est.non_torch_bytes_per_gpu,
        "predicted_cuda_graph_bytes": est.cuda_graph_bytes_per_gpu,
        "predicted_kv_pool_bytes": est.kv_budget_bytes_per_gpu,
        "predicted_num_gpu_blocks": est.num_blocks,
        "predicted_kv_cache_tokens": est.kv_cache_tokens,
        "predicted_max_concurrency": est.max_concurrency,
        "predicted_b_max": predicted.b_max,
        "predicted_kv_capacity_tokens": predicted.kv_tokens,
        "predicted_fits": est.fits,
        "predicted_fit_reason": est.reason,
        "kv_block_bytes": est.pool.unit_bytes or None,
    }
    out |= _speed(row, model.spec, est, gpu, deployment.weight_dtype)
    try:
        out |= _measured(row, est)
    except Exception as exc:  # the reported pool does not convert (absurd block counts): keep the prediction
        out["prediction_reason"] = f"measured pool not converted: {type(exc).__name__}: {one_line(exc, 120)}"
    problem = schema_problem(out, PREDICTION_SCHEMA)
    if problem is not None:
        return skip(f"cannot store the prediction: {problem}")
    return est, out


def _speed(
    row: dict[str, Any], model: ModelSpec, est: Estimate, gpu: GpuSku | None, weight_dtype: str
) -> dict[str, Any]:
    """capplan's TPOT, TTFT and throughput at the deployment's observed load, or why not."""
    concurrency = row.get("observed_concurrency")
    prompt, generated = row.get("observed_input_tokens"), row.get("observed_output_tokens")
    if concurrency is None and prompt is None:
        return {}  # no speed telemetry: nothing to compare, nothing to explain
    if concurrency is None or prompt is None or generated is None:
        return {
            "speed_reason": "speed not predicted: needs requests running and the request lengths "
            "(prompt / generation token counters and the TTFT histogram's _count)"
        }
    if gpu is None or gpu.memory_bandwidth_gbps is None or gpu.bf16_dense_tflops is None:
        return {"speed_reason": "speed not predicted: the GPU's bandwidth and TFLOPS are not in the catalog"}
    batch = max(1, round(concurrency))
    input_tokens, output_tokens = max(1, round(prompt)), max(1, round(generated))
    engines = max(1, _int(row.get("engines_seen")) or 1)
    try:
        perf = speed_at(
            model, est, gpu, input_tokens=input_tokens, output_tokens=output_tokens, weight_dtype=weight_dtype
        )(batch)
    except (SpecError, ValueError, ArithmeticError) as exc:
        return {"speed_reason": f"speed not predicted: {one_line(exc, 160)}"}
    return {
        "speed_concurrency": batch,
        "speed_input_tokens": input_tokens,
        "speed_output_tokens": output_tokens,
        "predicted_output_tokens_per_second": perf.output_tokens_per_second * engines,
        "predicted_tpot_ms": perf.tpot_ms,
        "predicted_ttft_ms": perf.ttft_ms,
    }


def _measured(row: dict[str, Any], est: Estimate) -> dict[str, Any]:
    """The engine's reported pool in capplan's terms: bytes (from a block count when the log
    printed no size), sequences of max_model_len, and tokens they hold."""
    blocks = _int(row.get("num_gpu_blocks"))
    memory = _int(row.get("kv_cache_memory_bytes"))
    unit = est.pool.unit_bytes if est.pool.unit is PoolUnit.BLOCK else 0
    out: dict[str, Any] = {}
    if memory is not None:
        out |= {"measured_kv_pool_bytes": memory, "measured_kv_pool_source": "log"}
    elif blocks is not None and unit:
        out |= {"measured_kv_pool_bytes": blocks * unit, "measured_kv_pool_source": "blocks"}
    if blocks is None and memory is not None and unit:
        blocks = memory // unit
    if blocks is not None and est.pool.unit is PoolUnit.BLOCK:
        limit = est.max_model_len
        numbers = pool_numbers(
            pool_with_units(est.pool, blocks), context=limit, max_model_len=limit, max_num_seqs=est.max_num_seqs
        )
        out |= {"measured_b_max": numbers.b_max, "measured_kv_capacity_tokens": numbers.kv_tokens}
    return out


def predict_deployments(deployments: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    """One PREDICTION_SCHEMA row per deployment_summary row, in deployment order."""
    rows = [predict_row(row, catalog)[1] for row in deployments.sort("deployment_id").iter_rows(named=True)]
    return pl.DataFrame([{name: r.get(name) for name in PREDICTION_SCHEMA} for r in rows], schema=PREDICTION_SCHEMA)
