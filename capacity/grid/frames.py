"""The deployment frames: the rows of the planning part as LazyFrames, joined with the engine settings
per GPU and sized (`capacity.grid.sizing`); PP = 1 first, PP > 1 only where that does not fit."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import polars as pl

from capacity.features.parallel_layout import replica_gpus
from capacity.grid.columns import (
    _CAT,
    _F64,
    _I64,
    _PERF_GPU,
    _PERF_KV,
    _PERF_KV_TERMS,
    _PERF_LAYOUT,
    _PERF_SETTINGS,
    _PERF_WEIGHTS,
    _STR,
    _WINDOW_PARTS,
    CONTEXT_COLUMNS,
    DEPLOYMENT_ONLY_COLUMNS,
    GPU_COLUMNS,
    GRID_COLUMNS,
    LAYOUT_COLUMNS,
    POOL_COLUMNS,
    VIEW_DEPLOYMENT_ONLY_COLUMNS,
    WINDOW_PADDING,
    Schema,
    derived_deployment_columns,
    pool_window_columns,
    stage_columns,
)
from capacity.grid.options import GridModel, GridOptions
from capacity.grid.planning import _build_tables, _Registry, _registry, _Tables
from capacity.grid.sizing import _pool_terms, _sized
from capacity.grid.speed import _perf_keep
from capacity.performance import GB, TFLOP
from capacity.spec import GpuSku


def _rows(rows: Sequence[tuple[object, ...]], schema: Schema) -> pl.LazyFrame:
    """The planning's row tuples as a frame of `schema`, built column by column: from the planning's tuples, a
    third less CPU time than Polars' row orientation."""
    if not rows:
        return pl.LazyFrame(schema=schema)
    return pl.LazyFrame(dict(zip(schema, zip(*rows, strict=True), strict=True)), schema=schema)


def _gpu_frame(gpus: Sequence[GpuSku]) -> pl.LazyFrame:
    rows = [
        (g, s.id, s.memory_total_bytes, s.fp8_support, s.fp4_support, s.gpus_per_node, s.nvlink_multicast, s.peer_link_gpus,
         s.memory_bandwidth_gbps * GB if s.memory_bandwidth_gbps else None,
         s.bf16_dense_tflops * TFLOP if s.bf16_dense_tflops else None,
         (s.fp8_dense_tflops or s.bf16_dense_tflops or 0) * TFLOP or None,
         s.interconnect_gbps * GB if s.interconnect_gbps else math.inf)
        for g, s in enumerate(gpus)
    ]  # fmt: skip
    schema: Schema = {
        "gpu_idx": _I64,
        "gpu": _STR,
        "gpu_memory_bytes": _I64,
        "fp8_support": pl.Boolean,
        "fp4_support": pl.Boolean,
        "gpus_per_node": _I64,
        "nvlink_multicast": pl.Boolean,
        "peer_link_gpus": _I64,
        **dict.fromkeys(_PERF_GPU, _F64),
    }
    return _rows(rows, schema)


def _candidate_frame(t: _Tables) -> tuple[pl.LazyFrame, int]:
    """One row per (KV layout, base block size): candidate shapes 0..S-1 side by side."""
    width = max((len(found) for *_, found in t.candidates), default=1)
    schema: Schema = {"kv_id": _I64, "base_block_size": _I64, "state_checkpoints": pl.Boolean}
    for s in range(width):
        schema |= {f"_shape_{s}": _I64, f"_unit_{s}": _I64, f"_swa_den_{s}": _F64, f"_state_{s}": _I64,
                   f"_state_slots_{s}": _I64, f"_stage_{s}": _I64}  # fmt: skip
    rows = []
    for kv_id, base, checkpoints, found in t.candidates:
        row: list[object] = [kv_id, base, checkpoints]
        for s in range(width):
            row += list(found[s]) if s < len(found) else [None, None, None, None, None, None]
        rows.append(tuple(row))
    return _rows(rows, schema), width


