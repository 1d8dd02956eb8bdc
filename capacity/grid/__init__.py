"""The capacity grid: every model x GPU x weight dtype x KV dtype x parallelism x engine x context.

Pure and vectorized: `build_capacity_grid` returns a LazyFrame, nothing is collected there
(`grid_tables` collects: it sizes the PP = 1 deployments before planning the PP > 1 ones).

How the work is split, so that each rule is written once (the engine profiles, `capacity.pool`):
- Per *layout* (model, engine, weight dtype, KV dtype, TP, PP), a Python loop calls the scalar helpers
  (`kv_bytes_per_token_per_gpu`, `estimate_weights`, the profile's `overhead` and `stage_pools`,
  `sglang_cells`, `KVPool.charge_terms`...): bytes per token, weights, overhead, and the *shape* of the
  KV pool (bytes per block, block size, how a sequence is charged). Layouts are a few per cent of rows.
- Per GPU, the profile's `defaults` gives utilization, batch defaults and block size for each GPU x TP x PP
  (a small table); the cross product with the layouts is a join.
- Per deployment (layout x GPU) and per context the arithmetic is Polars expressions: the usable
  memory, the KV budget (the profile's `kv_budget` over columns), the block count of the tightest
  pipeline stage, and then the pool's rules asked of `capacity.pool.PoolTerms` built from the pool
  columns (`_pool_terms`): the units a sequence of T tokens takes, B_max, the start check and the
  largest length that starts, the printed concurrency (its exact ratio, rounded as Python's
  `round(x, 4)`), and the max context per target concurrency; both searches step with
  `numeric.bisect_step`, every row at once, as `pool.largest_starting_len` / `pool.max_context` do.
`tests/test_grid.py` proves grid rows equal `estimate(...).contract()` column by column.

Frames: `build_deployments` gives one row per deployment (PP = 1 first; PP > 1 only where that does
not fit), `expand_contexts` one row per deployment and context, `build_capacity_grid` both in one
plan. Columns are GRID_COLUMNS (labels Categorical, bytes and counts Int64) then the internal
`pool_*` columns that `build_context_limits` reads. A layout the scalar engine refuses (it raises,
e.g. a pipeline stage holding only KV-shared layers) has no rows.

Tables, for publishing at fleet scale: `grid_tables` gives the same grid as `GridTables`, four
tables that keep each column at its own grain (GPUs; layouts: keys, dtypes, bytes per token,
weights, the strings; deployments: settings, overhead, budget, pool; contexts: B_max, concurrency,
fit), so that a 10M-row grid is 10M narrow rows plus 1.5M deployments instead of 10M x 35 values;
`grid_tables_sql` is the SELECT that joins them back, `GridTables.grid()` the same in Polars.
`iter_grid_tables` yields them for chunks of models (same ids, same rows) and overlaps the
Python part of one chunk with the Polars part of the one before. Two savings only this path
makes: the PP > 1 layouts are planned after the PP = 1 deployments are sized, and only where
those do not fit (planning every PP > 1 layout was half the Python work, for a few per cent of
the deployments); and the KV side of a layout (bytes per token, pool shapes) is computed once per
KV structure, shared by models that differ only in parameter counts (as does every path).

What the grid enumerates (GridOptions changes it):
- engines: vllm (default release, `engine_constants.VLLM_DEFAULT_VERSION`), sglang, trtllm. `plain`
  is left out: its overhead is given by hand per deployment, so a fleet-wide row would be a guess.
- weight dtypes, keyed by the `--dtype` value (`weight_dtype`; `weight_format` is what it resolves to):
  `bf16` always; `auto` (the checkpoint's own format) where that is not plain bf16, i.e. quantized
  checkpoints (fp8, int4 AWQ/GPTQ, mxfp4: served on every GPU, as vLLM does with Marlin/Triton
  weight-only kernels where the GPU lacks the math) and fp16/fp32 checkpoints; `fp8` on GPUs with
  `fp8_support` unless the checkpoint already is fp8; `int4` everywhere unless the checkpoint already
  is int4; `mxfp4` (routed experts only, as gpt-oss ships) for MoE models on GPUs with `fp4_support`,
  unless the checkpoint already is mxfp4 (a dense model has no experts: mxfp4 would equal bf16).
- KV dtypes (`kv_dtype`, resolved in `kv_cache_dtype`): `auto`; `fp8` on GPUs with `fp8_support`.
- parallelism: TP in {1, 2, 4, 8} that passes `parallel.validate_parallelism` (divides the attention
  heads, KV heads divisible either way) and is at most the GPU's `gpus_per_node`. PP in {2, 4} only at
  the node's TP (the largest valid TP on that GPU) and only where the PP=1 deployment at that TP does
  not fit: no KV budget, or not one sequence of the model's smallest grid context.
- contexts: powers of two from 1,024 up to the model's context limit, plus the limit itself. Each
  row is `estimate(..., context_tokens=T)` with max_model_len = the limit and concurrency None.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import product
from typing import Any

import polars as pl
import polars.selectors as cs

from capacity import engine_constants as ec
from capacity.dtypes import element_bytes, kv_element_bytes
from capacity.engines import DefaultsRequest, Engine, EngineProfile, PoolRequest
from capacity.engines import sglang as sglang_rules
from capacity.engines.registry import engine_profile
from capacity.kv_bytes import kv_bytes_per_token, kv_bytes_per_token_per_gpu, state_bytes_per_sequence_per_gpu
from capacity.numeric import bisect_step
from capacity.overhead import OverheadInputs
from capacity.parallel import valid_tp_sizes
from capacity.performance import GB, TFLOP, PerfEfficiency, PerfInputs, efficiency_for, rank_terms, tpot_seconds
from capacity.pool import KVPool, PoolTerms, PoolUnit
from capacity.spec import GpuSku, ModelSpec, SpecError, StateMixer
from capacity.weights import WeightsEstimate, estimate_weights, with_layout_extra

# `plain` needs its overhead by hand: not a fleet-wide row
ENGINES = (Engine.VLLM.value, Engine.SGLANG.value, Engine.TRTLLM.value)
WEIGHT_CHOICES = ("bf16", "auto", "fp8", "int4", "mxfp4")  # the rules of weight_dtype_choices
KV_CHOICES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16", "fp16")  # fp8*: GPUs with fp8_support
TARGET_CONCURRENCIES = (1, 8, 32, 128, 512)
MIN_CONTEXT = 1024
_BISECTION_STEPS = 34  # max_model_len // block_size < 2**34 for any context limit a config states

DEPLOYMENT_KEYS = (
    "model",
    "model_family",
    "gpu",
    "engine",
    "engine_version",
    "weight_dtype",
    "kv_dtype",
    "tp",
    "pp",
    "num_gpus",
)
# Per-context columns; everything else in GRID_COLUMNS is a property of the deployment.
CONTEXT_COLUMNS = ("context", "max_concurrency", "b_max", "b_max_memory", "fits", "tpot_ms", "output_tokens_per_second")
# The published grid: keys, context, then the breakdown of `capplan estimate --json` (same names).
# `weight_format` / `kv_cache_dtype` are what `capplan estimate --json` calls weight_dtype / kv_dtype
# (the resolved names); the grid's weight_dtype / kv_dtype are the values given to --dtype / --kv-dtype.
GRID_COLUMNS = (
    *DEPLOYMENT_KEYS,
    "context",
    "weight_format",
    "kv_cache_dtype",
    "weights_source",
    "not_modelled",
    "gpu_memory_bytes",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_gpu",
    "state_bytes_per_sequence_per_gpu",
    "weights_bytes_per_gpu",
    "activation_peak_bytes_per_gpu",
    "non_torch_bytes_per_gpu",
    "cuda_graph_bytes_per_gpu",
    "overhead_bytes_per_gpu",
    "kv_budget_bytes_per_gpu",
    "num_blocks",
    "block_size",
    "kv_cache_tokens",
    "physical_kv_token_slots",
    "max_concurrency",
    "b_max",
    "b_max_memory",
    "fits",
    "tpot_ms",
    "output_tokens_per_second",
)
# The pool's charge terms (`KVPool.charge_terms`), carried after GRID_COLUMNS so that
# `build_context_limits` can evaluate any context; `pool_window_{j}_groups/_held` follow, one pair
# per distinct window of the models in the build. Not part of the published grid.
POOL_COLUMNS = (
    "pool_unit_bytes",  # bytes of one unit of the tightest stage (`KVPool.unit_bytes`): what a resized budget divides
    "pool_max_num_batched_tokens",
    "pool_max_in_flight_tokens",
    "pool_fixed_units",
    "pool_per_block_groups",
    "pool_num_groups",
    "pool_swa_capacity",
    "pool_swa_window",
)

_WINDOW_PARTS = ("groups", "held", "block_size")
# The speed model's per-rank terms (`capacity.performance.RankTerms`) carried from the layouts to the
# context rows, and the GPU's and engine's: internal columns, not part of the published grid.
PERF_WINDOW_SLOTS = 4  # windowed layer groups of distinct windows a layout's speed keeps apart
_PERF_LAYOUT = (
    "perf_dense_bytes", "perf_expert_bytes", "perf_active_params", "perf_full_kv", "perf_attn_full",
    "perf_layers", "perf_act_bytes", "perf_fp8_gemm",
    *(f"perf_win_{j}_{part}" for j in range(PERF_WINDOW_SLOTS) for part in ("tokens", "kv", "attn")),
)  # fmt: skip
_PERF_KV = ("perf_num_experts", "perf_experts_per_token", "perf_hidden")
_PERF_GPU = ("perf_bandwidth", "perf_bf16_flops", "perf_fp8_flops", "perf_link")
_PERF_SETTINGS = ("perf_eff_memory", "perf_eff_compute", "perf_step_s", "perf_allreduce_s")
_PERF_PARALLEL = ("perf_tp", "perf_pp")  # copies of tp / pp that travel with the narrow deployment rows
PERF_COLUMNS = (*_PERF_LAYOUT, *_PERF_KV, *_PERF_GPU, *_PERF_SETTINGS, *_PERF_PARALLEL)
_I64 = pl.Int64
_F64 = pl.Float64
_STR = pl.String
_CAT = pl.Categorical
Schema = dict[str, pl.DataType | type[pl.DataType]]


@dataclass(frozen=True, slots=True)
class GridModel:
    """One model of the grid: its registry id, its spec and the checkpoint's real size if known."""

    repo_id: str
    spec: ModelSpec
    checkpoint_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class GridOptions:
    engines: tuple[str, ...] = ENGINES
    vllm_version: str | None = None  # None: engine_constants.VLLM_DEFAULT_VERSION
    tp_sizes: tuple[int, ...] = (1, 2, 4, 8)
    pp_sizes: tuple[int, ...] = (2, 4)  # only where one node at the largest TP does not fit
    weight_dtypes: tuple[str, ...] = WEIGHT_CHOICES
    kv_dtypes: tuple[str, ...] = ("auto", "fp8")
    min_context: int = MIN_CONTEXT
    speed: bool = True  # tpot_ms / output_tokens_per_second (capacity.performance); False: null columns

    def engine_version(self, engine: str) -> str | None:
        """The release the grid plans an engine at: vLLM's is an option, the others' profiles are one release."""
        return {Engine.VLLM: self.vllm_version}.get(Engine(engine))

    def __post_init__(self) -> None:
        unknown = (
            [e for e in self.engines if e not in ENGINES]
            + [w for w in self.weight_dtypes if w not in WEIGHT_CHOICES]
            + [k for k in self.kv_dtypes if k not in KV_CHOICES]
        )
        if unknown:
            raise ValueError(
                f"grid options: unsupported {', '.join(map(repr, unknown))} (engines {', '.join(ENGINES)}; "
                f"weight dtypes {', '.join(WEIGHT_CHOICES)}; KV dtypes {', '.join(KV_CHOICES)})"
            )
        if any(tp < 1 for tp in self.tp_sizes) or any(pp < 2 for pp in self.pp_sizes) or self.min_context < 1:
            raise ValueError("grid options: TP sizes >= 1, PP sizes >= 2 (PP = 1 is always there), min_context >= 1")


