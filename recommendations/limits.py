"""Effective context limits: the longest context to enforce at a target concurrency.

`effective = min(model limit, memory-derived limit, calibrated limit)`, and which of the three
binds (ties go to the model, then the calibration, then the prediction):

- model limit: the model's context limit (max_position_embeddings, rope scaling); for an observed
  deployment also its configured max_model_len (the engine refuses longer requests anyway);
- memory-derived limit: `capacity.pool.max_context` on capplan's predicted KV pool;
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
from capacity import numeric
from capacity.calibration import (
    CalibrationFit,
    Correction,
    calibrated_pool,
    pool_numbers,
    pool_with_units,
    resized_units,
)
from capacity.engines import Engine
from capacity.engines.registry import engine_profile
from capacity.estimate import Estimate
from capacity.grid import TARGET_CONCURRENCIES, GridOptions, grid_tables, max_contexts, weight_dtype_choices
from capacity.pool import PoolUnit
from capacity.spec import ModelSpec
from models_registry.planning import Catalog
from telemetry.predictions import predict_row

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


def with_effective(frame: pl.DataFrame) -> pl.DataFrame:
    """`effective_limit` and `binding` from model_limit, memory_limit, calibrated_limit (null: no
    calibration) and `_weights_fit`: the smallest limit and which binds (ties: model, then calibrated,
    then memory); `weights` when the weights alone exceed the usable memory (no KV at all, whatever a
    calibration says). One rule for both kinds of rows."""
    model, memory, calibrated = pl.col("model_limit"), pl.col("memory_limit"), pl.col("calibrated_limit")
    weights_fit = pl.col("_weights_fit")
    value = pl.when(weights_fit).then(pl.min_horizontal(model, calibrated, memory)).otherwise(0)
    binding = (
        pl.when(~weights_fit)
        .then(pl.lit("weights"))
        .when(model == value)
        .then(pl.lit("model"))
        .when(calibrated == value)
        .then(pl.lit("calibrated"))
        .otherwise(pl.lit("memory"))
    )
    return frame.with_columns(value.alias("effective_limit")).with_columns(binding.alias("binding"))


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
            pool_with_units(est.pool, measured_blocks),
            context=cap,
            max_model_len=cap,
            max_num_seqs=seqs,
            concurrencies=concurrencies,
        )
        if measured_blocks is not None and est.pool.unit is PoolUnit.BLOCK
        else None
    )
    rows = []
    weights_fit = est.weights_bytes_per_gpu <= est.usable_bytes_per_gpu
    for b in concurrencies:
        rows.append(
            base
            | {
                "concurrency": b,
                "model_limit": model_limit,
                "memory_limit": predicted.max_context[b],
                "calibrated_limit": calibrated.max_context[b] if calibrated is not None else None,
                "measured_limit": measured.max_context[b] if measured is not None else None,
                "_weights_fit": weights_fit,
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
            fit.lookup(est.engine, est.engine_version, predicted["gpu"], model.family)
            if engine_profile(est.engine, est.engine_version).overhead_calibrated
            else None
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
            est,
            correction,
            model_limit=model_limit,
            concurrencies=concurrencies,
            base=base,
            measured_blocks=int(blocks) if blocks is not None else None,
        )
    return _limit_frame(pl.DataFrame(rows, schema=_ROW_SCHEMA))


_ROW_SCHEMA = {k: v for k, v in LIMIT_SCHEMA.items() if k not in ("effective_limit", "binding")} | {
    "_weights_fit": pl.Boolean
}


def _limit_frame(rows: pl.DataFrame) -> pl.DataFrame:
    return with_effective(rows).select(pl.col(k).cast(v) for k, v in LIMIT_SCHEMA.items())


def grid_weight_dtype(spec: ModelSpec, weight_dtype: str = "auto") -> str:
    """The capacity grid's label for these weights, the one every mart uses so joins on it match:
    the grid lists a plain bf16 checkpoint served as published (`auto`) as `bf16` only
    (`capacity.grid.weight_dtype_choices` drops the twin), so `auto` is spelled `bf16` there."""
    if weight_dtype == "auto" and not weight_dtype_choices(spec, ["auto"]):
        return "bf16"
    return weight_dtype


def grid_limits(
    catalog: Catalog,
    fit: CalibrationFit,
    *,
    concurrencies: Sequence[int] = TARGET_CONCURRENCIES,
    engine_version: str | None = None,
    tp_sizes: Sequence[int] = (1, 2, 4, 8),
    pp_sizes: Sequence[int] = (2, 4),
) -> pl.DataFrame:
    """Rows of kind `model_gpu_tp`: the capacity grid's deployments of that configuration (vLLM at
    the release, the grid's weight label, KV auto; PP > 1 only at the node's largest TP and only
    where PP = 1 there holds no sequence of the model's smallest grid context, the grid's rule),
    each at the max_model_len it starts with. The memory limit is the grid's max context; the
    calibrated one the same search on the pool at the corrected budget (`Correction.kv_budget`,
    `calibration.resized_units`), every rule evaluated on all rows at once."""
    version = engine_version or ec.VLLM_DEFAULT_VERSION
    if not catalog.models or not catalog.gpus:
        return pl.DataFrame(schema=LIMIT_SCHEMA)
    models = [catalog.models[m] for m in sorted(catalog.models)]
    options = GridOptions(
        engines=(Engine.VLLM.value,),
        vllm_version=version,
        tp_sizes=tuple(tp_sizes),
        pp_sizes=tuple(pp_sizes),
        weight_dtypes=("bf16", "auto"),
        kv_dtypes=("auto",),
        speed=False,
        dp_layouts=False,  # rows keyed model x GPU x TP x PP: the TP layouts (a DP x EP layout is no TP config)
    )
    tables = grid_tables(
        models,
        [catalog.gpus[g] for g in sorted(catalog.gpus)],
        options,
        concurrencies=concurrencies,
        pools=True,
        contexts=False,
    )
    assert tables.pools is not None and tables.context_limits is not None
    labels = pl.DataFrame(
        {
            "model": [m.repo_id for m in models],
            "_label": [grid_weight_dtype(m.spec) for m in models],
            "model_limit": [m.spec.context_limit_tokens for m in models],
        },
        schema={"model": pl.String, "_label": pl.String, "model_limit": pl.Int64},
    )
    deployments = (
        tables.deployments.join(tables.layouts, on="layout_id")
        .join(tables.gpus, on="gpu_id")
        .with_columns(
            pl.col(c).cast(pl.String)
            for c in ("model", "model_family", "gpu", "engine", "engine_version", "weight_dtype", "kv_dtype")
        )
        .join(labels, on="model")
        .filter(pl.col("weight_dtype") == pl.col("_label"))
    )
    found = _lookups(fit, version, deployments)
    deployments = deployments.join(_corrections(found), on=["gpu", "model_family"], how="left")
    calibrated = deployments.filter(pl.col("_calibrated"))
    budget = pl.col("kv_budget_bytes_per_gpu")
    corrected_budget = pl.lit(None, pl.Int64)
    for label, correction in {c.scope.label(): c for c in found.values() if c is not None}.items():
        here = pl.col("calibration_scope") == label
        corrected = correction.kv_budget(
            budget,
            pl.col("weights_bytes_per_gpu"),
            pl.col("activation_peak_bytes_per_gpu"),
            pl.col("non_torch_bytes_per_gpu"),
        )
        corrected_budget = pl.when(here).then(corrected).otherwise(corrected_budget)
    pools = tables.pools.join(calibrated.select("deployment_id", corrected_budget.alias("_budget")), on="deployment_id")
    resized = resized_units(pl.col("num_blocks"), pl.col("pool_unit_bytes"), pl.col("_budget"))
    calibrated_limits = max_contexts(pools, concurrencies, resized).rename({"max_context": "calibrated_limit"})
    usable = numeric.truncate(pl.col("gpu_memory_bytes") * pl.col("gpu_memory_utilization"))
    rows = (
        deployments.join(tables.context_limits.rename({"max_context": "memory_limit"}), on="deployment_id")
        .join(calibrated_limits, on=["deployment_id", "concurrency"], how="left")
        .with_columns(
            pl.lit("model_gpu_tp").alias("kind"),
            pl.lit(None, pl.String).alias("deployment_id"),
            pl.lit(None, pl.Int64).alias("measured_limit"),
            (pl.col("weights_bytes_per_gpu") <= usable).alias("_weights_fit"),
            pl.col("_calibrated").fill_null(False).alias("calibrated"),
            pl.col("n_observations").fill_null(0),
        )
        .sort("model", "gpu", "pp", "tp", "concurrency")
    )
    return _limit_frame(rows.select(*_ROW_SCHEMA))


def _lookups(fit: CalibrationFit, version: str, deployments: pl.DataFrame) -> dict[tuple[str, str], Correction | None]:
    """The correction each (GPU, model family) of the rows looks up."""
    pairs = deployments.select("gpu", "model_family").unique().iter_rows()
    return {(gpu, family): fit.lookup(Engine.VLLM.value, version, gpu, family) for gpu, family in pairs}


def _corrections(found: dict[tuple[str, str], Correction | None]) -> pl.DataFrame:
    """gpu, model_family -> whether a correction applies, its scope and observations."""
    return pl.DataFrame(
        {
            "gpu": [gpu for gpu, _ in found],
            "model_family": [family for _, family in found],
            "_calibrated": [c is not None for c in found.values()],
            "calibration_scope": [c.scope.label() if c is not None else None for c in found.values()],
            "n_observations": [c.n_observations if c is not None else None for c in found.values()],
        },
        schema={
            "gpu": pl.String,
            "model_family": pl.String,
            "_calibrated": pl.Boolean,
            "calibration_scope": pl.String,
            "n_observations": pl.Int64,
        },
    )


def effective_limits(
    deployments: pl.DataFrame, catalog: Catalog, fit: CalibrationFit, **grid_options: Any
) -> pl.DataFrame:
    """Both kinds of rows: deployments first, then model x GPU x TP."""
    return pl.concat([deployment_limits(deployments, catalog, fit), grid_limits(catalog, fit, **grid_options)])


def estimate_limits(
    est: Estimate,
    model: ModelSpec,
    model_id: str,
    weight_dtype: str = "auto",
    kv_dtype: str = "auto",
    concurrencies: Sequence[int] = TARGET_CONCURRENCIES,
) -> pl.DataFrame:
    """One deployment's limits at each concurrency (`capplan limits`), by the rule of the marts' rows:
    the model limit (its context limit, and the deployment's max_model_len), the memory-derived limit on
    capplan's predicted pool, no calibration (the published marts carry the calibrated limit)."""
    base = {
        "kind": "deployment",
        "deployment_id": None,
        "model": model_id,
        "model_family": model.family,
        "gpu": est.gpu,
        "engine": est.engine,
        "engine_version": est.engine_version,
        "weight_dtype": grid_weight_dtype(model, weight_dtype),
        "kv_dtype": kv_dtype,  # as given (`auto`), the label the marts use
        "tp": est.tp,
        "pp": est.pp,
        "max_model_len": est.max_model_len,
    }
    model_limit = min(model.context_limit_tokens, est.max_model_len)
    rows = _rows(est, None, model_limit=model_limit, concurrencies=concurrencies, base=base)
    return _limit_frame(pl.DataFrame(rows, schema=_ROW_SCHEMA))
