"""Memory accounting: KV bytes per token, weights and overhead per GPU, the KV pool, B_max.

Pure functions over capacity.spec types, integers for bytes. The engine profiles reproduce each
engine's own arithmetic (vLLM's block pool and hybrid groups, SGLang's token pool, TensorRT-LLM's
32-token blocks); `plain` is the textbook formula with the overhead given by hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TypeVar

from capacity import engine_constants as ec
from capacity.spec import (
    WINDOWED_KINDS,
    DeploymentSpec,
    GpuSku,
    KVKind,
    LayerKVSpec,
    ModelSpec,
    SpecError,
)

GIB = 1 << 30
_T = TypeVar("_T")

ENGINES = ("vllm", "sglang", "trtllm", "plain")

# Bytes per element of a dtype name as users and configs spell it.
_ELEMENT_BYTES: dict[str, int] = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_e4m3fn": 1,
    "fp8_inc": 1,
    "int8": 1,
    "fp8_ds_mla": 1,
}
_CANONICAL_DTYPE = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}
WEIGHT_DTYPES = ("auto", "bf16", "fp16", "float32", "fp8", "int8", "int4", "mxfp4", "nvfp4")
KV_DTYPES = ("auto", "bf16", "fp16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2", "int8")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def element_bytes(dtype: str) -> int:
    """Bytes per element; raises SpecError for an unknown dtype name."""
    try:
        return _ELEMENT_BYTES[dtype.lower()]
    except KeyError:
        raise SpecError(f"unknown dtype {dtype!r}; expected one of {', '.join(sorted(_ELEMENT_BYTES))}") from None


def serving_dtype(model: ModelSpec, engine: str = "vllm") -> str:
    """The dtype activations and `auto` KV use: the config's, except float32 checkpoints, which
    vLLM and SGLang serve in bfloat16 unless told otherwise."""
    dtype = _CANONICAL_DTYPE.get(model.torch_dtype.lower(), "bfloat16")
    if dtype == "float32" and engine in ("vllm", "sglang"):
        return "bfloat16"
    return dtype


def kv_element_bytes(kv_dtype: str, activation_dtype: str) -> int:
    """`auto` = the dtype the model runs in; fp8 variants 1 byte."""
    if kv_dtype == "auto":
        return element_bytes(activation_dtype)
    return element_bytes(kv_dtype)


# --- KV per token --------------------------------------------------------------------------


def kv_heads_per_gpu(layer: LayerKVSpec, tp: int) -> int:
    """KV heads one tensor-parallel rank holds: ceil(H_kv / TP), at least one; MLA replicated."""
    if layer.replicated_under_tp:
        return layer.num_kv_heads
    return max(1, cdiv(layer.num_kv_heads, tp))


def layer_kv_bytes_per_token(layer: LayerKVSpec, kv_bytes: int, tp: int = 1) -> int:
    """Bytes one token occupies in one layer on one GPU (0 for state and shared layers)."""
    if not layer.stores_per_token_kv:
        return 0
    return kv_heads_per_gpu(layer, tp) * (layer.k_head_dim + layer.v_head_dim) * kv_bytes


def layer_state_bytes(layer: LayerKVSpec, model_bytes: int, ssm_bytes: int, tp: int = 1) -> int:
    """Constant per-sequence state of a Mamba / gated-delta-net layer on one GPU (split by TP)."""
    if layer.kind is not KVKind.STATE:
        return 0
    conv = cdiv(layer.conv_state_elements, tp) * model_bytes
    recurrent = cdiv(layer.recurrent_state_elements, tp) * ssm_bytes
    return conv + recurrent


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage, as vLLM splits them (vllm/distributed/utils.py get_pp_indices):
    an even split, the remainder added to the stages before the last (which holds the LM head)."""
    if pp < 1:
        raise SpecError(f"pipeline parallel size must be >= 1, got {pp}")
    if pp > num_layers:
        raise SpecError(f"pipeline parallel size {pp} exceeds the model's {num_layers} layers")
    partitions = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        partitions[-i] += 1
    return partitions


def stage_layers(model: ModelSpec, pp: int) -> list[tuple[LayerKVSpec, ...]]:
    """The cache-holding layers of each pipeline stage. Stages split the decoder's `num_layers`
    (MLP-only layers of hybrids such as Nemotron-H count there but hold no cache)."""
    stages: list[tuple[LayerKVSpec, ...]] = []
    start = 0
    for count in pp_partition(max(model.num_layers, len(model.layers)), pp):
        stages.append(tuple(layer for layer in model.layers if start <= layer.index < start + count))
        start += count
    return stages


LayerCounts = tuple[tuple[LayerKVSpec, int], ...]

_MEMO: dict[tuple[str, int, int], tuple[ModelSpec, object]] = {}
_MEMO_LIMIT = 4096


def _memo(name: str, model: ModelSpec, pp: int, compute: Callable[[], _T]) -> _T:
    """Per (model object, pp) results that every deployment of a model shares. Keyed by identity
    (hashing a ModelSpec walks every layer); the entry keeps the model alive, so ids stay unique."""
    key = (name, id(model), pp)
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]  # type: ignore[return-value]
    value = compute()
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    _MEMO[key] = (model, value)
    return value


def stage_layer_counts(model: ModelSpec, pp: int) -> list[LayerCounts]:
    """Each pipeline stage's layers as (a layer, how many layers share its shape), in order of first
    appearance. Every per-layer rule reads a layer's shape (kind, heads, head dims, window, state
    sizes), never its position, so sums and maxima over these pairs equal those over the layers."""

    def compute() -> list[LayerCounts]:
        stages: list[LayerCounts] = []
        for stage in stage_layers(model, pp):
            counts: dict[tuple[object, ...], list[object]] = {}
            for layer in stage:
                key = (
                    layer.kind,
                    layer.num_kv_heads,
                    layer.k_head_dim,
                    layer.v_head_dim,
                    layer.window_tokens,
                    layer.conv_state_elements,
                    layer.recurrent_state_elements,
                )
                entry = counts.get(key)
                if entry is None:
                    counts[key] = [layer, 1]
                else:
                    entry[1] += 1  # type: ignore[operator]
            stages.append(tuple((first, n) for first, n in counts.values()))  # type: ignore[misc]
        return stages

    return _memo("stage_layer_counts", model, pp, compute)