def _shape_frame(t: _Registry) -> tuple[pl.LazyFrame, int]:
    windows = max((len(shape[-1]) for shape in t.shapes), default=0)
    windows = max(windows, 1)
    schema: Schema = {
        "_shape": _I64,
        "block_size": _I64,
        "pool_fixed_units": _I64,
        "pool_per_block_groups": _I64,
        "pool_num_groups": _I64,
        "pool_swa_window": _I64,
        "pool_swa_floor": _I64,
    }
    for j in range(windows):
        schema |= {f"pool_window_{j}_groups": _I64, f"pool_window_{j}_held": _I64, f"pool_window_{j}_block_size": _I64}
    rows = []
    for *head, windowed in t.shapes:
        row: list[object] = list(head)
        for j in range(windows):
            row += list(windowed[j]) if j < len(windowed) else [0, 0, 1]
        rows.append(tuple(row))
    return _rows(rows, schema), windows


@dataclass(frozen=True, slots=True)
class _Plan:
    """The deployment frame in parts. `deployments` is narrow: per deployment only what depends on
    the GPU (settings, overhead, budget, pool), keyed by `_rank` (the layout), `gpu_idx` and
    `model_idx`, in the published order; `layouts` holds what a layout's deployments share (one
    row per `_rank`: keys, dtypes, bytes per token, weights), `gpus` and `contexts` the rest."""

    layouts: pl.LazyFrame
    deployments: pl.LazyFrame
    gpus: pl.LazyFrame
    contexts: pl.LazyFrame
    windows: int


def _plan(models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None = None) -> _Plan:
    options = options or GridOptions()
    reg = _registry(models, gpus, options)
    return _plan_tables(_build_tables(reg, models))


def served_frames(reg: _Registry) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """The GPU frame and `served` (settings x GPUs x fp8 / fp4 needs), built once per build."""
    if reg.served is None:
        reg.served = _served(reg)
    gpu_frame, served = reg.served
    return gpu_frame.lazy(), served.lazy()


def _served(reg: _Registry) -> tuple[pl.DataFrame, pl.DataFrame]:
    settings = _rows(
        reg.settings,
        {
            "engine_idx": _I64,
            "model_class": _I64,
            "tp": _I64,
            "pp": _I64,
            "dp": _I64,
            "kv_idx": _I64,
            "gpu_idx": _I64,
            "gpu_memory_utilization": _F64,
            "max_num_seqs": _I64,
            "pool_max_num_batched_tokens": _I64,
            "pool_max_in_flight_tokens": _I64,
            "base_block_size": _I64,
            "state_checkpoints": pl.Boolean,
            **dict.fromkeys(_PERF_SETTINGS, _F64),
            "overhead_link": _I64,
        },
    ).with_row_index("settings_id")
    gpu_frame = _gpu_frame(reg.gpus).with_columns(pl.col("gpu").cast(_CAT))

    # which GPUs serve a layout: TP within the node, fp8 / fp4 where the layout needs them. The
    # settings table holds one row per GPU for every (engine, class, TP, PP); joining on the needs
    # produces only the valid layout x GPU pairs.
    needs = pl.LazyFrame(
        {"needs_fp8": [False, False, True, True], "needs_fp4": [False, True, False, True]},
        schema={"needs_fp8": pl.Boolean, "needs_fp4": pl.Boolean},
    )
    served = (
        settings.join(gpu_frame.select("gpu_idx", "gpu_memory_bytes", "gpus_per_node", "fp8_support", "fp4_support",
                                       *_PERF_GPU),
                      on="gpu_idx", how="inner")
        .filter(pl.col("tp") <= pl.col("gpus_per_node"))
        .join(needs, how="cross")
        .filter((~pl.col("needs_fp8") | pl.col("fp8_support")) & (~pl.col("needs_fp4") | pl.col("fp4_support")))
        .drop("fp8_support", "fp4_support")
    )  # fmt: skip
    gpu_df, served_df = pl.collect_all([gpu_frame, served])
    return gpu_df, served_df