def grid_contexts(limit: int, min_context: int = MIN_CONTEXT) -> list[int]:
    """Powers of two from `min_context` below the limit, then the limit itself."""
    contexts = []
    t = min_context
    while t < limit:
        contexts.append(t)
        t *= 2
    contexts.append(limit)
    return contexts


def weight_dtype_choices(spec: ModelSpec, wanted: Iterable[str]) -> list[tuple[str, bool, bool]]:
    """(weight dtype, needs fp8 support, needs fp4 support) for a model; see the module docstring."""
    own = spec.quantization.weight_format if spec.quantization else None
    plain_bf16 = own is None and spec.torch_dtype.lower() in ("bfloat16", "bf16")
    choices: list[tuple[str, bool, bool]] = []
    for dtype in wanted:
        if dtype == "bf16" or (dtype == "auto" and not plain_bf16) or (dtype == "int4" and own != "int4"):
            choices.append((dtype, False, False))
        elif dtype == "fp8" and own != "fp8":
            choices.append((dtype, True, False))
        elif dtype == "mxfp4" and own != "mxfp4" and spec.num_experts > 0:
            choices.append((dtype, False, True))
    return choices


# --- the per-layout part: the scalar helpers, called once per distinct input ----------------------


# (shape id, bytes per unit, SGLang SWA denominator, SGLang Mamba state bytes per slot and slots per
# request) per stage
_Candidates = list[tuple[int, int, float | None, int | None, int | None]]
# bytes per token (whole model, per GPU), state bytes per sequence, (base block size, state checkpoints, candidates) or None
_KVSide = tuple[int, int, int, list[tuple[int, bool, _Candidates]] | None]


@dataclass(slots=True)
class _Registry:
    """What every model of a build shares, whichever chunk of the fleet it is planned in: the engine
    settings per (engine, model class, TP, PP, GPU), the pool shapes and the KV side of layouts."""

    options: GridOptions
    profiles: tuple[EngineProfile, ...]  # one per options.engines
    gpus: Sequence[GpuSku]
    model_class: list[int] = field(default_factory=list)  # per model of the build
    plans: list[tuple[list[tuple[int, int]], dict[int, int | None]]] = field(default_factory=list)
    settings: list[tuple[object, ...]] = field(default_factory=list)
    batches: dict[tuple[str, int], set[tuple[int, int]]] = field(default_factory=dict)
    block_sizes: dict[tuple[str, int], set[tuple[int, bool]]] = field(default_factory=dict)
    shapes: list[tuple[int, int, int, int, int, int, tuple[tuple[int, int, int], ...]]] = field(default_factory=list)
    shape_ids: dict[tuple[object, ...], int] = field(default_factory=dict)
    # the KV side of a layout depends on the model's layers only (not its parameter counts): models
    # that share them (fine-tunes, re-quantizations) share these results, keyed by `kv_view` id
    kv_views: dict[ModelSpec, int] = field(default_factory=dict)
    kv_specs: list[ModelSpec] = field(default_factory=list)
    kv_cache: dict[tuple[object, ...], object] = field(default_factory=dict)
    kv_sides: dict[tuple[int, str, int, int, int, int], _KVSide] = field(default_factory=dict)
    # held while rows are built from, or added to, the registry (chunks are planned in two threads)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _served: tuple[pl.DataFrame, pl.DataFrame] | None = None

    @property
    def link_kinds(self) -> tuple[tuple[bool, int], ...]:
        """The (`GpuSku.nvlink_multicast`, `GpuSku.peer_link_gpus`) pairs among the GPUs (the overhead differs
        by them at TP > 1: non-torch memory, and the custom all-reduce's CUDA-graph charge)."""
        return tuple(sorted({(gpu.nvlink_multicast, gpu.peer_link_gpus) for gpu in self.gpus}))

    def kv_view(self, spec: ModelSpec) -> tuple[int, ModelSpec]:
        """(id, spec) of the model's KV structure: the spec without its parameter counts, one object
        per distinct structure. The KV helpers are called with this view, never with the spec, so a
        helper that ever read a parameter count would disagree with `estimate` in the tests."""
        view = replace(
            spec, layer_params=(), embedding_params=0, lm_head_params=0, final_norm_params=0, extra_params=0, notes=()
        )
        found = self.kv_views.get(view)
        if found is None:
            found = self.kv_views[view] = len(self.kv_views)
            self.kv_specs.append(view)
        return found, self.kv_specs[found]

    def served_frames(self) -> tuple[pl.LazyFrame, pl.LazyFrame]:
        """The GPU frame and `served` (settings x GPUs x fp8 / fp4 needs), built once per build."""
        if self._served is None:
            self._served = _served(self)
        gpu_frame, served = self._served
        return gpu_frame.lazy(), served.lazy()

    def shape(self, pool: KVPool, swa_window: int) -> int:
        """Id of a pool shape: block size and charge terms (what a sequence of T tokens takes)."""
        terms = pool.charge_terms()
        key = (pool.block_size, terms.fixed_units, terms.per_block_groups, terms.windowed, len(pool.groups), swa_window)
        found = self.shape_ids.get(key)
        if found is None:
            found = self.shape_ids[key] = len(self.shape_ids)
            self.shapes.append(
                (found, pool.block_size, terms.fixed_units, terms.per_block_groups, len(pool.groups), swa_window, terms.windowed)
            )  # fmt: skip
        return found


@dataclass(slots=True)
class _Tables:
    """Rows of the small frames built in Python for some models of a build; the deployment frame is
    their join (with the registry's settings and shapes)."""

    reg: _Registry
    rank_base: int = 0  # the first layout's `_rank`
    kv_base: int = 0  # the first KV layout's `kv_id`
    models: list[tuple[object, ...]] = field(default_factory=list)
    node: list[tuple[object, ...]] = field(default_factory=list)
    kv_layouts: list[tuple[object, ...]] = field(default_factory=list)
    layouts: list[tuple[object, ...]] = field(default_factory=list)
    allowed: list[tuple[int, int]] = field(default_factory=list)  # (_rank, gpu_idx) of GPU-specific layouts
    overheads: list[tuple[object, ...]] = field(default_factory=list)
    candidates: list[tuple[int, int, bool, list[tuple[int, int, float | None, int | None, int | None]]]] = field(
        default_factory=list
    )