def state_bytes_per_sequence_per_gpu(
    model: ModelSpec, model_bytes: int, ssm_bytes: int, tp: int = 1, pp: int = 1
) -> int:
    """Per-sequence state (Mamba / GDN layers) on the most loaded GPU."""
    return max(
        sum(layer_state_bytes(layer, model_bytes, ssm_bytes, tp) * n for layer, n in stage)
        for stage in stage_layer_counts(model, pp)
    )


def kv_bytes_per_token(model: ModelSpec, kv_bytes: int) -> int:
    """Whole-model bytes per cached token: every per-token layer, sliding ones as if in window."""
    return sum(layer_kv_bytes_per_token(layer, kv_bytes) * n for layer, n in stage_layer_counts(model, 1)[0])


def kv_bytes_per_token_per_gpu(model: ModelSpec, kv_bytes: int, tp: int = 1, pp: int = 1) -> int:
    """The same on the most loaded GPU."""
    return max(
        sum(layer_kv_bytes_per_token(layer, kv_bytes, tp) * n for layer, n in stage)
        for stage in stage_layer_counts(model, pp)
    )


def layer_cached_tokens(layer: LayerKVSpec, context_tokens: int) -> int:
    """Tokens a layer keeps for a sequence of T tokens in a cache that drops what left the window
    (transformers keeps W - 1 for sliding and chunk - 1 for chunked layers)."""
    if not layer.stores_per_token_kv:
        return 0
    if layer.kind in WINDOWED_KINDS and layer.window_tokens:
        return min(context_tokens, layer.window_tokens - 1)
    return context_tokens


def kv_bytes_per_sequence(
    model: ModelSpec,
    context_tokens: int,
    kv_bytes: int,
    ssm_bytes: int = 4,
    tp: int = 1,
    pp: int = 1,
    model_bytes: int | None = None,
) -> int:
    """Logical cache bytes one sequence of T tokens holds on the most loaded GPU (windows honoured,
    per-sequence state included). The oracle-checked quantity."""
    conv_bytes = kv_bytes if model_bytes is None else model_bytes
    return max(
        sum(
            layer_kv_bytes_per_token(layer, kv_bytes, tp) * layer_cached_tokens(layer, context_tokens)
            + layer_state_bytes(layer, conv_bytes, ssm_bytes, tp)
            for layer in stage
        )
        for stage in stage_layers(model, pp)
    )


# --- Weights ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """Bytes per parameter of the quantized linear layers and which layers it applies to."""

    name: str
    linear_bytes_per_param: Fraction
    dense_bytes_per_param: Fraction  # embeddings, lm_head, norms, router, unquantized layers
    experts_only: bool = False
    attention_dense: bool = False  # attention projections kept 16-bit (NVFP4 exports)


def _int4_bytes(group_size: int) -> Fraction:
    # 4-bit weights + an fp16 scale and a packed 4-bit zero point per group (AWQ / GPTQ layout)
    return Fraction(1, 2) + Fraction(2, group_size) + Fraction(1, 2 * group_size)


def weight_format(model: ModelSpec, weight_dtype: str, engine: str = "vllm") -> WeightFormat:
    """Resolve `--dtype` against the checkpoint: auto = what the checkpoint stores."""
    base = Fraction(element_bytes(serving_dtype(model, engine)))
    wanted = weight_dtype.lower()
    quant = model.quantization
    if wanted == "auto" and quant is not None:
        wanted = quant.weight_format
        group = quant.group_size or 128
        if wanted == "int4":
            return WeightFormat(f"int4 ({quant.method}, group {group})", _int4_bytes(group), base)
        if wanted == "mxfp4":
            return WeightFormat("mxfp4", Fraction(17, 32), base, experts_only=quant.experts_only)
        if wanted == "nvfp4":
            return WeightFormat("nvfp4", Fraction(9, 16), base, attention_dense=not quant.attention_quantized)
    if wanted == "auto":
        return WeightFormat(serving_dtype(model, engine), base, base)
    if wanted in ("bf16", "bfloat16", "fp16", "float16"):
        two = Fraction(2)
        return WeightFormat(_CANONICAL_DTYPE[wanted], two, two)
    if wanted in ("float32", "fp32"):
        four = Fraction(4)
        return WeightFormat("float32", four, four)
    if wanted in ("fp8", "int8"):
        return WeightFormat(wanted, Fraction(1), base)
    if wanted == "int4":
        return WeightFormat("int4 (group 128)", _int4_bytes(128), base)
    if wanted == "mxfp4":
        # 4-bit elements + one 8-bit shared exponent per 32 elements = 4.25 bits
        return WeightFormat("mxfp4", Fraction(17, 32), base, experts_only=True)
    if wanted == "nvfp4":
        # 4-bit elements + one fp8 scale per 16 elements = 4.5 bits
        return WeightFormat("nvfp4", Fraction(9, 16), base)
    raise SpecError(f"unknown weight dtype {weight_dtype!r}; expected one of {', '.join(WEIGHT_DTYPES)}")


@dataclass(frozen=True, slots=True)
class WeightsEstimate:
    per_gpu_bytes: int  # the most loaded rank
    total_bytes: int  # what the serving engine loads, all ranks together, without replication
    format_name: str
    source: str  # "checkpoint" (real size, scaled per rank) | "modeled" | "override"