@dataclass(frozen=True, slots=True)
class _Frames:
    """The frames of one `_Tables`: `full` one row per layout (wide), the rest for the sizing."""

    full: pl.LazyFrame
    served: pl.LazyFrame
    node: pl.LazyFrame
    model_frame: pl.LazyFrame
    gpu_frame: pl.LazyFrame
    sized: Callable[..., pl.LazyFrame]  # `sizing._sized` over the build's frames (a deployment frame first)
    allowed: pl.LazyFrame  # (gpu_set, gpu_idx): the GPUs of each set that GPU-specific layouts are served on
    windows: int
    layouts: int  # rows of `full`
    stage_slots: int  # pipeline stages a layout can have (`_Registry.stage_slots`)


_NARROW = (
    "_rank", "kv_id", "model_idx", "model_class", "engine_idx", "weight_idx", "kv_idx", "tp", "pp", "dp",
    "needs_fp8", "needs_fp4", "weights_bytes_per_gpu", "gpu_set", "max_model_len", "min_context",
    "state_bytes_per_sequence_per_gpu", *_PERF_LAYOUT, *_PERF_KV,
)  # fmt: skip


def _narrow(slots: int) -> list[str]:
    """The layout columns the sizing reads: `_NARROW` and the stages' weight shortfalls."""
    return [*_NARROW, *stage_columns("_weights_short", slots)]


_SERVED_ON = ["engine_idx", "model_class", "tp", "pp", "dp", "kv_idx", "needs_fp8", "needs_fp4"]
_GROUP = ["model_idx", "engine_idx", "weight_idx", "kv_idx"]


def _frames(t: _Tables) -> _Frames:
    with t.reg.lock:
        return _frames_of(t)


def _frames_of(t: _Tables) -> _Frames:
    reg = t.reg
    model_frame = _rows(
        t.models,
        {
            "model_idx": _I64,
            "model": _CAT,
            "model_family": _CAT,
            "max_model_len": _I64,
            "min_context": _I64,
            "contexts": pl.List(_I64),
        },
    )
    node = _rows(t.node, {"model_idx": _I64, "gpus_per_node": _I64, "node_tp": _I64})
    kv_layouts = _rows(
        t.kv_layouts,
        {
            "kv_id": _I64,
            "model_idx": _I64,
            "model_class": _I64,
            "engine_idx": _I64,
            "kv_idx": _I64,
            "engine": _CAT,
            "engine_version": _CAT,
            "kv_dtype": _CAT,
            "tp": _I64,
            "pp": _I64,
            "dp": _I64,
            "ep": _I64,
            "dp_ranks_add_gpus": pl.Boolean,
            "kv_needs_fp8": pl.Boolean,
            "kv_cache_dtype": _CAT,
            "kv_bytes_per_token": _I64,
            "kv_bytes_per_token_per_gpu": _I64,
            "state_bytes_per_sequence_per_gpu": _I64,
            "not_modelled": _STR,
            **dict.fromkeys(_PERF_KV, _I64),
            **dict.fromkeys(_PERF_KV_TERMS, _F64),
        },
    )
    weights = _rows(
        t.weights,
        {
            "_weight_row": _I64,
            "weight_idx": _I64,
            "weight_dtype": _CAT,
            "weight_needs_fp8": pl.Boolean,
            "needs_fp4": pl.Boolean,
            "weight_format": _CAT,
            "weights_source": _CAT,
            "weights_bytes_per_gpu": _I64,
            **{c: (pl.Boolean if c == "perf_fp8_gemm" else _F64) for c in _PERF_WEIGHTS},
            **dict.fromkeys(stage_columns("_weights_short", reg.stage_slots), _I64),
        },
    )
    # a layout is a KV layout x a weight row of its group; null gpu_set: served on every GPU
    layouts = _rows(t.layouts, {"_rank": _I64, "kv_id": _I64, "_weight_row": _I64, "gpu_set": _I64}).join(
        weights, on="_weight_row", how="inner", maintain_order="left"
    )
    overheads = _rows(
        t.overheads,
        {
            "model_idx": _I64,
            "engine_idx": _I64,
            "tp": _I64,
            "pp": _I64,
            "dp": _I64,
            "max_num_seqs": _I64,
            "pool_max_num_batched_tokens": _I64,
            "overhead_link": _I64,
            "activation_peak_bytes_per_gpu": _I64,
            "non_torch_bytes_per_gpu": _I64,
            "cuda_graph_bytes_per_gpu": _I64,
            **dict.fromkeys(stage_columns("_overhead_short", reg.stage_slots), _I64),
        },
    ).unique()
    overheads = overheads.with_columns(
        derived_deployment_columns(pl.col)["overhead_bytes_per_gpu"].alias("overhead_bytes_per_gpu")
    )
    candidates, width = _candidate_frame(t)
    shapes, windows = _shape_frame(reg)
    gpu_frame, served = served_frames(reg)
    # one row per layout: everything its deployments share (the wide part, gathered once at the end)
    full = (
        layouts.join(kv_layouts, on="kv_id", how="inner")
        .join(model_frame.drop("contexts"), on="model_idx", how="inner")
        .with_columns(
            (pl.col("weight_needs_fp8") | pl.col("kv_needs_fp8")).alias("needs_fp8"),
            replica_gpus(pl.col("dp_ranks_add_gpus"), pl.col("tp"), pl.col("pp"), pl.col("dp")).alias("num_gpus"),
        )
    )
    sized = partial(
        _sized, overheads=overheads, candidates=candidates, width=width, shapes=shapes, windows=windows,
        profiles=reg.profiles, max_limit=t.max_limit, stage_slots=reg.stage_slots,
    )  # fmt: skip
    allowed = _rows(t.allowed, {"gpu_set": _I64, "gpu_idx": _I64}).with_columns(pl.lit(True).alias("_allowed"))
    layouts_count = t.rank_base + len(t.layouts)
    return _Frames(full, served, node, model_frame, gpu_frame, sized, allowed, windows, layouts_count, reg.stage_slots)


