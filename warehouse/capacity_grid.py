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

from capacity.grid import GRID_COLUMNS, GridModel, GridOptions, build_capacity_grid, build_context_limits
from capacity.spec import GpuSku
from models_registry.normalize import spec_from_snapshot
from models_registry.sources.common import ConfigSnapshot, ItemError, StageError, one_line
from warehouse.sources import ingest_errors_frame


@dataclass(frozen=True, slots=True)
class CapacityFrames:
    grid: pl.DataFrame
    context_limits: pl.DataFrame
    errors: pl.DataFrame
    models: int  # models with grid rows


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


def _grid_per_model(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None
) -> tuple[list[pl.LazyFrame], list[ItemError]]:
    """The slow path, taken only when the whole-catalog grid raised: one model at a time."""
    frames: list[pl.LazyFrame] = []
    errors: list[ItemError] = []
    for model in models:
        try:
            frame = build_capacity_grid([model], gpus, options).collect().lazy()
        except Exception as exc:  # one model's failure must not stop the run; it is reported
            reason = one_line(f"{model.repo_id}: capacity grid failed: {type(exc).__name__}: {exc}")
            errors.append(ItemError("model", model.repo_id, "grid", reason))
            continue
        frames.append(frame)
    return frames, errors


def capacity_frames(models: pl.DataFrame, gpus: pl.DataFrame, options: GridOptions | None = None) -> CapacityFrames:
    """The grid and the context limits for every model of the run, and why any model is missing."""
    specs, errors = grid_models(models)
    skus = gpu_skus(gpus)
    try:
        grid = build_capacity_grid(specs, skus, options).collect()
    except Exception:
        parts, more = _grid_per_model(specs, skus, options)
        errors += more
        grid = pl.concat(parts, how="vertical_relaxed").collect() if parts else pl.DataFrame()
    if grid.is_empty() and not grid.columns:
        grid = build_capacity_grid([], skus, options).collect()
    limits = build_context_limits(grid.lazy()).collect()
    grid = grid.select(GRID_COLUMNS)  # the pool_* columns only serve the context-limit search
    planned = set(grid.get_column("model").unique().to_list()) if grid.height else set()
    for model in specs:
        if model.repo_id not in planned and not any(e.item_key == model.repo_id for e in errors):
            reason = f"{model.repo_id}: no deployment in the grid (no valid parallelism on any GPU in the catalog)"
            errors.append(ItemError("model", model.repo_id, "grid", reason))
    return CapacityFrames(grid, limits, ingest_errors_frame(errors), len(planned))


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