def _pool_candidates(
    t: _Registry,
    profile: EngineProfile,
    spec: ModelSpec,
    kv_bytes: int,
    ssm_bytes: int,
    act_bytes: int,
    tp: int,
    pp: int,
    base_block_size: int,
    state_checkpoints: bool,
) -> list[tuple[int, int, float | None, int | None, int | None]]:
    """(shape id, bytes per unit, SGLang SWA denominator, SGLang Mamba state bytes and slots) of each pipeline
    stage's pool, first occurrences in stage order: the deployment's budget decides which stage is the
    tightest."""
    found: list[tuple[int, int, float | None, int | None, int | None]] = []
    pools = profile.stage_pools(
        PoolRequest(spec, 0, kv_bytes, ssm_bytes, act_bytes, tp, pp, base_block_size, 0, 0, state_checkpoints)
    )
    for pool in pools:
        state = pool.state_bytes_per_sequence if pool.unit is PoolUnit.TOKEN and pool.state_bytes_per_sequence else None
        slots = pool.swa_window_tokens if state is not None else None  # state slots a request holds
        candidate = (t.shape(pool, pool.swa_window_tokens), pool.unit_bytes, pool.swa_bytes_per_full_token, state,
                     slots)  # fmt: skip
        if candidate not in found:
            found.append(candidate)
    return found


def _kv_side(
    t: _Registry,
    vid: int,
    spec: ModelSpec,
    profile: EngineProfile,
    kv_bytes: int,
    ssm_bytes: int,
    act_bytes: int,
    tp: int,
    pp: int,
    bases: list[tuple[int, bool]],
) -> _KVSide:
    """Bytes per token (whole model, per GPU), state bytes per sequence and, per base block size,
    the pool candidates of one KV layout of the KV view `vid` (`spec`); None for the candidates
    where the scalar engine refuses the layout (it raises)."""
    memo = t.kv_cache
    key: tuple[object, ...] = ("token", vid, kv_bytes)
    per_token = memo.get(key)
    if per_token is None:
        per_token = memo[key] = kv_bytes_per_token(spec, kv_bytes)
    key = ("token_gpu", vid, kv_bytes, tp, pp)
    per_token_gpu = memo.get(key)
    if per_token_gpu is None:
        per_token_gpu = memo[key] = kv_bytes_per_token_per_gpu(spec, kv_bytes, tp, pp)
    without_current = profile.conv_state_without_current
    key = ("state", vid, act_bytes, ssm_bytes, tp, pp, without_current)
    state = memo.get(key)
    if state is None:
        state = memo[key] = state_bytes_per_sequence_per_gpu(
            spec, act_bytes, ssm_bytes, tp, pp, conv_without_current=without_current
        )
    assert isinstance(per_token, int) and isinstance(per_token_gpu, int) and isinstance(state, int)
    try:
        found = [
            (
                base,
                checkpoints,
                _pool_candidates(t, profile, spec, kv_bytes, ssm_bytes, act_bytes, tp, pp, base, checkpoints),
            )
            for base, checkpoints in bases
        ]
    except (ValueError, SpecError):
        return per_token, per_token_gpu, state, None
    return per_token, per_token_gpu, state, found


def _state_mixers(spec: ModelSpec) -> frozenset[StateMixer]:
    return frozenset(layer.mixer for layer in spec.layers if layer.mixer is not None)


def _has_indexer(spec: ModelSpec) -> bool:
    return any(layer.indexer_head_dim for layer in spec.layers)


def _profiles(options: GridOptions) -> tuple[EngineProfile, ...]:
    return tuple(
        engine_profile(engine, options.engine_version(engine)) for engine in options.engines
    )


def _registry(models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions) -> _Registry:
    reg = _Registry(options, _profiles(options), gpus)
    gpns = sorted({gpu.gpus_per_node for gpu in gpus})
    # the engines' defaults read four facts of a model (its context limit, for vLLM's v0 batch rule;
    # whether it is MLA and whether it has a sparse-attention indexer, for the block size; its state
    # mixers, for prefill checkpoints): one representative per combination of facts is asked
    classes: dict[tuple[int, bool, frozenset[StateMixer], bool], int] = {}
    representative: list[ModelSpec] = []
    parallel: set[tuple[int, int]] = set()
    for gm in models:
        key = (gm.spec.context_limit_tokens, gm.spec.is_mla, _state_mixers(gm.spec), _has_indexer(gm.spec))
        if key not in classes:
            classes[key] = len(classes)
            representative.append(gm.spec)
        reg.model_class.append(classes[key])
        valid = valid_tp_sizes(gm.spec, options.tp_sizes)
        node = {gpn: max((tp for tp in valid if tp <= gpn), default=None) for gpn in gpns}
        combos = [(tp, 1) for tp in valid]
        for tp in sorted({tp for tp in node.values() if tp is not None}):
            combos += [(tp, pp) for pp in options.pp_sizes if pp <= gm.spec.num_layers]
        reg.plans.append((combos, node))
        parallel.update(combos)

    for e, (engine, profile) in enumerate(zip(options.engines, reg.profiles, strict=True)):
        for cid, rep in enumerate(representative):
            for g, gpu in enumerate(gpus):
                for (tp, pp), (k, kv_dtype) in product(sorted(parallel), enumerate(options.kv_dtypes)):
                    d = profile.defaults(DefaultsRequest(rep, gpu, gpu.memory_total_bytes, rep.context_limit_tokens, tp, pp,
                                                         kv_dtype))
                    seqs = d.max_num_seqs or None
                    batched = d.max_num_batched_tokens
                    in_flight = profile.max_in_flight_tokens(batched, pp, None)
                    eff = efficiency_for(engine, gpu)
                    reg.settings.append(
                        (e, cid, tp, pp, k, g, d.gpu_memory_utilization, seqs, batched, in_flight, d.block_size,
                         d.state_checkpoints, eff.memory_bandwidth, eff.compute, eff.step_overhead_s,
                         eff.allreduce_latency_s)
                    )
                    reg.batches.setdefault((engine, cid), set()).add((d.max_num_seqs, batched))
                    reg.block_sizes.setdefault((engine, cid), set()).add((d.block_size, d.state_checkpoints))
    return reg


# for the PP > 1 layouts planned after the PP = 1 deployments are sized: per model (index in the
# chunk), the node TPs and the (engine, KV dtype, weight dtype) indices where PP = 1 does not fit
_PPGroups = Mapping[int, tuple[set[int], set[tuple[int, int, int]]]]


def _build_tables(
    reg: _Registry,
    models: Sequence[GridModel],
    first: int = 0,
    *,
    pp1_only: bool = False,
    pp_groups: _PPGroups | None = None,
    rank_base: int = 0,
    kv_base: int = 0,
) -> _Tables:
    """The rows of `models`, models first..first + len(models) - 1 of the registry's build: every
    layout, only the PP = 1 ones (`pp1_only`) or only the PP > 1 ones of `pp_groups`."""
    with reg.lock:
        return _build_rows(reg, models, first, pp1_only, pp_groups, _Tables(reg, rank_base, kv_base))


def _build_rows(
    reg: _Registry,
    models: Sequence[GridModel],
    first: int,
    pp1_only: bool,
    pp_groups: _PPGroups | None,
    t: _Tables,
) -> _Tables:
    options = reg.options
    batches, block_sizes = reg.batches, reg.block_sizes
    wanted: set[tuple[int, int, int]] | None = None
    for m, gm in enumerate(models):
        spec = gm.spec
        cid = reg.model_class[first + m]
        combos, node = reg.plans[first + m]
        if pp1_only:
            combos = [(tp, pp) for tp, pp in combos if pp == 1]
        elif pp_groups is not None:
            if m not in pp_groups:
                continue
            tps, wanted = pp_groups[m]
            combos = [(tp, pp) for tp, pp in combos if pp > 1 and tp in tps]
        contexts = grid_contexts(spec.context_limit_tokens, options.min_context)
        t.models.append((m, gm.repo_id, spec.family, spec.context_limit_tokens, contexts[0], contexts))
        t.node.extend((m, gpn, tp) for gpn, tp in node.items())
        dtypes = weight_dtype_choices(spec, options.weight_dtypes)
        vid, kv_spec = reg.kv_view(spec)
        weights: dict[tuple[str, int, int, str], WeightsEstimate] = {}
        link_kinds = reg.link_kinds
        for tp, pp in combos:
            for e, (engine, profile) in enumerate(zip(options.engines, reg.profiles, strict=True)):
                if wanted is not None and not any(g[0] == e for g in wanted):
                    continue
                act_dtype = profile.serving_dtype(spec)
                act_bytes = element_bytes(act_dtype)
                ssm_bytes = element_bytes(profile.ssm_cache_dtype(spec, act_dtype))
                for seqs, batched in sorted(batches.get((engine, cid), ())):
                    o = None
                    for multicast, peers in link_kinds:
                        if o is None or tp > 1:  # the GPU's links move only the TP > 1 terms
                            o = profile.overhead(OverheadInputs(spec, tp, pp, batched, seqs or None, act_bytes,
                                                                multicast, peers))  # fmt: skip
                        t.overheads.append(
                            (m, e, tp, pp, seqs or None, batched, multicast, peers, o.activation_peak_bytes,
                             o.non_torch_bytes, o.cuda_graph_bytes, o.total_bytes)
                        )  # fmt: skip
                bases = sorted(block_sizes.get((engine, cid), ()))
                for k, kv_dtype in enumerate(options.kv_dtypes):
                    if wanted is not None and not any(g[:2] == (e, k) for g in wanted):
                        continue
                    kv_bytes = kv_element_bytes(kv_dtype, act_dtype)
                    side_key = (vid, engine, kv_bytes, act_bytes, tp, pp)
                    side = reg.kv_sides.get(side_key)
                    if side is None:
                        side = reg.kv_sides[side_key] = _kv_side(
                            reg,
                            vid,
                            kv_spec,
                            profile,
                            kv_bytes,
                            ssm_bytes,
                            act_bytes,
                            tp,
                            pp,
                            bases,
                        )
                    per_token, per_token_gpu, state, found = side
                    if found is None:
                        # the scalar engine cannot size this layout either (e.g. a pipeline stage
                        # that holds only KV-shared layers): no rows rather than rows it would not give
                        continue
                    kv_id = t.kv_base + len(t.kv_layouts)
                    candidates = [(kv_id, base, checkpoints, stages) for base, checkpoints, stages in found]
                    t.candidates.extend(candidates)
                    t.kv_layouts.append(
                        (kv_id, m, cid, e, k, engine, profile.version, kv_dtype, tp, pp,
                         kv_dtype.startswith("fp8"),
                         act_dtype if kv_dtype == "auto" else kv_dtype,
                         per_token, per_token_gpu, state, profile.unmodelled(spec),
                         spec.num_experts, spec.num_experts_per_token, spec.hidden_size)
                    )  # fmt: skip
                    for weight_dtype, w_fp8, w_fp4 in dtypes:
                        w_idx = options.weight_dtypes.index(weight_dtype)
                        if wanted is not None and (e, k, w_idx) not in wanted:
                            continue
                        wkey = (weight_dtype, tp, pp, act_dtype)
                        if wkey not in weights:
                            # `engine` reaches the weights only through the serving dtype
                            weights[wkey] = estimate_weights(spec, weight_dtype, tp, pp, gm.checkpoint_bytes, engine)
                        w = weights[wkey]
                        for per_gpu_bytes, gpu_idxs in _weight_variants(reg, profile, spec, tp, pp, w):
                            variant = w if per_gpu_bytes == w.per_gpu_bytes else replace(w, per_gpu_bytes=per_gpu_bytes)
                            perf = _perf_layout_row(spec, tp, pp, weight_dtype, engine, variant, kv_bytes)
                            rank = t.rank_base + len(t.layouts)
                            t.layouts.append(
                                (rank, kv_id, w_idx, weight_dtype, w_fp8, w_fp4, w.format_name, w.source,
                                 per_gpu_bytes, gpu_idxs is not None, *perf)
                            )  # fmt: skip
                            t.allowed.extend((rank, g) for g in gpu_idxs or ())
    return t


