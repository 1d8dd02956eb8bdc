"""Effective context limits: the longest context to enforce at a target concurrency.

`effective = min(model limit, memory-derived limit, calibrated limit)`, and which of the three
binds (ties go to the model, then the calibration, then the prediction):

- model limit: the model's context limit (max_position_embeddings, rope scaling); for an observed
  deployment also its configured max_model_len (the engine refuses longer requests anyway);
- memory-derived limit: `capacity.memory.max_context` on capplan's predicted KV pool;
- calibrated limit: the same on the pool resized to the calibrated KV budget, where a calibration
  scope with enough observations applies (else null, and `calibrated` is false).

Two kinds of rows (`kind`): `deployment` (every predicted observed deployment, with its own
settings; also the limit its reported block count gives, `measured_limit`) and `model_gpu_tp`
(every model x GPU x TP [x PP where one node is not enough] of the registry, served by vLLM at
capplan's default release with the checkpoint's own weights and KV in the model dtype: the
configuration a new deployment starts from).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from capacity import engine_constants as ec
from capacity.calibration import CalibrationFit, Correction, calibrated_pool, pool_numbers, pool_with_units
from capacity.grid import TARGET_CONCURRENCIES, grid_contexts, weight_dtype_choices
from capacity.memory import AUTO_MAX_MODEL_LEN, Estimate, b_max, estimate, valid_tp_sizes
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec, SpecError
from warehouse.catalog import Catalog
from warehouse.telemetry.predictions import predict_row

LIMIT_SCHEMA: dict[str, Any] = {
    "kind": pl.String,  # deployment | model_gpu_tp
    "deployment_id": pl.String,
    "model": pl.String,
    "model_family": pl.String,
    "gpu": pl.String,
    "engine": pl.String,
    "engine_version": pl.String,
    "weight_dtype": pl.String,
    "kv_dtype": pl.String,
    "tp": pl.Int32,
    "pp": pl.Int32,
    "max_model_len": pl.Int64,
    "concurrency": pl.Int64,
    "model_limit": pl.Int64,
    "memory_limit": pl.Int64,
    "calibrated_limit": pl.Int64,
    "measured_limit": pl.Int64,
    "effective_limit": pl.Int64,
    "binding": pl.String,  # model | calibrated | memory | weights
    "calibrated": pl.Boolean,
    "calibration_scope": pl.String,
    "n_observations": pl.Int64,
}


def effective(
    model_limit: int, memory_limit: int, calibrated_limit: int | None, *, weights_fit: bool = True
) -> tuple[int, str]:
    """The smallest limit and which binds (ties: model, then calibrated, then memory); `weights`
    when the weights alone exceed the usable memory (no KV at all, whatever a calibration says)."""
    if not weights_fit:
        return 0, "weights"
    candidates = [("model", model_limit)]
    if calibrated_limit is not None:
        candidates.append(("calibrated", calibrated_limit))
    candidates.append(("memory", memory_limit))
    value = min(v for _name, v in candidates)
    return value, next(name for name, v in candidates if v == value)


def _rows(
    est: Estimate,
    correction: Correction | None,
    *,
    model_limit: int,
    concurrencies: Sequence[int],
    base: dict[str, Any],
    measured_blocks: int | None = None,
) -> list[dict[str, Any]]:
    limit, seqs = est.max_model_len, est.max_num_seqs
    cap = min(limit, model_limit)
    predicted = pool_numbers(est.pool, context=cap, max_model_len=cap, max_num_seqs=seqs, concurrencies=concurrencies)
    calibrated = (
        pool_numbers(
            calibrated_pool(est, correction),
            context=cap,
            max_model_len=cap,
            max_num_seqs=seqs,
            concurrencies=concurrencies,
        )
        if correction is not None
        else None
    )
    measured = (
        pool_numbers(
            pool_with_units(est.pool, measured_blocks), context=cap, max_model_len=cap, max_num_seqs=seqs,
            concurrencies=concurrencies,
        )
        if measured_blocks is not None and est.pool.unit == "block"
        else None
    )  # fmt: skip
    rows = []
    weights_fit = est.weights_bytes_per_gpu <= est.usable_bytes_per_gpu
    for b in concurrencies:
        calibrated_limit = calibrated.max_context[b] if calibrated is not None else None
        value, binding = effective(model_limit, predicted.max_context[b], calibrated_limit, weights_fit=weights_fit)
        rows.append(
            base
            | {
                "concurrency": b,
                "model_limit": model_limit,
                "memory_limit": predicted.max_context[b],
                "calibrated_limit": calibrated_limit,
                "measured_limit": measured.max_context[b] if measured is not None else None,
                "effective_limit": value,
                "binding": binding,
                "calibrated": correction is not None,
                "calibration_scope": correction.scope.label() if correction is not None else None,
                "n_observations": correction.n_observations if correction is not None else 0,
            }
        )
    return rows


def deployment_limits(
    deployments: pl.DataFrame,
    catalog: Catalog,
    fit: CalibrationFit,
    concurrencies: Sequence[int] = TARGET_CONCURRENCIES,
) -> pl.DataFrame:
    """Rows of kind `deployment`: every deployment capplan can predict, at each target concurrency."""
    rows: list[dict[str, Any]] = []
    for row in deployments.sort("deployment_id").iter_rows(named=True):
        est, predicted = predict_row(row, catalog)
        if est is None:
            continue
        model = catalog.models[predicted["model_id"]].spec
        correction = (
            fit.lookup(est.engine, est.engine_version, predicted["gpu"], model.family) if est.engine == "vllm" else None
        )
        blocks = row.get("num_gpu_blocks")
        base = {
            "kind": "deployment",
            "deployment_id": row["deployment_id"],
            "model": predicted["model_id"],
            "model_family": model.family,
            "gpu": predicted["gpu"],
            "engine": est.engine,
            "engine_version": est.engine_version,
            "weight_dtype": grid_weight_dtype(model, predicted["weight_dtype"]),
            "kv_dtype": predicted["kv_dtype"],
            "tp": est.tp,
            "pp": est.pp,
            "max_model_len": est.max_model_len,
        }
        model_limit = min(model.context_limit_tokens, est.max_model_len)
        rows += _rows(
            est, correction, model_limit=model_limit, concurrencies=concurrencies, base=base,
            measured_blocks=int(blocks) if blocks is not None else None,
        )  # fmt: skip
    return pl.DataFrame(rows, schema=LIMIT_SCHEMA)


def grid_weight_dtype(spec: ModelSpec, weight_dtype: str = "auto") -> str:
    """The capacity grid's label for these weights, the one every mart uses so joins on it match:
    the grid lists a plain bf16 checkpoint served as published (`auto`) as `bf16` only
    (`capacity.grid.weight_dtype_choices` drops the twin), so `auto` is spelled `bf16` there."""
    if weight_dtype == "auto" and not weight_dtype_choices(spec, ["auto"]):
        return "bf16"
    return weight_dtype


def _layouts(spec: ModelSpec, gpu: GpuSku, valid_tp: Sequence[int], pp_sizes: Sequence[int]) -> list[tuple[int, int]]:
    tps = [tp for tp in valid_tp if tp <= gpu.gpus_per_node]
    layouts = [(tp, 1) for tp in tps]
    if tps:
        layouts += [(max(tps), pp) for pp in pp_sizes if 1 < pp <= spec.num_layers]
    return layouts


def grid_limits(
    catalog: Catalog,
    fit: CalibrationFit,
    *,
    concurrencies: Sequence[int] = TARGET_CONCURRENCIES,
    engine_version: str | None = None,
    tp_sizes: Sequence[int] = (1, 2, 4, 8),
    pp_sizes: Sequence[int] = (2, 4),
) -> pl.DataFrame:
    """Rows of kind `model_gpu_tp`. PP > 1 only at the node's largest TP and only where PP = 1 there
    holds no sequence of 1,024 tokens (the capacity grid's rule)."""
    version = engine_version or ec.VLLM_DEFAULT_VERSION
    rows: list[dict[str, Any]] = []
    for model_id in sorted(catalog.models):
        grid_model = catalog.models[model_id]
        spec = grid_model.spec
        weight = grid_weight_dtype(spec)
        smallest = grid_contexts(spec.context_limit_tokens)[0]
        valid_tp = valid_tp_sizes(spec, tp_sizes)  # the GPU's node size is applied per GPU
        for gpu_id in sorted(catalog.gpus):
            gpu = catalog.gpus[gpu_id]
            correction = fit.lookup("vllm", version, gpu.id, spec.family)
            layouts = _layouts(spec, gpu, valid_tp, pp_sizes)
            node_tp = max((tp for tp, pp in layouts if pp == 1), default=0)
            node_fits = True
            for tp, pp in layouts:
                if pp > 1 and node_fits:
                    break
                # each layout at the max_model_len it starts with (vLLM's auto-fit), as the grid runs it
                deployment = DeploymentSpec(
                    tp=tp, pp=pp, weight_dtype=weight, kv_dtype="auto", engine_version=version,
                    max_model_len=AUTO_MAX_MODEL_LEN,
                )  # fmt: skip
                try:
                    est = estimate(
                        spec, deployment, gpu=gpu, model_name=model_id, checkpoint_bytes=grid_model.checkpoint_bytes
                    )
                except SpecError:
                    continue
                if (tp, pp) == (node_tp, 1):
                    node_fits = est.starts and est.max_model_len >= smallest and b_max(est.pool, smallest) >= 1
                base = {
                    "kind": "model_gpu_tp",
                    "deployment_id": None,
                    "model": model_id,
                    "model_family": spec.family,
                    "gpu": gpu.id,
                    "engine": "vllm",
                    "engine_version": est.engine_version,
                    "weight_dtype": weight,
                    "kv_dtype": "auto",
                    "tp": tp,
                    "pp": pp,
                    "max_model_len": est.max_model_len,
                }
                rows += _rows(
                    est, correction, model_limit=spec.context_limit_tokens, concurrencies=concurrencies, base=base
                )
    return pl.DataFrame(rows, schema=LIMIT_SCHEMA)


def effective_limits(
    deployments: pl.DataFrame, catalog: Catalog, fit: CalibrationFit, **grid_options: Any
) -> pl.DataFrame:
    """Both kinds of rows: deployments first, then model x GPU x TP."""
    return pl.concat([deployment_limits(deployments, catalog, fit), grid_limits(catalog, fit, **grid_options)])