def _on_allowed_gpus(f: _Frames, frame: pl.LazyFrame) -> pl.LazyFrame:
    """Drop the layout x GPU pairs of a GPU-specific layout on other GPUs."""
    allowed = pl.col("_allowed").fill_null(False)
    return (
        frame.join(f.allowed, on=["gpu_set", "gpu_idx"], how="left")
        .filter(pl.col("gpu_set").is_null() | allowed)
        .drop("_allowed", "gpu_set")
    )


def _single(f: _Frames) -> pl.LazyFrame:
    """The PP = 1 deployments, sized (narrow; one stage: no stage budgets apart)."""
    return f.sized(
        _on_allowed_gpus(
            f, f.full.select(_narrow(f.stage_slots)).filter(pl.col("pp") == 1).join(f.served, on=_SERVED_ON, how="inner")
        ).join(f.node, on=["model_idx", "gpus_per_node"], how="left"),
        stage_slots=0,
    )


_FITS = "_fits_smallest"


def _fits_smallest(windows: int) -> pl.Expr:
    """Whether a deployment holds one sequence of the model's smallest grid context (`_FITS`)."""
    t_min = pl.col("min_context")
    budget = pl.col("kv_budget_bytes_per_gpu")
    fits = (budget > 0) & (pl.col("max_model_len") >= t_min) & _pool_terms(windows).fits(t_min, 1)
    return fits.alias(_FITS)


def _not_fitting(single: pl.LazyFrame) -> pl.LazyFrame:
    """PP > 1 only at the node's TP, and only where PP = 1 at that TP holds no sequence of the
    model's smallest grid context (`_fits_smallest`, computed on `single`): (group, GPU, node TP) of
    the PP = 1 TP-only deployments that do not fit."""
    return single.filter(
        (pl.col("tp") == pl.col("node_tp")) & (pl.col("dp") == 1) & ~pl.col(_FITS)
    ).select(*_GROUP, "gpu_idx", "node_tp")