def _weight_variants(
    reg: _Registry, profile: EngineProfile, spec: ModelSpec, tp: int, pp: int, w: WeightsEstimate
) -> list[tuple[int, tuple[int, ...] | None]]:
    """The layout's weights per GPU as `memory.with_layout_extra` gives them: one value for every GPU
    (None: no restriction), or one per group of GPUs whose kernels lay the weights out alike."""
    if w.format_name != "mxfp4":  # with_layout_extra's own condition, checked once rather than per GPU
        return [(w.per_gpu_bytes, None)]
    by_bytes: dict[int, list[int]] = {}
    for g, gpu in enumerate(reg.gpus):
        by_bytes.setdefault(with_layout_extra(w, profile, spec, tp, pp, gpu).per_gpu_bytes, []).append(g)
    if len(by_bytes) <= 1:
        return [(next(iter(by_bytes), w.per_gpu_bytes), None)]
    return [(per_gpu, tuple(gpus)) for per_gpu, gpus in by_bytes.items()]


# --- the vectorized part ---------------------------------------------------------------------


def _pool_terms(windows: int) -> PoolTerms:
    """The deployment's pool as `capacity.pool.PoolTerms` over its columns: the grid asks it the same
    rules the estimate asks `KVPool.terms()` (null window parts are padded by `_with_windows`)."""
    col = pl.col
    windowed = tuple(
        (col(f"pool_window_{j}_groups"), col(f"pool_window_{j}_held"), col(f"pool_window_{j}_block_size"))
        for j in range(windows)
    )
    return PoolTerms(
        capacity_units=col("num_blocks"),
        block_size=col("block_size"),
        fixed_units=col("pool_fixed_units"),
        per_block_groups=col("pool_per_block_groups"),
        windowed=windowed,
        in_flight_tokens=col("pool_max_in_flight_tokens"),
        second_capacity=col("pool_swa_capacity"),
        second_window=col("pool_swa_window"),
    )


def _bisect(frame: pl.LazyFrame, steps: int, fits: Callable[[pl.Expr], pl.Expr]) -> pl.LazyFrame:
    """`numeric.bisect_step` on every row, `steps` times, over the `_lo` / `_hi` columns (each step
    materialized, so the expression stays one step deep)."""
    for _ in range(steps):
        lo, hi = bisect_step(pl.col("_lo"), pl.col("_hi"), fits)
        frame = frame.with_columns(lo.alias("_lo"), hi.alias("_hi"))
    return frame


def with_python_round(frame: pl.LazyFrame, numerator: str, denominator: str, out: str, digits: int = 4) -> pl.LazyFrame:
    """Add `out` = `round(numerator / denominator, digits)` exactly as Python rounds the float quotient.

    Polars' `round` scales in floating point and breaks ties differently from Python (1/160 = 0.00625
    gives 0.0063 in Python, 0.0062 in Polars). Python rounds the exact binary value of the quotient to
    the nearest decimal, ties to even. Off a tie the exact rational decides (the quotient's rounding
    error is far below the distance to the tie for numerators under 2**53 / (2 * 10**digits)); on a
    tie the side of the float quotient decides, found exactly with Veltkamp's split (fl(m / 5**d)
    times 5**d is computed without rounding error). Staged columns keep the expression trees small."""
    frame = _python_round_scaled(frame, numerator, denominator, "_k", digits)
    scale = 10**digits
    return frame.with_columns((pl.col("_k").cast(_F64) / _exact_divisor(pl.col("_k"), scale)).alias(out)).drop("_k")


