"""From the run's `raw.models` and `raw.gpus` to the capacity grid and the context limits.

The grid is `capacity.grid.build_capacity_grid` (vectorized Polars); this module only turns the
warehouse rows back into domain objects, keeps one bad model from sinking the rest, and records
every model left out with a reason (`raw.grid_errors`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from capacity.grid import (
    DEPLOYMENT_KEYS,
    GRID_COLUMNS,
    GridModel,
    GridOptions,
    build_context_limits,
    build_deployments,
    expand_contexts,
)
from capacity.spec import GpuSku
from models_registry.normalize import spec_from_snapshot
from models_registry.sources.common import ConfigSnapshot, ItemError, StageError, one_line
from warehouse.sources import ingest_errors_frame

CONTEXT_COLUMNS = ("context", "max_concurrency", "b_max_memory", "b_max", "fits", "tpot_ms", "output_tokens_per_second")
DEPLOYMENT_COLUMNS = tuple(c for c in GRID_COLUMNS if c not in CONTEXT_COLUMNS)


@dataclass(frozen=True, slots=True)
class CapacityFrames:
    """The grid stored as a star: one row per deployment, one narrow row per deployment x context.

    `deployments` holds every column of a grid row that does not depend on the context (keys,
    dtypes, bytes, blocks...), `grid` the per-context columns and `context_limits` the max context
    per target concurrency, both keyed by `deployment_id`. Joined back on it they are exactly
    `build_capacity_grid` / `build_context_limits` (the wide grid repeats ~40 columns, mostly
    strings, for every context: ten times the bytes to write and to keep in history).
    """

    deployments: pl.DataFrame
    grid: pl.DataFrame
    context_limits: pl.DataFrame
    errors: pl.DataFrame
    models: int  # models with grid rows

    def wide_grid(self) -> pl.DataFrame:
        """The grid as `build_capacity_grid` returns it (GRID_COLUMNS), joined back."""
        return self.grid.join(self.deployments, on="deployment_id", how="left").select(GRID_COLUMNS)


def _optional(value: object) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)  # type: ignore[arg-type]


def grid_models(models: pl.DataFrame) -> tuple[list[GridModel], list[ItemError]]:
    """Each `raw.models` row parsed back into a ModelSpec (the registry's own parser and checks)."""
    parsed: list[GridModel] = []
    errors: list[ItemError] = []
    for row in models.sort("repo_id").iter_rows(named=True):
        repo_id = str(row["repo_id"])
        snapshot = ConfigSnapshot(
            repo_id=repo_id,
            config_bytes=str(row["config_json"]).encode("utf-8"),
            source=str(row.get("source") or "bundled"),
            source_path=row.get("source_path"),
            revision=row.get("revision"),
            checkpoint_bytes=row.get("checkpoint_bytes"),
            family=row.get("family"),
        )
        try:
            _config, spec = spec_from_snapshot(snapshot)
        except StageError as exc:
            errors.append(ItemError("model", repo_id, "grid", str(exc), row.get("source_path")))
            continue
        parsed.append(GridModel(repo_id, spec, row.get("checkpoint_bytes")))
    return parsed, errors


def gpu_skus(gpus: pl.DataFrame) -> list[GpuSku]:
    """`raw.gpus` rows as the capacity engine's GpuSku (aliases are not needed to plan)."""
    skus = []
    for row in gpus.sort("slug").iter_rows(named=True):
        skus.append(
            GpuSku(
                id=str(row["slug"]),
                name=str(row["name"]),
                vendor=str(row["vendor"]),
                memory_total_bytes=int(row["memory_total_bytes"]),
                memory_total_mib_smi=int(row["memory_total_mib_smi"]) if row.get("memory_total_mib_smi") else None,
                memory_bandwidth_gbps=_optional(row.get("memory_bandwidth_gbps")),
                bf16_dense_tflops=_optional(row.get("bf16_dense_tflops")),
                fp8_dense_tflops=_optional(row.get("fp8_dense_tflops")),
                fp4_dense_tflops=_optional(row.get("fp4_dense_tflops")),
                fp8_support=bool(row.get("fp8_support")),
                fp4_support=bool(row.get("fp4_support")),
                int8_support=bool(row.get("int8_support", True)),
                gpus_per_node=int(row.get("gpus_per_node") or 8),
                interconnect=row.get("interconnect"),
                interconnect_gbps=_optional(row.get("interconnect_gbps")),
                price_usd_per_gpu_hour=_optional(row.get("price_usd_per_gpu_hour")),
                architecture=row.get("architecture"),
            )
        )
    return skus


def _deployments_per_model(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None
) -> tuple[list[pl.DataFrame], list[ItemError]]:
    """The slow path, taken only when the whole-catalog build raised: one model at a time."""
    frames: list[pl.DataFrame] = []
    errors: list[ItemError] = []
    for model in models:
        try:
            frame = build_deployments([model], gpus, options).collect()
        except Exception as exc:  # one model's failure must not stop the run; it is reported
            reason = one_line(f"{model.repo_id}: capacity grid failed: {type(exc).__name__}: {exc}")
            errors.append(ItemError("model", model.repo_id, "grid", reason))
            continue
        frames.append(frame)
    return frames, errors


def _aligned(frame: pl.DataFrame, deployments: pl.DataFrame, ids: pl.Series) -> bool:
    """True when row i of `frame` belongs to deployment ids[i] (the keys agree)."""
    if frame.height != ids.len():
        return False
    if frame.height == 0:
        return True
    expected = deployments.select(DEPLOYMENT_KEYS)[ids]
    keys = [k for k in ("model", "gpu", "engine", "weight_dtype", "kv_dtype", "tp", "pp") if k in DEPLOYMENT_KEYS]
    return all(frame.get_column(k).equals(expected.get_column(k)) for k in keys)


def _with_ids(frame: pl.DataFrame, deployments: pl.DataFrame, repeats: pl.Expr) -> pl.DataFrame:
    """`frame` (rows in deployment order, `repeats` rows each: build_context_limits keeps the
    deployment order) with its deployment_id; a join on the deployment keys if the order ever
    does not hold."""
    ids = deployments.select(pl.col("deployment_id").repeat_by(repeats).explode()).to_series()
    if _aligned(frame, deployments, ids):
        return frame.with_columns(ids)
    keyed = deployments.select("deployment_id", *DEPLOYMENT_KEYS)
    return frame.join(keyed, on=list(DEPLOYMENT_KEYS), how="left", nulls_equal=True)


def capacity_frames(models: pl.DataFrame, gpus: pl.DataFrame, options: GridOptions | None = None) -> CapacityFrames:
    """The grid and the context limits for every model of the run (`raw.models`, `raw.gpus`
    rows), and why any model is missing."""
    specs, errors = grid_models(models)
    return plan(specs, gpu_skus(gpus), options, errors)


def plan(
    specs: Sequence[GridModel],
    skus: Sequence[GpuSku],
    options: GridOptions | None = None,
    errors: list[ItemError] | None = None,
) -> CapacityFrames:
    """The grid frames for parsed models and GPUs (`errors`: models already left out, with why)."""
    errors = list(errors or [])
    try:
        deployments = build_deployments(specs, skus, options).collect()
    except Exception:
        parts, more = _deployments_per_model(specs, skus, options)
        errors += more
        deployments = (
            pl.concat(parts, how="vertical_relaxed") if parts else build_deployments([], skus, options).collect()
        )
    deployments = deployments.with_row_index("deployment_id").with_columns(pl.col("deployment_id").cast(pl.Int64))
    lazy = deployments.lazy()
    speed = (options or GridOptions()).speed
    grid = expand_contexts(lazy, carry=("deployment_id",), speed=speed).select("deployment_id", *CONTEXT_COLUMNS).collect()
    limits = build_context_limits(lazy).collect()
    targets = limits.height // deployments.height if deployments.height else 0
    limits = _with_ids(limits, deployments, pl.lit(targets, pl.UInt32))
    planned = set(deployments.get_column("model").unique().to_list()) if deployments.height else set()
    for model in specs:
        if model.repo_id not in planned and not any(e.item_key == model.repo_id for e in errors):
            reason = f"{model.repo_id}: no deployment in the grid (no valid parallelism on any GPU in the catalog)"
            errors.append(ItemError("model", model.repo_id, "grid", reason))
    return CapacityFrames(
        deployments=deployments.select("deployment_id", *DEPLOYMENT_COLUMNS),
        grid=grid,
        context_limits=limits.select("deployment_id", "concurrency", "max_context"),
        errors=ingest_errors_frame(errors),
        models=len(planned),
    )


# --- the grid against the scalar engine ---------------------------------------------------------

FLOAT_TOLERANCE = 1e-4  # contract() rounds max_concurrency to 4 decimals
SAMPLE_SEED = 42


@dataclass(frozen=True, slots=True)
class Mismatch:
    model: str
    gpu: str
    settings: str
    column: str
    grid: object
    estimate: object

    def line(self) -> str:
        return (
            f"{self.model} on {self.gpu} ({self.settings}): {self.column} grid={self.grid!r} estimate={self.estimate!r}"
        )


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        fa, fb = float(a), float(b)  # type: ignore[arg-type]
        if math.isinf(fa) or math.isinf(fb):
            return fa == fb
        return abs(fa - fb) <= FLOAT_TOLERANCE * max(1.0, abs(fb))
    return a == b


def estimate_for_row(
    row: dict[str, object], spec: object, sku: GpuSku, checkpoint_bytes: int | None
) -> dict[str, object]:
    """`capplan estimate --json` for the deployment and context of one grid row."""
    from capacity.memory import estimate
    from capacity.spec import DeploymentSpec, ModelSpec

    assert isinstance(spec, ModelSpec)
    deployment = DeploymentSpec(
        tp=int(row["tp"]),  # type: ignore[call-overload]
        pp=int(row["pp"]),  # type: ignore[call-overload]
        weight_dtype=str(row["weight_dtype"]),
        kv_dtype=str(row["kv_dtype"]),
        engine=str(row["engine"]),
        engine_version=str(row["engine_version"]) if row.get("engine_version") is not None else None,
        max_model_len=int(row["max_model_len"]),  # type: ignore[call-overload]
    )
    result = estimate(
        spec,
        deployment,
        gpu=sku,
        model_name=str(row["model"]),
        checkpoint_bytes=checkpoint_bytes,
        context_tokens=int(row["context"]),  # type: ignore[call-overload]
    )
    contract = result.contract()
    # The grid keys a row by what was asked (--dtype, --kv-dtype) and names what it resolved to
    # weight_format / kv_cache_dtype; the contract reports only the resolved names.
    contract["weight_format"] = contract.pop("weight_dtype")
    contract["kv_cache_dtype"] = contract.pop("kv_dtype")
    return contract


def compare_sample(sample: pl.DataFrame, models: pl.DataFrame, gpus: pl.DataFrame) -> tuple[int, list[Mismatch]]:
    """Recompute each sampled grid row with the scalar engine; every shared column must agree."""
    specs = {m.repo_id: m for m in grid_models(models)[0]}
    skus = {s.id: s for s in gpu_skus(gpus)}
    mismatches: list[Mismatch] = []
    checked = 0
    for row in sample.iter_rows(named=True):
        model = specs.get(str(row["model"]))
        sku = skus.get(str(row["gpu"]))
        settings = (
            f"{row['engine']} {row.get('engine_version')} {row['weight_dtype']}/{row['kv_dtype']} "
            f"tp={row['tp']} pp={row['pp']} T={row['context']}"
        )
        if model is None or sku is None:
            mismatches.append(Mismatch(str(row["model"]), str(row["gpu"]), settings, "model/gpu", "present", "missing"))
            continue
        expected = estimate_for_row(row, model.spec, sku, model.checkpoint_bytes)
        checked += 1
        for column, value in row.items():
            if column in ("model", "gpu") or column not in expected:
                continue
            if not _same(value, expected[column]):
                mismatches.append(Mismatch(model.repo_id, sku.id, settings, column, value, expected[column]))
    return checked, mismatches