def _rank_weight_bytes(model: ModelSpec, fmt: WeightFormat, tp: int, pp: int) -> list[Fraction]:
    """Weight bytes of every pipeline stage for one TP rank (sharded parts / TP, replicated whole)."""
    dense = fmt.dense_bytes_per_param
    linear = fmt.linear_bytes_per_param
    mlp_bytes = dense if fmt.experts_only else linear
    attention_bytes = dense if fmt.experts_only or fmt.attention_dense else linear
    # Exact rationals with one Fraction per stage: every term as an integer over tp * lcm(denominators)
    common = math.lcm(dense.denominator, linear.denominator)
    per_attention = attention_bytes.numerator * (common // attention_bytes.denominator)  # split by TP
    per_mlp = mlp_bytes.numerator * (common // mlp_bytes.denominator)  # dense MLP / shared experts, by TP
    per_expert = linear.numerator * (common // linear.denominator)  # routed experts, split by TP
    per_dense = dense.numerator * (common // dense.denominator)  # embeddings and head, split by TP
    per_replicated = per_dense * tp  # norms and router, whole on every rank
    stages: list[Fraction] = []
    sums = _stage_param_sums(model, pp)
    for stage_index, (attention, mlp, experts, replicated) in enumerate(sums):
        total = attention * per_attention + mlp * per_mlp + experts * per_expert + replicated * per_replicated
        if stage_index == 0:
            total += (model.embedding_params + model.loaded_extra_params) * per_dense
        if stage_index == len(sums) - 1:
            head = model.lm_head_params or (model.embedding_params if pp > 1 else 0)
            total += head * per_dense + model.final_norm_params * per_replicated
        stages.append(Fraction(total, tp * common))
    return stages


def _stage_param_sums(model: ModelSpec, pp: int) -> list[tuple[int, int, int, int]]:
    """Per pipeline stage: attention and MLP parameters (split by TP), routed experts, replicated."""

    def compute() -> list[tuple[int, int, int, int]]:
        sums = []
        start = 0
        for count in pp_partition(len(model.layer_params), pp):
            layers = model.layer_params[start : start + count]
            start += count
            sums.append(
                (
                    sum(params.attention for params in layers),
                    sum(params.mlp for params in layers),
                    sum(params.experts for params in layers),
                    sum(params.router + params.norms for params in layers),
                )
            )
        return sums

    return _memo("stage_param_sums", model, pp, compute)


def estimate_weights(
    model: ModelSpec,
    weight_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    checkpoint_bytes: int | None = None,
    engine: str = "vllm",
) -> WeightsEstimate:
    """Weights on the most loaded GPU. The checkpoint's real size wins when the served format is
    the checkpoint's own; it is spread over ranks in the proportions the parameter model gives."""
    fmt = weight_format(model, weight_dtype, engine)
    stages = _rank_weight_bytes(model, fmt, tp, pp)
    per_gpu = max(stages)
    loaded_total = sum(_rank_weight_bytes(model, fmt, 1, 1))
    native = weight_dtype.lower() == "auto" or (
        model.quantization is None and _CANONICAL_DTYPE.get(weight_dtype.lower()) == model.torch_dtype
    )
    if checkpoint_bytes and native and loaded_total > 0:
        # The checkpoint also holds parts the engine skips (extra_params it does not load: MTP heads).
        in_checkpoint = loaded_total + (model.extra_params - model.loaded_extra_params) * fmt.dense_bytes_per_param
        scale = Fraction(checkpoint_bytes) / in_checkpoint
        return WeightsEstimate(math.ceil(per_gpu * scale), math.ceil(loaded_total * scale), fmt.name, "checkpoint")
    return WeightsEstimate(math.ceil(per_gpu), math.ceil(loaded_total), fmt.name, "modeled")


# --- The KV pool: how an engine lays blocks out and charges a sequence -----------------------


@dataclass(frozen=True, slots=True)
class KVGroup:
    """Layers sharing one block table (vLLM) or one token pool; `charge` says how T becomes units."""

    kind: str  # full | sliding | chunked | state
    num_layers: int
    window_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ChargeTerms:
    """Units one sequence takes in a block or token pool, as terms of the context T and the
    admission length L (T for a running sequence):
    `fixed_units + per_block_groups * cdiv(T, bs) + sum(n * cdiv(min(held + batched, L), bs))`
    over `windowed` = ((n groups, tokens held beyond the batch), ...)."""

    fixed_units: int
    per_block_groups: int
    windowed: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class KVPool:
    """Capacity in engine units (blocks, tokens or bytes) and how many units a sequence takes."""

    unit: str  # "block" | "token" | "byte"
    capacity_units: int
    block_size: int  # tokens per block (1 for token/byte pools)
    groups: tuple[KVGroup, ...]
    max_num_batched_tokens: int
    unit_bytes: int  # bytes of one unit across all layers that share it
    # byte pools (plain): bytes per token of each group, and the per-sequence state
    group_bytes_per_token: tuple[int, ...] = ()
    state_bytes_per_sequence: int = 0
    swa_capacity_units: int | None = None  # SGLang hybrid SWA: the separate sliding-window pool
    swa_window_tokens: int = 0

    def sequence_units(self, context_tokens: int, admission_len: int | None = None) -> int:
        """Units one sequence of T tokens is charged (vLLM's admission rule for windowed groups)."""
        t = context_tokens
        if self.unit == "byte":
            total = self.state_bytes_per_sequence
            for group, per_token in zip(self.groups, self.group_bytes_per_token, strict=True):
                tokens = t
                if group.kind in ("sliding", "chunked") and group.window_tokens:
                    tokens = min(t, group.window_tokens - 1)
                total += per_token * tokens
            return total
        limit = admission_len if admission_len is not None else t
        terms = self.charge_terms()
        units = terms.fixed_units + terms.per_block_groups * cdiv(t, self.block_size)
        for groups, held in terms.windowed:
            units += groups * cdiv(min(held + self.max_num_batched_tokens, limit), self.block_size)
        return units

    def charge_terms(self) -> ChargeTerms:
        """How a block or token pool charges one sequence, group by group (vLLM's admission rule).

        A state group takes one unit; a sliding group `cdiv(min(W - 1 + batched, L), bs) + 1` blocks;
        a chunked group `cdiv(min(W + batched, L), bs)`; any other group `cdiv(T, bs)`.
        """
        fixed = per_block = 0
        windowed: dict[int, int] = {}
        for group in self.groups:
            if group.kind == "state":
                fixed += 1
            elif group.kind == "sliding" and group.window_tokens and self.unit == "block":
                windowed[group.window_tokens - 1] = windowed.get(group.window_tokens - 1, 0) + 1
                fixed += 1
            elif group.kind == "chunked" and group.window_tokens and self.unit == "block":
                windowed[group.window_tokens] = windowed.get(group.window_tokens, 0) + 1
            else:
                per_block += 1
        return ChargeTerms(fixed, per_block, tuple((n, held) for held, n in sorted(windowed.items())))


@dataclass(frozen=True, slots=True)
class Estimate:
    """One deployment, every term named: the `capplan estimate --json` contract and more."""

    model: str
    gpu: str
    engine: str
    engine_version: str | None
    tp: int
    pp: int
    weight_dtype: str
    kv_dtype: str
    gpu_memory_bytes: int
    gpu_memory_utilization: float
    max_model_len: int
    context_tokens: int
    target_concurrency: int | None
    kv_bytes_per_token: int
    kv_bytes_per_token_per_gpu: int
    state_bytes_per_sequence_per_gpu: int
    weights_bytes_per_gpu: int
    weights_source: str
    activation_peak_bytes_per_gpu: int
    non_torch_bytes_per_gpu: int
    cuda_graph_bytes_per_gpu: int
    overhead_bytes_per_gpu: int
    usable_bytes_per_gpu: int
    kv_budget_bytes_per_gpu: int
    pool: KVPool
    max_num_seqs: int | None
    model_context_limit: int
    num_blocks: int
    block_size: int
    kv_cache_tokens: int
    physical_kv_token_slots: int
    max_concurrency: float
    b_max: int
    b_max_memory: int
    max_context_at_concurrency: int
    fits: bool
    reason: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    def b_max_at(self, context_tokens: int) -> int:
        return b_max(self.pool, context_tokens, self.max_num_seqs, self.max_model_len)

    def contract(self) -> dict[str, object]:
        """The one JSON object of the `capplan estimate --json` contract (bytes as integers)."""
        return {
            "model": self.model,
            "gpu": self.gpu,
            "tp": self.tp,
            "pp": self.pp,
            "weight_dtype": self.weight_dtype,
            "kv_dtype": self.kv_dtype,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "context": self.context_tokens,
            "concurrency": self.target_concurrency,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "state_bytes_per_sequence_per_gpu": self.state_bytes_per_sequence_per_gpu,
            "weights_bytes_per_gpu": self.weights_bytes_per_gpu,
            "weights_source": self.weights_source,
            "activation_peak_bytes_per_gpu": self.activation_peak_bytes_per_gpu,
            "non_torch_bytes_per_gpu": self.non_torch_bytes_per_gpu,
            "cuda_graph_bytes_per_gpu": self.cuda_graph_bytes_per_gpu,
            "overhead_bytes_per_gpu": self.overhead_bytes_per_gpu,
            "kv_budget_bytes_per_gpu": self.kv_budget_bytes_per_gpu,
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "kv_cache_tokens": self.kv_cache_tokens,
            "physical_kv_token_slots": self.physical_kv_token_slots,
            "max_concurrency": self.max_concurrency,
            "b_max": self.b_max,
            "b_max_memory": self.b_max_memory,
            "max_num_seqs": self.max_num_seqs,
            "max_context_at_concurrency": self.max_context_at_concurrency,
            "fits": self.fits,
            "reason": self.reason,
        }


def max_concurrency(pool: KVPool, context_tokens: int) -> float:
    """Sequences of T tokens the pool holds, as the engine prints it ("Maximum concurrency")."""
    units = pool.sequence_units(context_tokens, context_tokens)
    if units <= 0:
        return math.inf
    concurrency = pool.capacity_units / units
    if pool.swa_capacity_units is not None:
        swa = _sglang_swa_units(pool, context_tokens)
        if swa:
            concurrency = min(concurrency, pool.swa_capacity_units / swa)
    return concurrency


def _sglang_swa_units(pool: KVPool, context_tokens: int) -> int:
    return min(context_tokens, pool.swa_window_tokens) if pool.swa_window_tokens else 0


def b_max(pool: KVPool, context_tokens: int, max_num_seqs: int | None = None, max_model_len: int | None = None) -> int:
    """Whole sequences of T tokens that fit at once, capped by the engine's max_num_seqs."""
    if max_model_len is not None and context_tokens > max_model_len:
        return 0
    units = pool.sequence_units(context_tokens, context_tokens)
    memory_bound = pool.capacity_units // units if units > 0 else 0
    if pool.swa_capacity_units is not None:
        swa = _sglang_swa_units(pool, context_tokens)
        if swa:
            memory_bound = min(memory_bound, pool.swa_capacity_units // swa)
    return memory_bound if max_num_seqs is None else min(memory_bound, max_num_seqs)


def max_context(pool: KVPool, concurrency: int, limit_tokens: int, max_num_seqs: int | None = None) -> int:
    """The largest T (a multiple of the block size, at most `limit_tokens`) at which `concurrency`
    sequences fit; 0 when not even one block-sized sequence does."""
    if max_num_seqs is not None and concurrency > max_num_seqs:
        return 0
    step = max(1, pool.block_size)

    def fits(tokens: int) -> bool:
        return b_max(pool, tokens) >= concurrency

    if fits(limit_tokens):
        return limit_tokens
    lo, hi = 0, limit_tokens // step  # invariant: lo*step fits (or lo == 0), hi*step does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid * step):
            lo = mid
        else:
            hi = mid
    return lo * step


# --- Engine profiles -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Overhead:
    activation_peak_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.activation_peak_bytes + self.non_torch_bytes + self.cuda_graph_bytes


def activation_features(
    model: ModelSpec, tp: int, batched_tokens: int, num_seqs: int, act_bytes: int
) -> tuple[int, int]:
    """The two quantities the profiling pass's activation peak scales with, in bytes per rank:
    the widest per-token projection output of `batched_tokens` tokens (dense MLP gate/up, the
    fused-MoE intermediate of the routed experts, or the QKV projection), and the fp32 logits of
    the sampler's dummy run over `num_seqs` sequences (gathered to the full vocabulary on every rank)."""
    dense = 2 * model.intermediate_size if any(p.mlp for p in model.layer_params) else 0
    moe = 0
    if model.num_experts:
        expert_params = max((p.experts for p in model.layer_params), default=0)
        moe_intermediate = expert_params // (3 * model.num_experts * model.hidden_size) if expert_params else 0
        moe = model.num_experts_per_token * 2 * moe_intermediate
    qkv = (model.num_attention_heads + 2 * model.num_kv_heads) * model.head_dim
    widest = max(dense, moe, qkv, model.hidden_size)
    return batched_tokens * cdiv(widest, tp) * act_bytes, num_seqs * model.vocab_size * 4


def vllm_overhead(
    model: ModelSpec,
    tp: int,
    pp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    release: ec.VllmRelease,
    act_bytes: int = 2,
    coefficients: ec.OverheadCoefficients | None = None,
) -> Overhead:
    """Activation peak of the profiling pass, non-torch memory and the CUDA-graph estimate."""
    c = coefficients or ec.vllm_overhead_coefficients(release)
    mlp, logits = activation_features(model, tp, max_num_batched_tokens, max_num_seqs, act_bytes)
    activation = int(max(c.a_mlp * mlp, c.a_logits * logits)) + c.a_base_bytes
    non_torch = c.nt_tp_bytes if tp > 1 else c.nt_base_bytes
    graphs = 0
    if release.cudagraph_memory_in_budget:
        layers_local = max(pp_partition(model.num_layers, pp))
        graphs = c.cg_base_bytes + c.cg_per_layer_bytes * layers_local
    return Overhead(activation, non_torch, graphs)


@dataclass(frozen=True, slots=True)
class EngineDefaults:
    """What an engine profile picks when the deployment does not say (0 seqs: no cap)."""

    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int


def engine_defaults(
    engine: str,
    model: ModelSpec,
    gpu: GpuSku | None,
    gpu_memory_bytes: int,
    max_model_len: int,
    tp: int,
    pp: int,
    release: ec.VllmRelease | None,
) -> EngineDefaults:
    if engine == "vllm":
        vrelease = release or ec.vllm_release(None)
        seqs, batched = vllm_batch_defaults(vrelease, gpu, gpu_memory_bytes, max_model_len)
        return EngineDefaults(vrelease.default_gpu_memory_utilization, seqs, batched, vllm_block_size(model, gpu))
    if engine == "sglang":
        return EngineDefaults(
            sglang_mem_fraction_static(gpu_memory_bytes, tp, pp),
            0,
            sglang_chunked_prefill_size(gpu_memory_bytes),
            ec.SGLANG_PAGE_SIZE,
        )
    if engine == "trtllm":
        return EngineDefaults(
            ec.TRTLLM_FREE_GPU_MEMORY_FRACTION,
            ec.TRTLLM_DEFAULT_MAX_BATCH_SIZE,
            ec.TRTLLM_DEFAULT_MAX_NUM_TOKENS,
            ec.TRTLLM_TOKENS_PER_BLOCK,
        )
    return EngineDefaults(1.0, 0, 0, 1)


def engine_overhead(
    model: ModelSpec,
    engine: str,
    tp: int,
    pp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int | None,
    release: ec.VllmRelease | None,
    act_bytes: int,
) -> Overhead:
    """The non-KV terms an engine profile charges per GPU: vLLM's model (CUDA graphs where the
    release deducts them); TensorRT-LLM the same without graphs; SGLang a fixed context reserve
    (its activations live inside the 1 - mem_fraction_static it leaves free); plain nothing."""
    if engine == "plain":
        return Overhead(0, 0, 0)
    if engine == "sglang":
        return Overhead(0, ec.SGLANG_CONTEXT_BYTES, 0)
    vrelease = release or ec.vllm_release(None)
    if engine != "vllm":
        vrelease = replace(vrelease, cudagraph_memory_in_budget=False)
    return vllm_overhead(model, tp, pp, max(max_num_batched_tokens, 1), max_num_seqs or 256, vrelease, act_bytes)


def vllm_batch_defaults(
    release: ec.VllmRelease, gpu: GpuSku | None, gpu_memory_bytes: int, max_model_len: int
) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) that `vllm serve` picks when not given."""
    big, small = ec.VLLM_BATCH_DEFAULTS[release.batch_defaults]
    is_a100 = gpu is not None and gpu.id.startswith("a100")
    seqs, batched = big if gpu_memory_bytes >= ec.VLLM_BIG_GPU_MIN_BYTES and not is_a100 else small
    if batched is None:
        batched = max(max_model_len, 2048) if max_model_len <= 32768 else 2048
    return seqs, batched


def vllm_block_size(model: ModelSpec, gpu: GpuSku | None) -> int:
    """CUDA platform block-size rules: 16, or what the MLA backend forces."""
    if model.is_mla:
        if gpu is not None and (gpu.architecture or "").lower() in ("blackwell",):
            return ec.VLLM_MLA_BLOCK_SIZE_BLACKWELL
        return ec.VLLM_MLA_BLOCK_SIZE_HOPPER
    return ec.VLLM_DEFAULT_BLOCK_SIZE


def _layer_bucket(layer: LayerKVSpec, hybrid_manager: bool) -> tuple[str, int | None]:
    if layer.kind is KVKind.STATE:
        return ("state", None)
    if hybrid_manager and layer.kind is KVKind.SLIDING and layer.window_tokens:
        return ("sliding", layer.window_tokens)
    if hybrid_manager and layer.kind is KVKind.CHUNKED and layer.window_tokens:
        return ("chunked", layer.window_tokens)
    return ("full", None)


def vllm_pool(
    model: ModelSpec,
    kv_budget_bytes: int,
    kv_bytes: int,
    ssm_bytes: int,
    model_bytes: int,
    tp: int,
    pp: int,
    block_size: int,
    max_num_batched_tokens: int,
    release: ec.VllmRelease,
) -> tuple[KVPool, list[str]]:
    """vLLM's KV pool on the tightest rank: layer buckets, hybrid groups, page sizes, num_blocks."""
    pools, notes = vllm_stage_pools(
        model, kv_budget_bytes, kv_bytes, ssm_bytes, model_bytes, tp, pp, block_size, max_num_batched_tokens, release
    )
    # the engine sizes every rank to the tightest one (the first stage with the fewest blocks)
    if not pools:
        raise SpecError("no layer of this model holds a KV cache or state: nothing to size")
    return min(pools, key=lambda p: p.capacity_units), notes


def vllm_stage_pools(
    model: ModelSpec,
    kv_budget_bytes: int,
    kv_bytes: int,
    ssm_bytes: int,
    model_bytes: int,
    tp: int,
    pp: int,
    block_size: int,
    max_num_batched_tokens: int,
    release: ec.VllmRelease,
) -> tuple[list[KVPool], list[str]]:
    """The pool each pipeline stage would build from the budget, in stage order."""
    notes: list[str] = []
    hybrid = release.hybrid_kv_cache_manager
    pools: list[KVPool] = []
    for stage in stage_layer_counts(model, pp):
        layers = [(layer, n) for layer, n in stage if layer.stores_per_token_kv or layer.kind is KVKind.STATE]
        buckets: dict[tuple[str, int | None], list[tuple[LayerKVSpec, int]]] = {}
        for layer, n in layers:
            buckets.setdefault(_layer_bucket(layer, hybrid), []).append((layer, n))
        if not buckets:
            continue  # a stage of KV-shared layers only holds no cache and does not bound the pool
        attn_page_per_token = max(
            (layer_kv_bytes_per_token(layer, kv_bytes, tp) for layer, _ in layers if layer.stores_per_token_kv),
            default=0,
        )
        state_page = max((layer_state_bytes(layer, model_bytes, ssm_bytes, tp) for layer, _ in layers), default=0)
        bs = block_size
        if state_page and attn_page_per_token:
            align = ec.VLLM_HYBRID_BLOCK_ALIGN
            bs = max(bs, align * cdiv(state_page, align * attn_page_per_token))
        attn_buckets = {k: v for k, v in buckets.items() if k[0] != "state"}
        if len(buckets) <= 1 and attn_buckets:
            # one spec type: a single group, every layer its own tensor (UniformType when sizes differ)
            (kind, window), members = next(iter(attn_buckets.items()))
            page_sum = sum(layer_kv_bytes_per_token(layer, kv_bytes, tp) * n for layer, n in members) * bs
            groups: tuple[KVGroup, ...] = (KVGroup(kind, _layer_count(members), window),)
            capacity = kv_budget_bytes // page_sum if page_sum else 0
            unit_bytes = page_sum
        else:
            page = max(attn_page_per_token * bs, state_page)
            sizes = [_layer_count(v) for v in buckets.values()]
            smallest, largest = min(sizes), max(sizes)
            group_size = largest if largest < 1.5 * smallest else smallest
            group_list: list[KVGroup] = []
            padded = 0
            for (kind, window), members in buckets.items():
                size = _layer_count(members)
                n_groups = cdiv(size, group_size)
                padded += n_groups * group_size - size
                group_list.extend(KVGroup(kind, group_size, window) for _ in range(n_groups))
            if padded:
                notes.append(f"hybrid KV groups padded with {padded} empty layer slot(s) (wasted memory)")
            groups = tuple(group_list)
            unit_bytes = group_size * page
            capacity = kv_budget_bytes // unit_bytes if unit_bytes else 0
        pools.append(KVPool("block", capacity, bs, groups, max_num_batched_tokens, unit_bytes))
    return pools, notes


def _layer_count(members: list[tuple[LayerKVSpec, int]]) -> int:
    return sum(n for _, n in members)


def vllm_kv_cache_tokens(pool: KVPool, max_model_len: int, release: ec.VllmRelease) -> int:
    """The number vLLM prints as "GPU KV cache size: N tokens" for this release."""
    if release.kv_cache_size_tokens_rule == "concurrency":
        return int(max_concurrency(pool, max_model_len) * max_model_len)
    return pool.capacity_units // max(1, len(pool.groups)) * pool.block_size


# --- The estimate --------------------------------------------------------------------------


def validate_parallelism(model: ModelSpec, tp: int, pp: int, gpu: GpuSku | None) -> None:
    """TP must divide the attention heads and fit in one node; PP must not exceed the layers."""
    if tp < 1 or pp < 1:
        raise SpecError(f"parallel sizes must be >= 1 (tp={tp}, pp={pp})")
    if model.num_attention_heads % tp:
        raise SpecError(f"tensor parallel size {tp} does not divide the {model.num_attention_heads} attention heads")
    for layer in model.layers:
        heads = layer.num_kv_heads
        if layer.stores_per_token_kv and not layer.replicated_under_tp and heads and heads % tp and tp % heads:
            raise SpecError(f"tensor parallel size {tp} and {heads} KV heads: neither divides the other")
    if gpu is not None and tp > gpu.gpus_per_node:
        raise SpecError(f"tensor parallel size {tp} exceeds the {gpu.gpus_per_node} GPUs per node of {gpu.id}")
    pp_partition(model.num_layers, pp)


def valid_tp_sizes(model: ModelSpec, sizes: Iterable[int], gpu: GpuSku | None = None, pp: int = 1) -> list[int]:
    """The tensor-parallel sizes that pass `validate_parallelism`, in the order given."""
    valid = []
    for tp in sizes:
        try:
            validate_parallelism(model, tp, pp, gpu)
        except SpecError:
            continue
        valid.append(tp)
    return valid


def _format_gib(n: int | float) -> str:
    return f"{n / GIB:,.2f} GiB"


def estimate(
    model: ModelSpec,
    deployment: DeploymentSpec,
    *,
    gpu: GpuSku | None = None,
    model_name: str | None = None,
    checkpoint_bytes: int | None = None,
    context_tokens: int | None = None,
    concurrency: int | None = None,
) -> Estimate:
    """Size one deployment on one GPU type. Raises SpecError with a one-line reason."""
    d = deployment
    engine = d.engine.lower()
    if engine not in ENGINES:
        raise SpecError(f"unknown engine {d.engine!r}; expected one of {', '.join(ENGINES)}")
    if gpu is None and d.gpu_memory_bytes is None and d.kv_cache_memory_bytes is None:
        raise SpecError("no GPU: give --gpu, or --gpu-memory-gib for hardware not in the catalog")
    validate_parallelism(model, d.tp, d.pp, gpu)
    total = d.gpu_memory_bytes if d.gpu_memory_bytes is not None else (gpu.memory_total_bytes if gpu else 0)
    release = ec.vllm_release(d.engine_version) if engine == "vllm" else None
    notes: list[str] = []

    limit = model.context_limit_tokens
    max_model_len = d.max_model_len if d.max_model_len is not None else limit
    if max_model_len <= 0:
        raise SpecError(f"max model length must be positive, got {max_model_len}")
    if max_model_len > limit:
        notes.append(f"max_model_len {max_model_len:,} exceeds the model's context limit {limit:,}")
    context = context_tokens if context_tokens is not None else max_model_len
    if context <= 0:
        raise SpecError(f"context must be a positive number of tokens, got {context}")

    act_dtype = serving_dtype(model, engine)
    if d.weight_dtype.lower() in ("float32", "fp32"):
        act_dtype = "float32"
    act_bytes = element_bytes(act_dtype)
    if d.kv_dtype.lower() not in KV_DTYPES and d.kv_dtype.lower() not in _ELEMENT_BYTES:
        raise SpecError(f"unknown KV dtype {d.kv_dtype!r}; expected one of {', '.join(KV_DTYPES)}")
    kv_bytes = kv_element_bytes(d.kv_dtype.lower(), act_dtype)
    ssm_bytes = element_bytes(model.mamba_ssm_cache_dtype)
    kv_dtype_name = act_dtype if d.kv_dtype == "auto" else d.kv_dtype

    per_token = kv_bytes_per_token(model, kv_bytes)
    per_token_gpu = kv_bytes_per_token_per_gpu(model, kv_bytes, d.tp, d.pp)
    state_gpu = state_bytes_per_sequence_per_gpu(model, act_bytes, ssm_bytes, d.tp, d.pp)

    if d.weights_bytes_per_gpu is not None:
        weights = WeightsEstimate(
            d.weights_bytes_per_gpu, d.weights_bytes_per_gpu * d.tp * d.pp, d.weight_dtype, "override"
        )
    else:
        weights = estimate_weights(model, d.weight_dtype, d.tp, d.pp, checkpoint_bytes, engine)
    weight_name = weights.format_name

    # engine defaults
    defaults = engine_defaults(engine, model, gpu, total, max_model_len, d.tp, d.pp, release)
    util = d.gpu_memory_utilization if d.gpu_memory_utilization is not None else defaults.gpu_memory_utilization
    default_seqs, default_batched = defaults.max_num_seqs, defaults.max_num_batched_tokens
    block_size = d.block_size or defaults.block_size
    if not 0 < util <= 1:
        raise SpecError(f"GPU memory utilization must be in (0, 1], got {util}")
    batched = d.max_num_batched_tokens or default_batched
    seqs_cap: int | None = d.max_num_seqs or (default_seqs or None)

    # overhead
    if d.overhead_bytes_per_gpu is not None:
        overhead = Overhead(0, d.overhead_bytes_per_gpu, 0)
    else:
        overhead = engine_overhead(model, engine, d.tp, d.pp, batched, seqs_cap, release, act_bytes)
        if engine == "plain":
            notes.append("plain engine: no overhead unless given with --overhead-gib")

    usable = int(total * util)
    if d.kv_cache_memory_bytes is not None:
        budget = d.kv_cache_memory_bytes
    elif engine == "trtllm":
        budget = int((total - weights.per_gpu_bytes - overhead.total_bytes) * util)
    elif engine == "sglang":
        budget = usable - weights.per_gpu_bytes - ec.SGLANG_CONTEXT_BYTES
    else:
        budget = usable - weights.per_gpu_bytes - overhead.total_bytes

    pool_notes: list[str] = []
    if budget <= 0:
        pool = KVPool("block", 0, block_size, (KVGroup("full", model.num_layers),), batched, 0)
    elif engine == "vllm":
        assert release is not None
        pool, pool_notes = vllm_pool(
            model, budget, kv_bytes, ssm_bytes, act_bytes, d.tp, d.pp, block_size, batched, release
        )
    elif engine == "sglang":
        pool = sglang_pool(model, budget, kv_bytes, d.tp, d.pp, block_size, batched)
    elif engine == "trtllm":
        capacity = budget // (per_token_gpu * block_size) if per_token_gpu else 0
        pool = KVPool(
            "block", capacity, block_size, (KVGroup("full", model.num_layers),), batched, per_token_gpu * block_size
        )
    else:
        pool = plain_pool(model, budget, kv_bytes, ssm_bytes, act_bytes, d.tp, d.pp)
    notes.extend(pool_notes)
    block_size = pool.block_size

    if engine == "vllm" and release is not None:
        kv_cache_tokens = vllm_kv_cache_tokens(pool, max_model_len, release) if pool.capacity_units else 0
        physical = pool.capacity_units * pool.block_size
    elif pool.unit == "byte":
        kv_cache_tokens = physical = (budget // per_token_gpu) if per_token_gpu and budget > 0 else 0
    else:
        kv_cache_tokens = physical = pool.capacity_units * pool.block_size

    conc = max_concurrency(pool, context) if pool.capacity_units else 0.0
    bmax_memory = b_max(pool, context) if pool.capacity_units else 0
    bmax = min(bmax_memory, seqs_cap) if seqs_cap else bmax_memory
    if context > max_model_len:
        bmax = bmax_memory = 0
    target = concurrency if concurrency is not None else 1
    max_ctx = max_context(pool, target, max_model_len, seqs_cap) if pool.capacity_units else 0

    need = concurrency or 1
    fits, reason = _fit_reason(
        pool, budget, weights.per_gpu_bytes, usable, context, need, bmax, max_model_len, seqs_cap, limit
    )
    return Estimate(
        model=model_name or model.architecture,
        gpu=gpu.id if gpu else "custom",
        engine=engine,
        engine_version=(d.engine_version or ec.VLLM_DEFAULT_VERSION) if engine == "vllm" else d.engine_version,
        tp=d.tp,
        pp=d.pp,
        weight_dtype=weight_name,
        kv_dtype=kv_dtype_name,
        gpu_memory_bytes=total,
        gpu_memory_utilization=util,
        max_model_len=max_model_len,
        context_tokens=context,
        target_concurrency=concurrency,
        kv_bytes_per_token=per_token,
        kv_bytes_per_token_per_gpu=per_token_gpu,
        state_bytes_per_sequence_per_gpu=state_gpu,
        weights_bytes_per_gpu=weights.per_gpu_bytes,
        weights_source=weights.source,
        activation_peak_bytes_per_gpu=overhead.activation_peak_bytes,
        non_torch_bytes_per_gpu=overhead.non_torch_bytes,
        cuda_graph_bytes_per_gpu=overhead.cuda_graph_bytes,
        overhead_bytes_per_gpu=overhead.total_bytes,
        usable_bytes_per_gpu=usable,
        kv_budget_bytes_per_gpu=budget,
        pool=pool,
        max_num_seqs=seqs_cap,
        model_context_limit=limit,
        num_blocks=pool.capacity_units if pool.unit == "block" else kv_cache_tokens // max(block_size, 1),
        block_size=block_size,
        kv_cache_tokens=kv_cache_tokens,
        physical_kv_token_slots=physical,
        max_concurrency=round(conc, 4),
        b_max=bmax,
        b_max_memory=bmax_memory,
        max_context_at_concurrency=max_ctx,
        fits=fits,
        reason=reason,
        notes=tuple(notes),
    )


def _fit_reason(
    pool: KVPool,
    budget: int,
    weights: int,
    usable: int,
    context: int,
    need: int,
    bmax: int,
    max_model_len: int,
    seqs_cap: int | None,
    limit: int,
) -> tuple[bool, str]:
    if budget <= 0:
        return False, (
            f"weights ({_format_gib(weights)}) and overhead leave no KV budget out of "
            f"{_format_gib(usable)} usable per GPU"
        )
    if context > max_model_len:
        return False, f"context {context:,} exceeds max_model_len {max_model_len:,}"
    if bmax >= need:
        return True, (f"{need:,} sequence(s) of {context:,} tokens fit; up to {bmax:,} at once")
    if seqs_cap is not None and bmax == seqs_cap:
        return False, f"{need:,} sequences exceed the engine's max_num_seqs {seqs_cap:,}"
    units = pool.sequence_units(context, context)
    per_seq = units if pool.unit == "byte" else units * pool.unit_bytes
    return False, (
        f"{need:,} sequence(s) of {context:,} tokens need {_format_gib(per_seq * need)} of KV per GPU; "
        f"the budget is {_format_gib(budget)}"
    )


def plain_pool(
    model: ModelSpec, budget: int, kv_bytes: int, ssm_bytes: int, model_bytes: int, tp: int, pp: int
) -> KVPool:
    """Textbook pool: bytes, each layer keeping what its window allows, on the tightest stage."""
    stage = max(
        stage_layers(model, pp),
        key=lambda s: sum(layer_kv_bytes_per_token(layer, kv_bytes, tp) for layer in s),
    )
    groups = tuple(KVGroup(layer.kind.value, 1, layer.window_tokens) for layer in stage if layer.stores_per_token_kv)
    per_token = tuple(layer_kv_bytes_per_token(layer, kv_bytes, tp) for layer in stage if layer.stores_per_token_kv)
    state = sum(layer_state_bytes(layer, model_bytes, ssm_bytes, tp) for layer in stage)
    return KVPool("byte", budget, 1, groups, 0, 1, per_token, state)


def sglang_chunked_prefill_size(gpu_memory_bytes: int) -> int:
    gb = gpu_memory_bytes / 1e9
    if gb < 35:
        return 2048
    if gb < 60:
        return 4096
    if gb < 160:
        return 8192
    return 16384


def sglang_mem_fraction_static(gpu_memory_bytes: int, tp: int, pp: int) -> float:
    """SGLang's default: (gpu_mem - reserved) / gpu_mem, reserved in MiB from its server_args."""
    gpu_mib = gpu_memory_bytes / ec.MIB
    chunked = sglang_chunked_prefill_size(gpu_memory_bytes)
    cuda_graph_max_bs = 256 if gpu_mib > 60 * 1024 else 160
    reserved = 512 + max(chunked, 2048) * 1.5 + cuda_graph_max_bs * 2 + tp * pp / 8 * 1024
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    fraction = (gpu_mib - reserved) / gpu_mib if gpu_mib > reserved else ec.SGLANG_FALLBACK_MEM_FRACTION
    return round(fraction, 3)


@dataclass(frozen=True, slots=True)
class SglangCells:
    """Bytes per token of SGLang's pools on the tightest stage: full-attention layers and SWA layers."""

    full_cell: int
    swa_cell: int
    full_layers: int
    swa_layers: int
    window: int  # the widest sliding window (0 without SWA layers)

    @property
    def hybrid(self) -> bool:
        """Both kinds present: SGLang keeps a separate, smaller pool for the window layers."""
        return self.full_layers > 0 and self.swa_layers > 0


def sglang_cells(model: ModelSpec, kv_bytes: int, tp: int, pp: int) -> SglangCells:
    stage = max(
        stage_layer_counts(model, pp),
        key=lambda s: sum(layer_kv_bytes_per_token(layer, kv_bytes, tp) * n for layer, n in s),
    )
    full = [(layer, n) for layer, n in stage if layer.stores_per_token_kv and layer.kind not in WINDOWED_KINDS]
    swa = [(layer, n) for layer, n in stage if layer.kind in WINDOWED_KINDS and layer.window_tokens]
    return SglangCells(
        full_cell=sum(layer_kv_bytes_per_token(layer, kv_bytes, tp) * n for layer, n in full),
        swa_cell=sum(layer_kv_bytes_per_token(layer, kv_bytes, tp) * n for layer, n in swa),
        full_layers=_layer_count(full),
        swa_layers=_layer_count(swa),
        window=max((layer.window_tokens or 0 for layer, _ in swa), default=0),
    )


def sglang_pool(model: ModelSpec, budget: int, kv_bytes: int, tp: int, pp: int, page_size: int, batched: int) -> KVPool:
    """SGLang token pool: cell size over all attention layers; hybrid SWA splits full and window pools."""
    return sglang_pool_from_cells(sglang_cells(model, kv_bytes, tp, pp), budget, page_size, batched)


def sglang_swa_denominator(cells: SglangCells) -> float:
    """Bytes one full-pool token costs in a hybrid SWA layout (the window pool is a fixed ratio)."""
    return cells.full_cell + ec.SGLANG_SWA_FULL_TOKENS_RATIO * cells.swa_cell


def sglang_pool_from_cells(cells: SglangCells, budget: int, page_size: int, batched: int) -> KVPool:
    if cells.hybrid:
        ratio = ec.SGLANG_SWA_FULL_TOKENS_RATIO
        full_tokens = int(budget / sglang_swa_denominator(cells))
        full_tokens -= full_tokens % page_size
        return KVPool(
            "token",
            full_tokens,
            page_size,
            (KVGroup("full", cells.full_layers),),
            batched,
            cells.full_cell,
            swa_capacity_units=int(full_tokens * ratio),
            swa_window_tokens=cells.window,
        )
    cell = cells.full_cell + cells.swa_cell
    tokens = budget // cell if cell else 0
    tokens -= tokens % page_size
    return KVPool(
        "token",
        tokens // page_size,
        page_size,
        (KVGroup("full", cells.full_layers + cells.swa_layers),),
        batched,
        cell * page_size,
    )