def _python_round_scaled(frame: pl.LazyFrame, numerator: str, denominator: str, out: str, digits: int) -> pl.LazyFrame:
    """Add `out` = `round(numerator / denominator, digits) * 10**digits` as an exact integer: the
    rounded quotient is then `out / 10**digits`, one correctly rounded division (see `with_python_round`)."""
    scale = 10**digits
    odd = 5**digits  # 2 * 10**digits = 2**(digits + 1) * odd: the power of two scales exactly
    num, den = pl.col(numerator), pl.col(denominator)
    frame = frame.with_columns((num * scale // den).alias("_k0"), (2 * (num * scale % den)).alias("_twice_rest"))
    k0 = pl.col("_k0")
    m = 2 * k0 + 1  # the tie, in units of 1 / (2 * scale)
    frame = frame.with_columns((m.cast(_F64) / _exact_divisor(k0, odd)).alias("_f"))
    f = pl.col("_f")
    frame = frame.with_columns((f * 134217729.0).alias("_c"))  # 2**27 + 1
    frame = frame.with_columns((pl.col("_c") - (pl.col("_c") - f)).alias("_high"))
    high = pl.col("_high")
    side = (high * odd - m.cast(_F64)) + (f - high) * odd  # sign of fl(m / odd) * odd - m, exactly
    tie = pl.when(side > 0).then(k0 + 1).when(side < 0).then(k0).otherwise(k0 + k0 % 2)
    twice_rest = pl.col("_twice_rest")
    k = pl.when(twice_rest < den).then(k0).when(twice_rest > den).then(k0 + 1).otherwise(tie)
    return frame.with_columns(k.alias(out)).drop("_k0", "_twice_rest", "_f", "_c", "_high")


def _exact_divisor(like: pl.Expr, value: int) -> pl.Expr:
    """`value` as a Float64 column shaped like `like`. Polars turns a division by a literal into a
    multiplication by its reciprocal, which is not IEEE division (1309688 / 10000 would give
    130.96880000000002, not 130.9688); a column divisor keeps the correctly rounded quotient."""
    return (like * 0 + value).cast(_F64)


def _rows(rows: list[tuple[object, ...]], schema: Schema) -> pl.LazyFrame:
    return pl.LazyFrame(rows, schema=schema, orient="row")


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
    return _rows(rows, schema)  # type: ignore[arg-type]


def _candidate_frame(t: _Tables) -> tuple[pl.LazyFrame, int]:
    """One row per (KV layout, base block size): candidate shapes 0..S-1 side by side."""
    width = max((len(found) for *_, found in t.candidates), default=1)
    schema: Schema = {"kv_id": _I64, "base_block_size": _I64, "state_checkpoints": pl.Boolean}
    for s in range(width):
        schema |= {f"_shape_{s}": _I64, f"_unit_{s}": _I64, f"_swa_den_{s}": _F64, f"_state_{s}": _I64,
                   f"_state_slots_{s}": _I64}  # fmt: skip
    rows = []
    for kv_id, base, checkpoints, found in t.candidates:
        row: list[object] = [kv_id, base, checkpoints]
        for s in range(width):
            row += list(found[s]) if s < len(found) else [None, None, None, None, None]
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


LAYOUT_COLUMNS = (
    "model",
    "model_family",
    "engine",
    "engine_version",
    "weight_dtype",
    "kv_dtype",
    "tp",
    "pp",
    "num_gpus",
    "weight_format",
    "kv_cache_dtype",
    "weights_source",
    "not_modelled",
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_gpu",
    "state_bytes_per_sequence_per_gpu",
    "weights_bytes_per_gpu",
)
GPU_COLUMNS = ("gpu", "gpu_memory_bytes")
# what a deployment does not share with its layout and GPU
DEPLOYMENT_ONLY_COLUMNS = tuple(
    c for c in GRID_COLUMNS if c not in (*DEPLOYMENT_KEYS, *CONTEXT_COLUMNS, *LAYOUT_COLUMNS, *GPU_COLUMNS)
)


def _plan(models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None = None) -> _Plan:
    options = options or GridOptions()
    reg = _registry(models, gpus, options)
    return _plan_tables(_build_tables(reg, models))


def _served(reg: _Registry) -> tuple[pl.DataFrame, pl.DataFrame]:
    settings = _rows(
        reg.settings,
        {
            "engine_idx": _I64,
            "model_class": _I64,
            "tp": _I64,
            "pp": _I64,
            "kv_idx": _I64,
            "gpu_idx": _I64,
            "gpu_memory_utilization": _F64,
            "max_num_seqs": _I64,
            "pool_max_num_batched_tokens": _I64,
            "pool_max_in_flight_tokens": _I64,
            "base_block_size": _I64,
            "state_checkpoints": pl.Boolean,
            **dict.fromkeys(_PERF_SETTINGS, _F64),
        },
    )
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
                                       "nvlink_multicast", "peer_link_gpus", *_PERF_GPU),
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
    sized: Callable[[pl.LazyFrame], pl.LazyFrame]
    allowed: pl.LazyFrame  # (_rank, gpu_idx) of the layouts served only on some GPUs
    windows: int
    layouts: int  # rows of `full`


_NARROW = (
    "_rank", "kv_id", "model_idx", "model_class", "engine_idx", "weight_idx", "kv_idx", "tp", "pp",
    "needs_fp8", "needs_fp4", "weights_bytes_per_gpu", "gpu_restricted", "max_model_len", "min_context",
    "state_bytes_per_sequence_per_gpu", *_PERF_LAYOUT, *_PERF_KV,
)  # fmt: skip
_SERVED_ON = ["engine_idx", "model_class", "tp", "pp", "kv_idx", "needs_fp8", "needs_fp4"]
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
            "kv_needs_fp8": pl.Boolean,
            "kv_cache_dtype": _CAT,
            "kv_bytes_per_token": _I64,
            "kv_bytes_per_token_per_gpu": _I64,
            "state_bytes_per_sequence_per_gpu": _I64,
            "not_modelled": _STR,
            **dict.fromkeys(_PERF_KV, _I64),
        },
    )
    layouts = _rows(
        t.layouts,
        {
            "_rank": _I64,
            "kv_id": _I64,
            "weight_idx": _I64,
            "weight_dtype": _CAT,
            "weight_needs_fp8": pl.Boolean,
            "needs_fp4": pl.Boolean,
            "weight_format": _CAT,
            "weights_source": _CAT,
            "weights_bytes_per_gpu": _I64,
            "gpu_restricted": pl.Boolean,
            **{c: (pl.Boolean if c == "perf_fp8_gemm" else _F64) for c in _PERF_LAYOUT},
        },
    )
    overheads = _rows(
        t.overheads,
        {
            "model_idx": _I64,
            "engine_idx": _I64,
            "tp": _I64,
            "pp": _I64,
            "max_num_seqs": _I64,
            "pool_max_num_batched_tokens": _I64,
            "nvlink_multicast": pl.Boolean,
            "peer_link_gpus": _I64,
            "activation_peak_bytes_per_gpu": _I64,
            "non_torch_bytes_per_gpu": _I64,
            "cuda_graph_bytes_per_gpu": _I64,
            "overhead_bytes_per_gpu": _I64,
        },
    ).unique()
    candidates, width = _candidate_frame(t)
    shapes, windows = _shape_frame(reg)
    gpu_frame, served = reg.served_frames()
    # one row per layout: everything its deployments share (the wide part, gathered once at the end)
    full = (
        layouts.join(kv_layouts, on="kv_id", how="inner")
        .join(model_frame.drop("contexts"), on="model_idx", how="inner")
        .with_columns(
            (pl.col("weight_needs_fp8") | pl.col("kv_needs_fp8")).alias("needs_fp8"),
            (pl.col("tp") * pl.col("pp")).alias("num_gpus"),
        )
    )
    sized = partial(
        _sized, overheads=overheads, candidates=candidates, width=width, shapes=shapes, windows=windows,
        profiles=reg.profiles,
    )  # fmt: skip
    allowed = _rows([(*pair, True) for pair in t.allowed], {"_rank": _I64, "gpu_idx": _I64, "_allowed": pl.Boolean})
    return _Frames(full, served, node, model_frame, gpu_frame, sized, allowed, windows, t.rank_base + len(t.layouts))


def _on_allowed_gpus(f: _Frames, frame: pl.LazyFrame) -> pl.LazyFrame:
    """Drop the layout x GPU pairs of a GPU-specific layout on other GPUs."""
    allowed = pl.col("_allowed").fill_null(False)
    return (
        frame.join(f.allowed, on=["_rank", "gpu_idx"], how="left")
        .filter(~pl.col("gpu_restricted") | allowed)
        .drop("_allowed", "gpu_restricted")
    )


def _single(f: _Frames) -> pl.LazyFrame:
    """The PP = 1 deployments, sized (narrow)."""
    return f.sized(
        _on_allowed_gpus(f, f.full.select(_NARROW).filter(pl.col("pp") == 1).join(f.served, on=_SERVED_ON, how="inner"))
        .join(f.node, on=["model_idx", "gpus_per_node"], how="left")
    )


def _not_fitting(single: pl.LazyFrame, windows: int) -> pl.LazyFrame:
    """PP > 1 only at the node's TP, and only where PP = 1 at that TP holds no sequence of the
    model's smallest grid context: (group, GPU, node TP) of the PP = 1 deployments that do not fit."""
    t_min = pl.col("min_context")
    budget = pl.col("kv_budget_bytes_per_gpu")
    return single.filter(
        (pl.col("tp") == pl.col("node_tp"))
        & ~(
            (budget > 0)
            & (pl.col("max_model_len") >= t_min)
            & _pool_terms(windows).fits(t_min, 1)
        )
    ).select(*_GROUP, "gpu_idx", "node_tp")


def _multi(f: _Frames, not_fitting: pl.LazyFrame) -> pl.LazyFrame:
    """The PP > 1 deployments, sized (narrow)."""
    return f.sized(
        _on_allowed_gpus(
            f,
            f.full.select(_NARROW)
            .filter(pl.col("pp") > 1)
            .join(not_fitting, left_on=[*_GROUP, "tp"], right_on=[*_GROUP, "node_tp"], how="inner")
            .join(f.served, on=[*_SERVED_ON, "gpu_idx"], how="inner"),
        )
    )


def _keep(windows: int) -> list[str]:
    pool = [*POOL_COLUMNS, *(f"pool_window_{j}_{part}" for j in range(windows) for part in _WINDOW_PARTS)]
    return ["_rank", "model_idx", "gpu_idx", *DEPLOYMENT_ONLY_COLUMNS, *pool, *_perf_keep()]


def _ordered(deployments: pl.LazyFrame, gpus: int, layouts: int) -> pl.LazyFrame:
    """By model, GPU, layout: one integer key sorts faster than three columns."""
    return deployments.sort((pl.col("model_idx") * gpus + pl.col("gpu_idx")) * max(layouts, 1) + pl.col("_rank"))


def _plan_tables(t: _Tables) -> _Plan:
    f = _frames(t)
    single = _single(f)
    multi = _multi(f, _not_fitting(single, f.windows))
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
    return _widened(plan, plan.deployments).drop("_rank", "model_idx", "gpu_idx")


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


def _per_engine(profiles: Sequence[EngineProfile], rule: Callable[[EngineProfile], pl.Expr | int]) -> pl.Expr:
    """One column from a rule each engine profile answers for itself (by `engine_idx`)."""
    expr: pl.Expr = pl.lit(None)
    for e, profile in reversed(list(enumerate(profiles))):
        value = rule(profile)
        expr = pl.when(pl.col("engine_idx") == e).then(value if isinstance(value, pl.Expr) else pl.lit(value)).otherwise(expr)
    return expr


def _starts(windows: int, length: pl.Expr) -> pl.Expr:
    """The engine's start check at max_model_len `length` (`PoolTerms.starts`); engines that start with
    any pool only need a block."""
    starts = _pool_terms(windows).starts(length, pl.col("_start_reserved"))
    return (pl.col("kv_budget_bytes_per_gpu") > 0) & (pl.col("num_blocks") > 0) & (~pl.col("_refuses_short_pool") | starts)


def _largest_starting_len(frame: pl.LazyFrame, windows: int, steps: int = _BISECTION_STEPS + 4) -> pl.LazyFrame:
    """`pool.largest_starting_len` on every row: the largest max_model_len in [1, limit] that
    starts, by bisection over tokens (`_fitted_len`, 0 when not even one token does)."""
    limit = pl.col("max_model_len")
    frame = frame.with_columns(pl.lit(1, _I64).alias("_lo"), limit.alias("_hi"))
    frame = _bisect(frame, steps, lambda length: _starts(windows, length))
    one = pl.lit(1, _I64)
    fitted = pl.when(_starts(windows, limit)).then(limit).when(_starts(windows, one)).then(pl.col("_lo")).otherwise(0)
    return frame.with_columns(fitted.alias("_fitted_len")).drop("_lo", "_hi")