def _multi(f: _Frames, not_fitting: pl.LazyFrame) -> pl.LazyFrame:
    """The PP > 1 deployments, sized (narrow)."""
    return f.sized(
        _on_allowed_gpus(
            f,
            f.full.select(_narrow(f.stage_slots))
            .filter(pl.col("pp") > 1)
            .join(not_fitting, left_on=[*_GROUP, "tp"], right_on=[*_GROUP, "node_tp"], how="inner")
            .join(f.served, on=[*_SERVED_ON, "gpu_idx"], how="inner"),
        )
    )


# what every deployment frame keeps: the keys, the shape and settings ids, the published per-deployment columns
_DEPLOYMENT_KEYS = ("_rank", "model_idx", "gpu_idx", "_shape", "settings_id")
_DEPLOYMENT_KEEP = (*_DEPLOYMENT_KEYS, *DEPLOYMENT_ONLY_COLUMNS)


def _view_keep() -> list[str]:
    """What a context view's deployments table stores (`tables.GridTables.context_view`), keys first: its settings
    row holds the rest of DEPLOYMENT_ONLY_COLUMNS."""
    return [*_DEPLOYMENT_KEYS, *VIEW_DEPLOYMENT_ONLY_COLUMNS, "pool_swa_capacity"]


def _keep(windows: int) -> list[str]:
    pool = [*POOL_COLUMNS, *pool_window_columns(windows)]
    return [*_DEPLOYMENT_KEEP, *pool, *_perf_keep()]


def _ordered(deployments: pl.LazyFrame, gpus: int, layouts: int) -> pl.LazyFrame:
    """By model, GPU, layout: one integer key sorts faster than three columns."""
    return deployments.sort((pl.col("model_idx") * gpus + pl.col("gpu_idx")) * max(layouts, 1) + pl.col("_rank"))


def _plan_tables(t: _Tables) -> _Plan:
    f = _frames(t)
    single = _single(f).with_columns(_fits_smallest(f.windows))
    multi = _multi(f, _not_fitting(single))
    keep = _keep(f.windows)
    deployments = _ordered(pl.concat([single.select(keep), multi.select(keep)]), len(t.reg.gpus), f.layouts)
    return _Plan(
        layouts=f.full.select("_rank", *LAYOUT_COLUMNS),
        deployments=deployments,
        gpus=f.gpu_frame.select("gpu_idx", *GPU_COLUMNS),
        contexts=f.model_frame.select("model_idx", "contexts"),
        windows=f.windows,
    )


def build_deployments(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None = None
) -> pl.LazyFrame:
    """One row per deployment (model x GPU x engine x dtypes x TP x PP): the grid's context-free
    columns, the pool columns, and `contexts` (the list `expand_contexts` turns into rows).
    String columns are Categorical; joins run on integer codes."""
    plan = _plan(models, gpus, options)
    return _widened(plan, plan.deployments).drop("_rank", "model_idx", "gpu_idx", "_shape", "settings_id")


def _widened(plan: _Plan, deployments: pl.LazyFrame) -> pl.LazyFrame:
    """The narrow deployments with the layout, GPU and contexts columns, in the deployment order."""
    deployment_columns = [c for c in GRID_COLUMNS if c not in CONTEXT_COLUMNS]
    extra = [c for c in deployments.collect_schema().names() if c not in deployment_columns]
    return (
        deployments.join(plan.layouts, on="_rank", how="left", maintain_order="left")
        .join(plan.gpus, on="gpu_idx", how="left", maintain_order="left")
        .join(plan.contexts, on="model_idx", how="left", maintain_order="left")
        .select(*deployment_columns, *extra, "contexts")
    )


def _with_windows(frame: pl.LazyFrame, have: int, want: int) -> pl.LazyFrame:
    """Pool window columns up to `want`: a window a pool does not have holds no layer (0 x anything,
    with a block size of 1 so that the division stays defined)."""
    empty = [
        pl.lit(WINDOW_PADDING[part], _I64).alias(f"pool_window_{j}_{part}")
        for j in range(have, want)
        for part in _WINDOW_PARTS
    ]
    return frame.with_columns(empty) if empty else frame