def _sized(
    dep: pl.LazyFrame,
    overheads: pl.LazyFrame,
    candidates: pl.LazyFrame,
    width: int,
    shapes: pl.LazyFrame,
    windows: int,
    profiles: Sequence[EngineProfile],
) -> pl.LazyFrame:
    """Overhead, KV budget, the tightest stage's pool, the max_model_len the engine starts with
    and the printed KV cache size per deployment."""
    dep = dep.join(
        overheads,
        on=["model_idx", "engine_idx", "tp", "pp", "max_num_seqs", "pool_max_num_batched_tokens", "nvlink_multicast",
            "peer_link_gpus"],
        how="inner",
        nulls_equal=True,
    ).join(candidates, on=["kv_id", "base_block_size", "state_checkpoints"], how="inner").with_columns(
        pl.col("tp").alias("perf_tp"), pl.col("pp").alias("perf_pp")
    )

    total, util = pl.col("gpu_memory_bytes"), pl.col("gpu_memory_utilization")
    weights, overhead = pl.col("weights_bytes_per_gpu"), pl.col("overhead_bytes_per_gpu")
    budget = _per_engine(profiles, lambda p: p.kv_budget(total, util, weights, overhead))
    dep = dep.with_columns(budget.alias("kv_budget_bytes_per_gpu"))

    # each stage's capacity; the engine sizes every rank to the first stage with the fewest units
    budget_col = pl.col("kv_budget_bytes_per_gpu")
    caps = []
    for s in range(width):
        unit, den, state = pl.col(f"_unit_{s}"), pl.col(f"_swa_den_{s}"), pl.col(f"_state_{s}")
        cap = (
            pl.when(pl.col(f"_shape_{s}").is_null())
            .then(None)
            .when(budget_col <= 0)
            .then(0)
            .when(den.is_not_null())
            .then((budget_col.cast(_F64) / den).cast(_I64))  # SGLang hybrid: int(budget / denominator)
            .when(state.is_not_null())  # SGLang Mamba hybrid: the state pool first, then the KV pool
            .then(
                pl.when(sglang_rules.mamba_state_slots(budget_col, state) >= pl.col(f"_state_slots_{s}"))
                .then(pl.max_horizontal(sglang_rules.mamba_kv_bytes(budget_col, state), pl.lit(0)) // unit)
                .otherwise(0)
            )
            .when(unit > 0)
            .then(budget_col // unit)
            .otherwise(0)
        )
        caps.append(cap.alias(f"_cap_{s}"))
    dep = dep.with_columns(caps).with_columns(pl.min_horizontal(f"_cap_{s}" for s in range(width)).alias("_capacity"))
    def of_tightest(column: str) -> pl.Expr:
        """`<column>_<s>` of the first stage with the fewest units (the stage every rank is sized to)."""
        return pl.coalesce(
            pl.when(pl.col(f"_cap_{s}") == pl.col("_capacity")).then(pl.col(f"{column}_{s}")) for s in range(width)
        )

    dep = dep.with_columns(of_tightest("_shape").alias("_shape"), of_tightest("_unit").alias("pool_unit_bytes")).join(
        shapes, on="_shape", how="left"
    )

    chosen_state = of_tightest("_state")
    capacity, page = pl.col("_capacity"), pl.col("block_size")
    # SGLang's second pool: the Mamba state slots (a request holds `pool_swa_window` of them), or the
    # hybrid SWA pool (tokens rounded to pages; a request holds min(T, window) of them)
    is_mamba = chosen_state.is_not_null() & (pl.col("pool_swa_window") > 0)
    is_swa = (pl.col("pool_swa_window") > 0) & ~is_mamba
    full_tokens = capacity - capacity % page
    swa_tokens = (full_tokens.cast(_F64) * ec.SGLANG_SWA_FULL_TOKENS_RATIO).cast(_I64)
    swa_tokens = swa_tokens - swa_tokens % page
    # SGLang validate_swa_pool_size: no start when the window + page >= the SWA pool
    swa_refused = is_swa & (pl.col("pool_swa_window") + page >= swa_tokens)
    dep = dep.with_columns(
        pl.when((budget_col <= 0) | swa_refused).then(0).when(is_swa).then(full_tokens).otherwise(capacity)
        .alias("num_blocks"),
        pl.when(budget_col > 0).then(page).otherwise(pl.col("base_block_size")).alias("block_size"),
        pl.when(is_swa & (budget_col > 0)).then(pl.when(swa_refused).then(0).otherwise(swa_tokens))
        .when(is_mamba & (budget_col > 0) & (capacity > 0))
        .then(sglang_rules.mamba_state_slots(budget_col, chosen_state))
        .when(is_mamba).then(0)
        .alias("pool_swa_capacity"),
        _per_engine(profiles, lambda p: p.start_reserved_units).cast(_I64).alias("_start_reserved"),
        _per_engine(profiles, lambda p: p.refuses_short_pool).cast(pl.Boolean).alias("_refuses_short_pool"),
    )  # fmt: skip

    # the max_model_len the deployment runs with: the model's limit when the engine starts with it,
    # else the largest length that starts (vLLM's auto-fit; the limit again when none does, and
    # then nothing fits: no budget, or not one block)
    fitted = pl.col("_fitted_len")
    dep = _largest_starting_len(dep, windows).with_columns(
        pl.when(fitted > 0).then(fitted).otherwise(pl.col("max_model_len")).alias("max_model_len")
    )

    # "GPU KV cache size" at max_model_len, as the engine version prints it
    limit, blocks, bs = pl.col("max_model_len"), pl.col("num_blocks"), pl.col("block_size")
    numerator, denominator = _pool_terms(windows).concurrency_ratio(limit)
    dep = dep.with_columns(numerator.alias("_conc_num"), denominator.alias("_conc_den"))
    conc = pl.col("_conc_num").cast(_F64) / pl.col("_conc_den")
    printed = _per_engine(
        profiles, lambda p: p.kv_cache_tokens(blocks, pl.col("pool_num_groups"), bs, conc, limit)
    ).cast(_I64)
    return dep.with_columns(
        pl.when((blocks <= 0) | (limit <= 0)).then(0).otherwise(printed).alias("kv_cache_tokens"),
        (blocks * bs).alias("physical_kv_token_slots"),
    ).drop("_start_reserved", "_refuses_short_pool", "_fitted_len", "_conc_num", "_conc_den")


def _window_count(frame: pl.LazyFrame) -> int:
    names = frame.collect_schema().names()
    return sum(1 for name in names if name.startswith("pool_window_") and name.endswith("_groups"))


def build_capacity_grid(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None = None
) -> pl.LazyFrame:
    """Every deployment at every grid context: GRID_COLUMNS, then the pool columns."""
    return expand_contexts(build_deployments(models, gpus, options), speed=(options or GridOptions()).speed)


def expand_contexts(deployments: pl.LazyFrame, carry: Sequence[str] = (), *, speed: bool = True) -> pl.LazyFrame:
    """The deployment frame at each of its `contexts`: B_max, the printed concurrency and the fit.
    Returns GRID_COLUMNS and the pool columns, after the `carry` columns of the deployment frame
    (e.g. a deployment id, for a table that keeps deployments and contexts apart)."""
    windows = _window_count(deployments)
    pool = [c for c in deployments.collect_schema().names() if c.startswith("pool_")]
    grid = _at_contexts(deployments.explode("contexts").rename({"contexts": "context"}), windows, speed=speed)
    return grid.select(*carry, *GRID_COLUMNS, *pool)


def _perf_layout_row(
    spec: ModelSpec, tp: int, pp: int, weight_dtype: str, engine: str, w: WeightsEstimate, kv_bytes: int
) -> tuple[object, ...]:
    """`capacity.performance.rank_terms` of one layout as the row's perf columns (windows in slots)."""
    terms = rank_terms(
        spec, tp=tp, pp=pp, weight_dtype=weight_dtype, engine=engine, weights_bytes_per_gpu=w.per_gpu_bytes,
        kv_element_bytes=kv_bytes, weight_format_name=w.format_name,
    )  # fmt: skip
    slots: list[object] = []
    extra_kv = extra_attn = 0.0
    for j, (window, kv, attn) in enumerate(terms.windowed):
        if j < PERF_WINDOW_SLOTS:
            slots += [float(window), kv, attn]
        else:  # more distinct windows than slots: read as full layers (an over-estimate of the bytes)
            extra_kv, extra_attn = extra_kv + kv, extra_attn + attn
    slots += [1.0, 0.0, 0.0] * (PERF_WINDOW_SLOTS - min(len(terms.windowed), PERF_WINDOW_SLOTS))
    return (
        terms.dense_weight_bytes, terms.expert_weight_bytes, terms.active_params,
        terms.full_kv_bytes_per_token + extra_kv, terms.attention_flops_per_cached_token + extra_attn,
        float(terms.layers_on_rank), float(terms.act_bytes), terms.fp8_gemm, *slots,
    )  # fmt: skip


def _perf_keep() -> list[str]:
    return ["state_bytes_per_sequence_per_gpu", *PERF_COLUMNS]


def _with_speed(rows: pl.LazyFrame, batch: pl.Expr, context: pl.Expr) -> pl.LazyFrame:
    """TPOT and output tokens/s of a decode step of `batch` sequences of `context` tokens: the same
    `capacity.performance` formulas, on columns (null where the GPU lacks bandwidth / FLOPS data or
    no sequence fits)."""
    col = pl.col
    columns: dict[str, Any] = dict(
        dense_weight_bytes=col("perf_dense_bytes"), expert_weight_bytes=col("perf_expert_bytes"),
        num_experts=col("perf_num_experts"), experts_per_token=col("perf_experts_per_token"),
        active_params=col("perf_active_params"), full_kv_bytes_per_token=col("perf_full_kv"),
        windowed_kv=tuple((col(f"perf_win_{j}_kv"), col(f"perf_win_{j}_tokens")) for j in range(PERF_WINDOW_SLOTS)),
        state_bytes_per_sequence=col("state_bytes_per_sequence_per_gpu"),
        attention_flops_per_cached_token=col("perf_attn_full"),
        windowed_attention=tuple(
            (col(f"perf_win_{j}_attn"), col(f"perf_win_{j}_tokens")) for j in range(PERF_WINDOW_SLOTS)
        ),
        hidden_size=col("perf_hidden"), layers_on_rank=col("perf_layers"), act_bytes=col("perf_act_bytes"),
        tp=col("perf_tp"), pp=col("perf_pp"), bandwidth_bytes_per_s=col("perf_bandwidth"),
        flops_per_s=pl.when(col("perf_fp8_gemm")).then(col("perf_fp8_flops")).otherwise(col("perf_bf16_flops")),
        link_bytes_per_s=col("perf_link"),
    )  # fmt: skip
    p = PerfInputs(**columns)
    factors: dict[str, Any] = dict(
        memory_bandwidth=col("perf_eff_memory"), compute=col("perf_eff_compute"),
        step_overhead_s=col("perf_step_s"), allreduce_latency_s=col("perf_allreduce_s"),
    )  # fmt: skip
    eff = PerfEfficiency(**factors)
    rows = rows.with_columns(tpot_seconds(p, batch.cast(_F64), context.cast(_F64), eff).alias("_tpot"))
    ok = (batch >= 1) & col("_tpot").is_not_null() & col("_tpot").is_finite()
    return rows.with_columns(
        pl.when(ok).then(col("_tpot") * 1e3).alias("tpot_ms"),
        pl.when(ok).then(batch.cast(_F64) * col("perf_pp") / col("_tpot")).alias("output_tokens_per_second"),
    ).drop("_tpot")


def _at_contexts(rows: pl.LazyFrame, windows: int, scaled: bool = False, *, speed: bool = True) -> pl.LazyFrame:
    """CONTEXT_COLUMNS of rows that hold a deployment's pool columns and one `context`
    (`max_concurrency_e4` in place of max_concurrency where `scaled`)."""
    t = pl.col("context")
    blocks, seqs = pl.col("num_blocks"), pl.col("max_num_seqs")
    terms = _pool_terms(windows)
    numerator, denominator = terms.concurrency_ratio(t)  # the window pool's quotient when it binds
    grid = (
        rows.with_columns(
            # nothing of more than max_model_len tokens is admitted (0 there: the engine does not start)
            pl.when(t > pl.col("max_model_len")).then(0).otherwise(terms.b_max_memory(t)).alias("b_max_memory"),
            numerator.alias("_num"),
            denominator.alias("_den"),
        )
        .with_columns(
            pl.when(seqs > 0).then(pl.min_horizontal("b_max_memory", seqs)).otherwise("b_max_memory").alias("b_max"),
        )
    )
    fits = ((pl.col("kv_budget_bytes_per_gpu") > 0) & (pl.col("b_max") >= 1)).alias("fits")
    if speed:
        grid = _with_speed(grid, pl.col("b_max"), t)
    else:
        grid = grid.with_columns(pl.lit(None, _F64).alias(c) for c in ("tpot_ms", "output_tokens_per_second"))
    if scaled:
        grid = _python_round_scaled(grid, "_num", "_den", "_conc", 4)
        concurrency = pl.when(blocks > 0).then(pl.col("_conc")).otherwise(0).alias("max_concurrency_e4")
    else:
        grid = with_python_round(grid, "_num", "_den", "_conc")
        concurrency = pl.when(blocks > 0).then(pl.col("_conc")).otherwise(0.0).alias("max_concurrency")
    return grid.with_columns(concurrency, fits).drop("_num", "_den", "_conc")


@dataclass(frozen=True, slots=True)
class GridTables:
    """The grid as four tables that join back to `build_capacity_grid` exactly, each column stored at
    its own grain, so that a 10M-row grid writes a tenth of the values:

    - `gpus`: gpu_id, GPU_COLUMNS (one row per GPU);
    - `layouts`: layout_id, LAYOUT_COLUMNS (model x engine x dtypes x TP x PP: what the deployments
      of a layout on every GPU share, the strings among it);
    - `deployments`: deployment_id, layout_id, gpu_id, DEPLOYMENT_ONLY_COLUMNS (settings, overhead,
      budget and pool of a layout on a GPU);
    - `contexts`: deployment_id, TABLE_CONTEXT_COLUMNS (one row per deployment and grid context):
      CONTEXT_COLUMNS with `max_concurrency_e4`, the printed concurrency times 10,000 as an exact
      Int64, in place of max_concurrency. max_concurrency is `max_concurrency_e4 / 10000`, one
      correctly rounded division (Polars with a column divisor, DuckDB's `/` on a BIGINT and an
      INTEGER): stored so, the column compresses as an integer, at a fraction of a double's cost.

    Ids are Int32, dense and in `build_capacity_grid`'s order (deployments by model, GPU, layout;
    contexts by deployment, context), counting from the `first_*` ids given: tables of consecutive
    model chunks concatenate into the tables of all of them. Strings are Categorical, every other
    column has the grid's dtype. `grid()` joins them back."""

    gpus: pl.DataFrame
    layouts: pl.DataFrame
    deployments: pl.DataFrame
    contexts: pl.DataFrame
    # deployment_id, concurrency, max_context (`build_context_limits`), where asked for
    context_limits: pl.DataFrame | None = None
    # deployment_id and the pool columns `max_contexts` reads, where asked for (`pools=True`)
    pools: pl.DataFrame | None = None

    def context_rows(self) -> pl.DataFrame:
        """deployment_id, CONTEXT_COLUMNS: the contexts with max_concurrency as a Float64 (exactly
        `build_capacity_grid`'s: a division by a column, which Polars does not turn into a
        multiplication by the reciprocal as it does a division by a literal)."""
        e4 = pl.col("max_concurrency_e4")
        concurrency = (e4.cast(_F64) / _exact_divisor(e4, 10_000)).alias("max_concurrency")
        return self.contexts.with_columns(concurrency).select("deployment_id", *CONTEXT_COLUMNS)

    def deployment_rows(self) -> pl.DataFrame:
        """deployment_id, then every context-free column of GRID_COLUMNS (layout and GPU joined)."""
        deployment_columns = [c for c in GRID_COLUMNS if c not in CONTEXT_COLUMNS]
        return (
            self.deployments.join(self.layouts, on="layout_id", how="left", maintain_order="left")
            .join(self.gpus, on="gpu_id", how="left", maintain_order="left")
            .select("deployment_id", *deployment_columns)
        )

    def grid(self) -> pl.DataFrame:
        """GRID_COLUMNS, one row per deployment and context (`build_capacity_grid` without the pool columns)."""
        return (
            self.context_rows()
            .join(self.deployments, on="deployment_id", how="left", maintain_order="left")
            .join(self.layouts, on="layout_id", how="left", maintain_order="left")
            .join(self.gpus, on="gpu_id", how="left", maintain_order="left")
            .select(GRID_COLUMNS)
        )


def grid_tables_sql(
    contexts: str = "grid_contexts",
    deployments: str = "grid_deployments",
    layouts: str = "grid_layouts",
    gpus: str = "grid_gpus",
) -> str:
    """A SQL SELECT (DuckDB) of GRID_COLUMNS over the four GridTables stored under these names: the
    grid, one row per deployment and context, as `build_capacity_grid` gives it (same values, the
    doubles included: max_concurrency is `max_concurrency_e4 / 10000`, which DuckDB divides as
    doubles, correctly rounded)."""
    source = {c: "c" for c in CONTEXT_COLUMNS} | {c: "l" for c in LAYOUT_COLUMNS} | {c: "g" for c in GPU_COLUMNS}
    source |= {c: "d" for c in DEPLOYMENT_ONLY_COLUMNS}
    expression = {c: f"{source[c]}.{c}" for c in GRID_COLUMNS}
    expression["max_concurrency"] = "c.max_concurrency_e4 / 10000 AS max_concurrency"
    columns = ",\n    ".join(expression[c] for c in GRID_COLUMNS)
    return (
        f"SELECT\n    {columns}\nFROM {contexts} AS c\n"
        f"JOIN {deployments} AS d USING (deployment_id)\n"
        f"JOIN {layouts} AS l USING (layout_id)\n"
        f"JOIN {gpus} AS g USING (gpu_id)"
    )


_ID = pl.Int32
TABLE_CONTEXT_COLUMNS = tuple("max_concurrency_e4" if c == "max_concurrency" else c for c in CONTEXT_COLUMNS)


def grid_tables(
    models: Sequence[GridModel],
    gpus: Sequence[GpuSku],
    options: GridOptions | None = None,
    *,
    concurrencies: Sequence[int] | None = None,
    first_layout_id: int = 0,
    first_deployment_id: int = 0,
    pools: bool = False,
    contexts: bool = True,
) -> GridTables:
    """The grid of `models` x `gpus` as GridTables (collected), with the context limits at
    `concurrencies` if given and the deployments' pools if `pools`; `contexts=False` leaves the
    context rows empty (a caller that needs only the deployments). See `iter_grid_tables` for a fleet
    in chunks, which also overlaps the Python and the Polars parts."""
    options = options or GridOptions()
    reg = _registry(models, gpus, options)
    t = _build_tables(reg, models, pp1_only=True)
    return _collect_tables(
        t, models, 0, first_layout_id, first_deployment_id, concurrencies, pools=pools, contexts=contexts
    )


def iter_grid_tables(
    models: Sequence[GridModel],
    gpus: Sequence[GpuSku],
    options: GridOptions | None = None,
    *,
    concurrencies: Sequence[int] | None = None,
    chunk_models: int = 192,
) -> Iterator[GridTables]:
    """`grid_tables` of consecutive chunks of `chunk_models` models, ids continuing from chunk to
    chunk: concatenated, the chunks' layouts, deployments and contexts are `grid_tables(models, gpus,
    options)`'s (every chunk carries the same `gpus`). A chunk is collected by Polars in a worker
    thread (Polars releases the GIL) while the next one is planned (the per-layout Python part), so
    that on two cores the two overlap; a consumer that writes each chunk from a thread of its own
    overlaps that too. The models share one registry (engine settings, pool shapes, KV layouts)."""
    if not models:
        yield grid_tables(models, gpus, options, concurrencies=concurrencies)
        return
    options = options or GridOptions()
    reg = _registry(models, gpus, options)
    step = max(1, chunk_models)
    next_ids = [0, 0]  # layout, deployment

    def collect(t: _Tables, start: int) -> GridTables:
        # one worker: chunks are collected in order, each after the one before has its ids
        layout_id, deployment_id = next_ids
        tables = _collect_tables(t, models[start : start + step], start, layout_id, deployment_id, concurrencies)
        next_ids[0] += tables.layouts.height
        next_ids[1] += tables.deployments.height
        return tables

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="grid") as worker:
        pending: Future[GridTables] | None = None
        for start in range(0, len(models), step):
            t = _build_tables(reg, models[start : start + step], start, pp1_only=True)
            submitted = worker.submit(collect, t, start)
            if pending is not None:
                yield pending.result()
            pending = submitted
        if pending is not None:
            yield pending.result()


def _with_windows(frame: pl.LazyFrame, have: int, want: int) -> pl.LazyFrame:
    """Pool window columns up to `want`: a window a pool does not have holds no layer (0 x anything,
    with a block size of 1 so that the division stays defined)."""
    empty = [
        pl.lit(1 if part == "block_size" else 0, _I64).alias(f"pool_window_{j}_{part}")
        for j in range(have, want)
        for part in _WINDOW_PARTS
    ]
    return frame.with_columns(empty) if empty else frame


def _collect_tables(
    t1: _Tables,
    models: Sequence[GridModel],
    first: int,
    first_layout_id: int,
    first_deployment_id: int,
    concurrencies: Sequence[int] | None = None,
    *,
    pools: bool = False,
    contexts: bool = True,
) -> GridTables:
    """The tables of one chunk from its PP = 1 rows `t1`. The PP = 1 deployments are sized first;
    the PP > 1 layouts are then planned only where they are needed (the node's TP, where PP = 1
    does not fit): most PP > 1 layouts would have no deployment, and planning them is half the
    per-layout Python work."""
    f1 = _frames(t1)
    extra = [c for c in (*_GROUP, "tp", "node_tp", "min_context", "max_model_len") if c not in _keep(0)]
    single = _single(f1).select(*_keep(f1.windows), *extra).collect()
    not_fitting = _not_fitting(single.lazy(), f1.windows).collect()
    groups: dict[int, tuple[set[int], set[tuple[int, int, int]]]] = {}
    for m, e, w, k, _gpu, node_tp in not_fitting.iter_rows():
        tps, wanted = groups.setdefault(m, (set(), set()))
        tps.add(node_tp)
        wanted.add((e, k, w))
    parts = [(f1, single.lazy())]
    if groups:
        rank_base, kv_base = f1.layouts, t1.kv_base + len(t1.kv_layouts)
        t2 = _build_tables(t1.reg, models, first, pp_groups=groups, rank_base=rank_base, kv_base=kv_base)
        f2 = _frames(t2)
        parts.append((f2, _multi(f2, not_fitting.lazy())))
    windows = max(f.windows for f, _ in parts)
    keep = _keep(windows)
    deployments = (
        _ordered(
            pl.concat([_with_windows(frame, f.windows, windows).select(keep) for f, frame in parts]),
            len(t1.reg.gpus),
            parts[-1][0].layouts,
        )
        .with_row_index("deployment_id", offset=first_deployment_id)
        .collect()
    )
    # the layouts some GPU serves, numbered densely by model, then PP = 1 before PP > 1 (the order
    # of a model's layouts whatever the chunks)
    ranks = parts[-1][0].layouts
    key = pl.col("model_idx") * ranks + pl.col("_rank")
    used = deployments.select(key.unique().sort()).to_series()
    layouts = (
        pl.concat([f.full.select("model_idx", "_rank", *LAYOUT_COLUMNS) for f, _ in parts])
        .filter(key.is_in(used.implode()))
        .sort(key)
        .with_row_index("layout_id", offset=first_layout_id)
        .select(pl.col("layout_id").cast(_ID), *LAYOUT_COLUMNS)
        .collect()
    )
    # one row per deployment and context: a join on the model's contexts (in order) expands them
    model_contexts = f1.model_frame.select("model_idx", pl.col("contexts").alias("context")).explode("context")
    if not contexts:
        model_contexts = model_contexts.head(0)
    context_rows = deployments.lazy().join(model_contexts, on="model_idx", how="inner", maintain_order="left")
    context_rows = _at_contexts(context_rows, windows, scaled=True, speed=t1.reg.options.speed).select(
        pl.col("deployment_id").cast(_ID), *TABLE_CONTEXT_COLUMNS
    )
    layout_id = used.search_sorted(deployments.select(key).to_series()) + first_layout_id
    gpus = f1.gpu_frame.select(pl.col("gpu_idx").cast(_ID).alias("gpu_id"), *GPU_COLUMNS)
    limits = max_contexts(deployments, concurrencies) if concurrencies is not None else None
    return GridTables(
        gpus=gpus.collect(),
        layouts=layouts,
        deployments=deployments.select(
            pl.col("deployment_id").cast(_ID),
            layout_id.cast(_ID).alias("layout_id"),
            pl.col("gpu_idx").cast(_ID).alias("gpu_id"),
            *DEPLOYMENT_ONLY_COLUMNS,
        ),
        contexts=context_rows.collect(),
        context_limits=limits,
        pools=deployments.select(pl.col("deployment_id").cast(_ID), *_LIMIT_INPUTS, cs.starts_with("pool_"))
        if pools
        else None,
    )


# the deployment columns the max-context search reads besides the pool_* ones
_LIMIT_INPUTS = ("num_blocks", "block_size", "max_model_len", "max_num_seqs")


def max_contexts(
    deployments: pl.DataFrame, concurrencies: Sequence[int], num_blocks: pl.Expr | None = None
) -> pl.DataFrame:
    """deployment_id, concurrency, max_context of deployments with their pool columns
    (`GridTables.pools`): `memory.max_context` on every row, at the pool's own block count or at
    `num_blocks` (the same pool at another budget, e.g. `calibration.resized_units`)."""
    if num_blocks is not None:
        deployments = deployments.with_columns(num_blocks.alias("num_blocks"))
    bound = deployments.select((pl.col("max_model_len") // pl.col("block_size")).max()).item()
    steps = max(1, int(bound or 0).bit_length())
    return (
        _max_contexts(deployments.lazy(), ["deployment_id"], concurrencies, steps)
        .select(pl.col("deployment_id").cast(_ID), "concurrency", "max_context")
        .collect()
    )


def build_context_limits(grid: pl.LazyFrame, concurrencies: Sequence[int] = TARGET_CONCURRENCIES) -> pl.LazyFrame:
    """`max_context` per deployment and target concurrency: the largest T (a multiple of the block
    size, or the limit itself) at which B sequences fit, the same bisection as `memory.max_context`,
    run on every row at once. Takes the grid (it reads the row where context == max_model_len, one per
    deployment) or the deployment frame."""
    names = grid.collect_schema().names()
    last = pl.col("context") == pl.col("context").max().over(DEPLOYMENT_KEYS)  # one row per deployment
    frame = grid.filter(last) if "context" in names else grid
    return _max_contexts(frame, DEPLOYMENT_KEYS, concurrencies)


def _max_contexts(
    frame: pl.LazyFrame, keys: Sequence[str], concurrencies: Sequence[int], steps: int = _BISECTION_STEPS
) -> pl.LazyFrame:
    """`keys`, concurrency, max_context of a frame with one row per deployment (its pool columns).
    The bisection halves [0, max_model_len // block_size]: `steps` >= the bit length of the largest
    such bound settles every row (further steps change nothing)."""
    names = frame.collect_schema().names()
    windows = _window_count(frame)
    pool = [c for c in names if c.startswith("pool_")]
    frame = frame.select(*keys, *_LIMIT_INPUTS, *pool)
    targets = pl.LazyFrame({"concurrency": list(concurrencies)}, schema={"concurrency": _I64})
    b, bs, limit = pl.col("concurrency"), pl.col("block_size"), pl.col("max_model_len")
    terms = _pool_terms(windows)
    frame = frame.join(targets, how="cross").with_columns(pl.lit(0, _I64).alias("_lo"), (limit // bs).alias("_hi"))
    frame = _bisect(frame, steps, lambda blocks: terms.fits(blocks * bs, b))
    max_context = terms.settle_max_context(pl.col("_lo"), b, limit, pl.col("max_num_seqs"))
    return frame.select(*keys, "concurrency", max_context.alias("max_context"))
