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
from capacity.columns import CONTRACT
from capacity.engines import ENGINE_NAMES, Engine, EngineProfile, engine_profile
from capacity.engines.base import KV_CONNECTOR
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

ENGINES = ENGINE_NAMES

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


def serving_dtype(model: ModelSpec, engine: str = Engine.VLLM) -> str:
    """The dtype activations and `auto` KV use: the config's, except float32 checkpoints, which
    engines that cast them (vLLM, SGLang) serve in bfloat16 unless told otherwise."""
    dtype = _CANONICAL_DTYPE.get(model.torch_dtype.lower(), "bfloat16")
    if dtype == "float32" and Engine(engine).casts_fp32_to_bf16:
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
    """Bytes one token occupies in one layer on one GPU (0 for state and shared layers), the DSA
    indexer key included (replicated like the MLA latent)."""
    if not layer.stores_per_token_kv:
        return 0
    heads = kv_heads_per_gpu(layer, tp) * (layer.k_head_dim + layer.v_head_dim) * kv_bytes
    return heads + layer.indexer_bytes_per_token


def layer_state_bytes(
    layer: LayerKVSpec, model_bytes: int, ssm_bytes: int, tp: int = 1, *, conv_without_current: bool = False
) -> int:
    """Constant per-sequence state of a Mamba / gated-delta-net layer on one GPU (split by TP).

    transformers caches `conv_kernel` columns of the conv input; vLLM's state shape keeps
    `conv_kernel - 1` (`mamba_utils.MambaStateShapeCalculator`: the current token is not stored),
    which `conv_without_current` selects."""
    if layer.kind is not KVKind.STATE:
        return 0
    conv_elements = layer.conv_state_elements
    if conv_without_current and layer.conv_kernel > 1:
        conv_elements = conv_elements // layer.conv_kernel * (layer.conv_kernel - 1)
    conv = cdiv(conv_elements, tp) * model_bytes
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


PPPartition = Callable[[int, int], list[int]]


def stage_layers(model: ModelSpec, pp: int, partition: PPPartition = pp_partition) -> list[tuple[LayerKVSpec, ...]]:
    """The cache-holding layers of each pipeline stage. Stages split the decoder's `num_layers`
    (MLP-only layers of hybrids such as Nemotron-H count there but hold no cache) by the engine's
    `partition` (vLLM's unless told)."""
    stages: list[tuple[LayerKVSpec, ...]] = []
    start = 0
    for count in partition(max(model.num_layers, len(model.layers)), pp):
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


def stage_layer_counts(model: ModelSpec, pp: int, partition: PPPartition = pp_partition) -> list[LayerCounts]:
    """Each pipeline stage's layers as (a layer, how many layers share its shape), in order of first
    appearance. Every per-layer rule reads a layer's shape (kind, heads, head dims, window, state
    sizes), never its position, so sums and maxima over these pairs equal those over the layers."""

    def compute() -> list[LayerCounts]:
        stages: list[LayerCounts] = []
        for stage in stage_layers(model, pp, partition):
            counts: dict[tuple[object, ...], list[object]] = {}
            for layer in stage:
                key = (
                    layer.kind,
                    layer.num_kv_heads,
                    layer.k_head_dim,
                    layer.v_head_dim,
                    layer.window_tokens,
                    layer.conv_state_elements,
                    layer.conv_kernel,
                    layer.mixer,
                    layer.indexer_head_dim,
                    layer.recurrent_state_elements,
                )
                entry = counts.get(key)
                if entry is None:
                    counts[key] = [layer, 1]
                else:
                    entry[1] += 1  # type: ignore[operator]
            stages.append(tuple((first, n) for first, n in counts.values()))  # type: ignore[misc]
        return stages

    return _memo(f"stage_layer_counts/{partition.__module__}.{partition.__qualname__}", model, pp, compute)


def state_bytes_per_sequence_per_gpu(
    model: ModelSpec, model_bytes: int, ssm_bytes: int, tp: int = 1, pp: int = 1, *, conv_without_current: bool = False
) -> int:
    """Per-sequence state (Mamba / GDN layers) on the most loaded GPU (`layer_state_bytes`)."""
    return max(
        sum(
            layer_state_bytes(layer, model_bytes, ssm_bytes, tp, conv_without_current=conv_without_current) * n
            for layer, n in stage
        )
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


def weight_format(model: ModelSpec, weight_dtype: str, engine: str = Engine.VLLM) -> WeightFormat:
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
    engine: str = Engine.VLLM,
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


def with_layout_extra(
    weights: WeightsEstimate, profile: EngineProfile, model: ModelSpec, tp: int, pp: int, gpu: GpuSku | None,
    notes: list[str] | None = None, triton_kernels: bool | None = None,
) -> WeightsEstimate:
    """The weights plus what the engine's kernels keep beyond the checkpoint's format (MXFP4 experts in
    vLLM's fused-MoE layouts); a note names it when it is not zero."""
    if weights.format_name != "mxfp4":
        return weights
    extra = profile.weight_layout_extra_bytes(model, tp, pp, gpu, triton_kernels)
    if not extra:
        return weights
    if notes is not None:
        notes.append(f"weights include {extra / GIB:.2f} GiB per GPU of MXFP4 expert padding and re-layout "
                     f"({profile.engine.value} {profile.version or ''} on {gpu.id if gpu else 'this GPU'})")  # fmt: skip
    return replace(weights, per_gpu_bytes=weights.per_gpu_bytes + extra, total_bytes=weights.total_bytes + extra * tp * pp)


# --- The KV pool: how an engine lays blocks out and charges a sequence -----------------------


@dataclass(frozen=True, slots=True)
class KVGroup:
    """Layers sharing one block table (vLLM) or one token pool; `charge` says how T becomes units."""

    kind: str  # a KVKind value: full | sliding | chunked | mla | state
    num_layers: int
    window_tokens: int | None = None
    state_blocks: int | None = None  # STATE: blocks a request holds (vLLM "align" mode: 2, else 1)
    block_size: int | None = None  # tokens per block of this group when not the pool's (page unification)


UNBOUNDED_TOKENS = 1 << 50  # a "window" longer than any max_model_len: the group keeps every token


@dataclass(frozen=True, slots=True)
class ChargeTerms:
    """Units one sequence takes in a block or token pool, as terms of the context T and the
    admission length L (T for a running sequence):
    `fixed_units + per_block_groups * cdiv(T, bs) + sum(n * cdiv(min(held + in_flight, L), bs_j))`
    over `windowed` = ((n groups, tokens held beyond the in-flight tokens, block size bs_j), ...);
    a full group whose block size is not the pool's is a windowed term that holds `UNBOUNDED_TOKENS`."""

    fixed_units: int
    per_block_groups: int
    windowed: tuple[tuple[int, int, int], ...]


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
    # tokens scheduled but not settled that a windowed group keeps blocks for (vLLM's
    # max_in_flight_tokens = concurrent batches x max_num_batched_tokens); None: one batch
    max_in_flight_tokens: int | None = None
    padded_layer_slots: int = 0  # empty layer slots the grouping added (memory the engine wastes)
    # SGLang hybrid SWA: bytes one full-pool token costs with its share of the window pool; the
    # full pool holds int(budget / this) tokens (None: capacity = budget // unit_bytes)
    swa_bytes_per_full_token: float | None = None

    @property
    def in_flight_tokens(self) -> int:
        return self.max_num_batched_tokens if self.max_in_flight_tokens is None else self.max_in_flight_tokens

    def sequence_units(self, context_tokens: int, admission_len: int | None = None) -> int:
        """Units one sequence of T tokens is charged (vLLM's admission rule for windowed groups)."""
        t = context_tokens
        if self.unit == "byte":
            total = self.state_bytes_per_sequence
            for group, per_token in zip(self.groups, self.group_bytes_per_token, strict=True):
                tokens = t
                if group.kind in WINDOWED_KINDS and group.window_tokens:
                    tokens = min(t, group.window_tokens - 1)
                total += per_token * tokens
            return total
        limit = admission_len if admission_len is not None else t
        terms = self.charge_terms()
        units = terms.fixed_units + terms.per_block_groups * cdiv(t, self.block_size)
        in_flight = self.in_flight_tokens
        for groups, held, block_size in terms.windowed:
            units += groups * cdiv(min(held + in_flight, limit), block_size)
        return units

    def charge_terms(self) -> ChargeTerms:
        """How a block or token pool charges one sequence, group by group (vLLM's admission rule).

        A state group takes its `state_blocks` (1, or 2 in vLLM's "align" mode: MambaSpec); a sliding
        group `cdiv(min(W - 1 + in_flight, L), bs) + 1` blocks (SlidingWindowSpec: the window may not
        start at a block boundary); a chunked group `cdiv(min(W + in_flight, L), bs)`
        (ChunkedLocalAttentionSpec); any other group `cdiv(T, bs)`.
        """
        fixed = per_block = 0
        windowed: dict[tuple[int, int], int] = {}
        for group in self.groups:
            bs = group.block_size or self.block_size
            if group.kind == KVKind.STATE:
                fixed += group.state_blocks or 1
            elif group.kind == KVKind.SLIDING and group.window_tokens and self.unit == "block":
                windowed[(group.window_tokens - 1, bs)] = windowed.get((group.window_tokens - 1, bs), 0) + 1
                fixed += 1
            elif group.kind == KVKind.CHUNKED and group.window_tokens and self.unit == "block":
                windowed[(group.window_tokens, bs)] = windowed.get((group.window_tokens, bs), 0) + 1
            elif bs != self.block_size:
                windowed[(UNBOUNDED_TOKENS, bs)] = windowed.get((UNBOUNDED_TOKENS, bs), 0) + 1
            else:
                per_block += 1
        return ChargeTerms(fixed, per_block, tuple((n, held, bs) for (held, bs), n in sorted(windowed.items())))


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
    starts: bool = True  # the engine starts with this max_model_len (its own start check)
    max_model_len_that_starts: int = 0  # the largest max_model_len that starts (vLLM's auto-fit); 0: none
    max_in_flight_tokens: int = 0  # tokens in flight a windowed layer holds blocks for
    start_reserved_units: int = 0  # units the start check holds back (vLLM 0.33: the null block)
    not_modelled: str | None = None  # why the engine's accounting of this model is not modelled
    activation_buffers: tuple[tuple[str, int], ...] = ()  # the activation peak's named terms (Overhead.buffers)

    def b_max_at(self, context_tokens: int) -> int:
        return b_max(self.pool, context_tokens, self.max_num_seqs, self.max_model_len)

    def contract(self) -> dict[str, object]:
        """The one JSON object of the `capplan estimate --json` contract (bytes as integers), keys in
        `capacity.columns.CONTRACT` order."""
        derived: dict[str, object] = {
            "modelled": self.not_modelled is None,
            # what the estimate assumed where an input was not given, and what it would move (one line each)
            "notes": list(self.notes),
            # the activation peak's named terms, as the derivation shows them (bytes per GPU)
            "activation_terms": [{"term": name, "bytes": n} for name, n in self.activation_buffers],
        }
        return {key: derived[key] if attribute is None else getattr(self, attribute) for key, attribute in CONTRACT}


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
    # named terms of the activation peak, (what, bytes per GPU), where the profile models them
    buffers: tuple[tuple[str, int], ...] = ()

    @property
    def total_bytes(self) -> int:
        return self.activation_peak_bytes + self.non_torch_bytes + self.cuda_graph_bytes


@dataclass(frozen=True, slots=True)
class OverheadInputs:
    """What an engine profile's non-KV memory (`EngineProfile.overhead`) follows from: the model and its
    layout, the batch limits of the profiling run, the activation width, and what the GPU's links and
    the sampler switch move (only the terms TP > 1 or vLLM's sampler adds read them)."""

    model: ModelSpec
    tp: int
    pp: int
    max_num_batched_tokens: int
    max_num_seqs: int | None
    act_bytes: int
    nvlink_multicast: bool = True  # GpuSku's; True for an unknown GPU
    # the GPUs vLLM's custom all-reduce can span (DeploymentSpec.all_reduce_peer_gpus of GpuSku.peer_link_gpus);
    # None for an unknown GPU
    peer_link_gpus: int | None = None
    flashinfer_sampler: bool | None = None  # vLLM's FlashInfer sampler; None: the release's default


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


def transformer_overhead(
    model: ModelSpec,
    tp: int,
    pp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    release: ec.VllmRelease,
    act_bytes: int = 2,
    coefficients: ec.OverheadCoefficients | None = None,
    *,
    graphs: bool = True,
) -> Overhead:
    """Activation peak of the profiling pass, non-torch memory and the CUDA-graph estimate (vLLM's
    profiling run; TensorRT-LLM's is the same pass without graphs in the budget, `graphs=False`)."""
    c = coefficients or ec.vllm_overhead_coefficients(release)
    mlp, logits = activation_features(model, tp, max_num_batched_tokens, max_num_seqs, act_bytes)
    activation = int(max(c.a_mlp * mlp, c.a_logits * logits)) + c.a_base_bytes
    non_torch = c.nt_tp_bytes if tp > 1 else c.nt_base_bytes
    cuda_graphs = 0
    if graphs and release.cudagraph_memory_in_budget:
        layers_local = max(pp_partition(model.num_layers, pp))
        cuda_graphs = c.cg_base_bytes + c.cg_per_layer_bytes * layers_local
    return Overhead(activation, non_torch, cuda_graphs)


@dataclass(frozen=True, slots=True)
class EngineDefaults:
    """What an engine profile picks when the deployment does not say (0 seqs: no cap)."""

    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    # state layers export prefill checkpoints on this GPU (vLLM: FlashInfer's GDN prefill kernel),
    # which costs a block per request and aligns the attention block to the checkpoint grid
    state_checkpoints: bool = False


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


AUTO_MAX_MODEL_LEN = -1  # vLLM's `--max-model-len -1`: the largest length that starts (auto-fit)


def start_units(pool: KVPool, max_model_len: int, reserved_units: int = 0) -> int:
    """Units the engine's start check needs: one request of max_model_len plus what it holds back."""
    return pool.sequence_units(max_model_len, max_model_len) + reserved_units


def engine_starts(pool: KVPool, max_model_len: int, reserved_units: int = 0) -> bool:
    """vLLM `_check_enough_kv_cache_memory`: one request of max_model_len fits the usable pool."""
    if pool.capacity_units <= 0:
        return False
    if pool.unit == "byte":
        return pool.capacity_units >= pool.sequence_units(max_model_len)
    return pool.capacity_units >= start_units(pool, max_model_len, reserved_units)


def pool_starts(est: Estimate, pool: KVPool | None = None) -> bool:
    """Whether the engine of `est` starts with `pool` (default: the estimate's own; a calibrated
    pool where one is given) at the estimate's max_model_len: the same check as `estimate`."""
    pool = est.pool if pool is None else pool
    if est.kv_budget_bytes_per_gpu <= 0 or pool.capacity_units <= 0:
        return False
    if not engine_profile(est.engine, est.engine_version).refuses_short_pool:
        return True
    return engine_starts(pool, est.max_model_len, est.start_reserved_units)


def largest_starting_len(pool: KVPool, limit_tokens: int, reserved_units: int = 0) -> int:
    """vLLM `_estimate_max_model_len_from_groups` / `_auto_fit_max_model_len`: the largest
    max_model_len in [1, limit] that starts, by bisection over tokens; 0 when not even one does."""
    if not engine_starts(pool, 1, reserved_units):
        return 0
    lo, hi = 1, limit_tokens
    if engine_starts(pool, hi, reserved_units):
        return hi
    while hi - lo > 1:  # lo starts, hi does not
        mid = (lo + hi) // 2
        if engine_starts(pool, mid, reserved_units):
            lo = mid
        else:
            hi = mid
    return lo


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
    """Size one deployment on one GPU type. Raises SpecError with a one-line reason.

    A short composition of the engine profile's answers: defaults, weights, overhead, budget, the
    tightest stage's pool, what the engine prints, whether it starts, then B_max and max context."""
    d = deployment
    profile = engine_profile(d.engine, d.engine_version)
    if gpu is None and d.gpu_memory_bytes is None and d.kv_cache_memory_bytes is None:
        raise SpecError("no GPU: give --gpu, or --gpu-memory-gib for hardware not in the catalog")
    validate_parallelism(model, d.tp, d.pp, gpu)
    total = d.gpu_memory_bytes if d.gpu_memory_bytes is not None else (gpu.memory_total_bytes if gpu else 0)
    notes: list[str] = []
    not_modelled = profile.unmodelled(model)
    if not_modelled:
        notes.append(f"not modelled: {not_modelled}")
    declared = d.unmodelled_features()
    if declared:
        notes.append(f"not modelled: {', '.join(declared)}; sized as if they were off")
        not_modelled = "; ".join(filter(None, (not_modelled, *declared)))

    limit = model.context_limit_tokens
    auto_fit = d.max_model_len == AUTO_MAX_MODEL_LEN
    max_model_len = d.max_model_len if d.max_model_len is not None and not auto_fit else limit
    if max_model_len <= 0:
        raise SpecError(f"max model length must be positive (or -1 to auto-fit), got {max_model_len}")
    if max_model_len > limit:
        notes.append(f"max_model_len {max_model_len:,} exceeds the model's context limit {limit:,}")

    act_dtype = profile.serving_dtype(model)
    if d.weight_dtype.lower() in ("float32", "fp32"):
        act_dtype = "float32"
    act_bytes = element_bytes(act_dtype)
    kv_name = d.kv_dtype.lower()
    problem = profile.kv_dtype_problem(kv_name)
    if problem:
        raise SpecError(problem)
    if kv_name not in KV_DTYPES and kv_name not in _ELEMENT_BYTES:
        raise SpecError(f"unknown KV dtype {d.kv_dtype!r}; expected one of {', '.join(KV_DTYPES)}")
    kv_bytes = kv_element_bytes(kv_name, act_dtype)
    ssm_bytes = element_bytes(profile.ssm_cache_dtype(model, act_dtype))
    kv_dtype_name = act_dtype if d.kv_dtype == "auto" else d.kv_dtype

    per_token = kv_bytes_per_token(model, kv_bytes)
    per_token_gpu = kv_bytes_per_token_per_gpu(model, kv_bytes, d.tp, d.pp)
    state_gpu = state_bytes_per_sequence_per_gpu(
        model, act_bytes, ssm_bytes, d.tp, d.pp, conv_without_current=profile.conv_state_without_current
    )

    if d.weights_bytes_per_gpu is not None:
        weights = WeightsEstimate(
            d.weights_bytes_per_gpu, d.weights_bytes_per_gpu * d.tp * d.pp, d.weight_dtype, "override"
        )
    else:
        weights = estimate_weights(model, d.weight_dtype, d.tp, d.pp, checkpoint_bytes, profile.engine)
        weights = with_layout_extra(weights, profile, model, d.tp, d.pp, gpu, notes, d.triton_kernels)

    defaults = profile.defaults(model, gpu, total, max_model_len, d.tp, d.pp, kv_name)
    util = d.gpu_memory_utilization if d.gpu_memory_utilization is not None else defaults.gpu_memory_utilization
    block_size = d.block_size or defaults.block_size
    # a fraction the user gives must be one; a default the engine derives is taken as the engine takes it
    # (SGLang's (gpu - reserved) / gpu is <= 0 where the reserve exceeds the card: no KV budget, no start)
    if d.gpu_memory_utilization is not None and not 0 < util <= 1:
        raise SpecError(f"GPU memory utilization must be in (0, 1], got {util}")
    batched = d.max_num_batched_tokens or defaults.max_num_batched_tokens
    seqs_cap: int | None = d.max_num_seqs or (defaults.max_num_seqs or None)
    in_flight = profile.max_in_flight_tokens(batched, d.pp, d.async_scheduling)

    inputs = OverheadInputs(
        model, d.tp, d.pp, batched, seqs_cap, act_bytes,
        nvlink_multicast=gpu.nvlink_multicast if gpu is not None else True,
        peer_link_gpus=d.all_reduce_peer_gpus(gpu.peer_link_gpus if gpu is not None else None),
    )  # fmt: skip
    if d.overhead_bytes_per_gpu is not None:
        overhead = Overhead(0, d.overhead_bytes_per_gpu, 0)
    else:
        overhead = profile.overhead(inputs)
        if profile.engine is Engine.PLAIN:
            notes.append("plain engine: no overhead unless given with --overhead-gib")
        if d.enforce_eager and overhead.cuda_graph_bytes:
            notes.append(f"enforce_eager: no CUDA graphs captured, so none of the {overhead.cuda_graph_bytes / GIB:.2f} GiB "
                         "graph estimate is deducted")  # fmt: skip
            overhead = replace(overhead, cuda_graph_bytes=0)

    usable = int(total * util)
    if d.kv_cache_memory_bytes is not None:
        budget = d.kv_cache_memory_bytes
    else:
        budget = profile.kv_budget(total, util, weights.per_gpu_bytes, overhead.total_bytes)
        notes.extend(_assumption_notes(d, gpu, profile, total, util, overhead, budget, inputs, weights.format_name))

    pools = profile.stage_pools(
        model, max(budget, 0), kv_bytes, ssm_bytes, act_bytes, d.tp, d.pp, block_size, batched, in_flight,
        state_checkpoints=defaults.state_checkpoints,
    )  # fmt: skip
    if not pools:
        raise SpecError("no layer of this model holds a KV cache or state: nothing to size")
    pool = min(pools, key=lambda p: p.capacity_units)  # every rank is sized to the tightest one
    padded = max(p.padded_layer_slots for p in pools)
    if padded:
        notes.append(f"hybrid KV groups padded with {padded} empty layer slot(s) (wasted memory)")
    if budget > 0:
        block_size = pool.block_size  # hybrid state models align the attention block to the state page

    reserved = profile.start_reserved_units
    if profile.refuses_short_pool:
        fitted_len = largest_starting_len(pool, limit, reserved) if budget > 0 else 0
        if auto_fit:
            max_model_len = fitted_len or max_model_len
        starts = budget > 0 and engine_starts(pool, max_model_len, reserved)
    else:  # starts with any pool; a request longer than the pool waits or is refused at admission
        starts = budget > 0 and pool.capacity_units > 0
        fitted_len = limit if starts else 0
    context = context_tokens if context_tokens is not None else max_model_len
    if context <= 0:
        raise SpecError(f"context must be a positive number of tokens, got {context}")

    if pool.unit == "byte":
        kv_cache_tokens = physical = (budget // per_token_gpu) if per_token_gpu and budget > 0 else 0
    elif pool.capacity_units:
        printed_concurrency = max_concurrency(pool, max_model_len)
        kv_cache_tokens = profile.kv_cache_tokens(
            pool.capacity_units, len(pool.groups), pool.block_size, printed_concurrency, max_model_len
        )
        physical = pool.capacity_units * pool.block_size
    else:
        kv_cache_tokens = physical = 0

    conc = max_concurrency(pool, context) if pool.capacity_units else 0.0
    bmax_memory = b_max(pool, context) if pool.capacity_units else 0
    bmax = min(bmax_memory, seqs_cap) if seqs_cap else bmax_memory
    if context > max_model_len or not starts:
        bmax = bmax_memory = 0
    target = concurrency if concurrency is not None else 1
    max_ctx = max_context(pool, target, max_model_len, seqs_cap) if pool.capacity_units and starts else 0

    need = concurrency or 1
    fits, reason = _fit_reason(
        pool, budget, weights.per_gpu_bytes, usable, context, need, bmax, max_model_len, seqs_cap, limit
    )
    if budget > 0 and not starts:
        fits = False
        reason = _no_start_reason(pool, max_model_len, fitted_len, reserved, budget)
    elif not fits and starts and budget > 0 and not profile.refuses_short_pool and pool.capacity_units:
        # SGLang / TensorRT-LLM start with a pool shorter than one request: the workload does not fit, the
        # server does (a "does not fit" read as "does not start" is what users of these engines saw)
        reason += (f"; the server starts all the same ({profile.engine.value} caps a request at what the pool "
                   f"holds: {kv_cache_tokens:,} tokens)")  # fmt: skip
    return Estimate(
        model=model_name or model.architecture,
        gpu=gpu.id if gpu else "custom",
        engine=profile.engine.value,
        engine_version=profile.version,
        tp=d.tp,
        pp=d.pp,
        weight_dtype=weights.format_name,
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
        starts=starts,
        max_model_len_that_starts=fitted_len,
        max_in_flight_tokens=in_flight,
        start_reserved_units=reserved,
        not_modelled=not_modelled,
        activation_buffers=overhead.buffers,
    )


ASSUMPTION_SHARE = 0.05  # an unstated input is named when its plausible range moves the KV budget by more


def _assumption_notes(
    d: DeploymentSpec,
    gpu: GpuSku | None,
    profile: EngineProfile,
    total: int,
    util: float,
    overhead: Overhead,
    budget: int,
    inputs: OverheadInputs,
    weight_format: str,
) -> list[str]:
    """What the estimate assumed for inputs the deployment leaves unstated that move the KV budget by
    more than 5 %: the engine release (where releases size the overhead differently), the memory
    utilization (the release default, against 0.05 less), the MXFP4 backend where an optional package picks it,
    GPU peer access where it decides vLLM's all-reduce, and LoRA / CPU offload (assumed off; not modelled)."""
    out: list[str] = []
    model = inputs.model
    if profile.engine is Engine.VLLM and gpu is not None and gpu.amd and d.overhead_bytes_per_gpu is None:
        out.append("ROCm: the overhead terms are vLLM's CUDA rules; HIP graphs and ROCm's memory accounting differ "
                   "(public MI300X logs: pools 3-5 % below these estimates, graph estimates several times CUDA's)")  # fmt: skip
    if profile.engine is Engine.VLLM and d.triton_kernels is None and weight_format == "mxfp4":
        from capacity.engines.vllm_weights import triton_kernels_decides

        version = profile.version or ec.VLLM_DEFAULT_VERSION
        if triton_kernels_decides(gpu, version):
            marlin, triton = (profile.weight_layout_extra_bytes(model, d.tp, d.pp, gpu, on) for on in (False, True))
            if marlin != triton and (budget <= 0 or abs(marlin - triton) > ASSUMPTION_SHARE * budget):
                out.append(f"assumed vLLM {version} without the triton_kernels package (a pip install): the MXFP4 "
                           "experts run Marlin on this GPU; with it installed by hand (--triton-kernels) "
                           f"they run the OAI Triton kernels and the weights take {_format_gib(marlin - triton)} "
                           "less per GPU")  # fmt: skip
    if budget <= 0:  # the rest are shares of a budget; this one can decide whether the engine starts
        return out
    if d.engine_version is None and d.overhead_bytes_per_gpu is None and profile.engine is Engine.VLLM:
        older = engine_profile(profile.engine, "0.11").overhead(inputs)
        if abs(older.total_bytes - overhead.total_bytes) > ASSUMPTION_SHARE * budget:
            out.append(f"assumed {profile.engine.value} {profile.version} (no --engine-version): on 0.11-0.16 the "
                       f"overhead would be {_format_gib(older.total_bytes)} instead of "
                       f"{_format_gib(overhead.total_bytes)}")  # fmt: skip
    if profile.engine is Engine.VLLM and d.overhead_bytes_per_gpu is None:
        from capacity.engines.vllm_overhead import runs_v2_model_runner  # the engine module imports this one

        version = profile.version or ec.VLLM_DEFAULT_VERSION
        rule = ec.vllm_sampler_rule(version, runs_v2_model_runner(inputs.model, version))
        if rule is not None and rule.flashinfer_units != rule.native_units:
            flipped = profile.overhead(replace(inputs, flashinfer_sampler=not rule.flashinfer_default))
            if abs(flipped.total_bytes - overhead.total_bytes) > ASSUMPTION_SHARE * budget:
                state, other = ("on", "off") if rule.flashinfer_default else ("off", "on")
                out.append(f"assumed the FlashInfer sampler {state}, vLLM {version}'s default with "
                           "VLLM_USE_FLASHINFER_SAMPLER unset (0.9-0.11.0 take it wherever FlashInfer is installed); "
                           f"{other}, the overhead would be {_format_gib(flipped.total_bytes)} "
                           f"instead of {_format_gib(overhead.total_bytes)}")  # fmt: skip
    geforce = gpu is not None and gpu.geforce  # peer access refused by the stock driver: nothing to assume
    if (profile.engine is Engine.VLLM and d.overhead_bytes_per_gpu is None and overhead.cuda_graph_bytes
            and d.gpu_peer_access is None and not d.disable_custom_all_reduce and not geforce):  # fmt: skip
        # what --gpu-peer-access would give (DeploymentSpec's rule: it moves only TP 2 over PCIe)
        with_access = replace(d, gpu_peer_access=True).all_reduce_peer_gpus(gpu.peer_link_gpus if gpu else None)
        if with_access != inputs.peer_link_gpus:
            peer = profile.overhead(replace(inputs, peer_link_gpus=with_access))
            if abs(peer.cuda_graph_bytes - overhead.cuda_graph_bytes) > ASSUMPTION_SHARE * budget:
                with_peer, without = _format_gib(peer.cuda_graph_bytes), _format_gib(overhead.cuda_graph_bytes)
                out.append("assumed no GPU peer access between the 2 GPUs (PCIe: vLLM's P2P test fails on many "
                           "hosts): custom all-reduce off, the CUDA graphs capture NCCL's; where the test passes "
                           f"(--gpu-peer-access), the graph estimate is {with_peer} instead of {without}")  # fmt: skip
    if d.gpu_memory_utilization is None and total * 0.05 > ASSUMPTION_SHARE * budget:
        out.append(f"assumed gpu_memory_utilization {util} (the release default); 0.05 less takes "
                   f"{_format_gib(total * 0.05)} ({total * 0.05 / budget:.0%}) from the KV budget")  # fmt: skip
    if profile.engine is Engine.SGLANG and d.engine_version is None and d.gpu_memory_utilization is None:
        from capacity.engines.sglang import release_default_fractions

        eras = {era: f for era, f in release_default_fractions(model, gpu, total, d.tp, d.pp).items()
                if abs(f - util) * total > ASSUMPTION_SHARE * budget}  # fmt: skip
        if eras:
            apart = max(abs(f - util) for f in eras.values()) * total
            out.append(f"assumed SGLang {ec.SGLANG_VERSION} (no --engine-version): older releases default "
                       f"mem_fraction_static to " + ", ".join(f"{f} ({era})" for era, f in eras.items())
                       + f" at {d.tp * d.pp} rank(s), not {util}: up to {_format_gib(apart)} of KV budget apart")  # fmt: skip
    assumed_off = profile.assumed_off
    if {"lora", "cpu_offload"} <= assumed_off and not (d.lora or d.cpu_offload_gib):
        out.append("assumed no LoRA adapters and no CPU offload (neither is modelled: with LoRA, add the adapters' "
                   "weights and buffers with --overhead-gib)")  # fmt: skip
    if KV_CONNECTOR in assumed_off and not d.kv_connector:
        out.append("assumed no KV connector (--kv-transfer-config: LMCache and the like hold GPU buffers capplan "
                   "does not size; a public LMCache log has a 25 % smaller pool than the estimate)")  # fmt: skip
    if {"speculative", "dp_attention"} <= assumed_off and not (d.speculative or d.dp_attention):
        out.append("assumed no speculative decoding and no DP attention (not modelled: a draft model adds its "
                   "weights and a second KV pool; DP attention sizes a pool per attention rank)")  # fmt: skip
    return out


def _no_start_reason(pool: KVPool, max_model_len: int, fitted_len: int, reserved: int, budget: int) -> str:
    """The engine's own refusal, in one line (vLLM: 'To serve at least one request ...')."""
    need_units = start_units(pool, max_model_len, reserved)
    need = need_units * pool.unit_bytes
    fix = (
        f"the largest max_model_len that starts is {fitted_len:,} (--max-model-len {fitted_len} or -1 to auto-fit)"
        if fitted_len
        else "no max_model_len starts: not even one token fits"
    )
    return (
        f"DOES NOT START: one request of max_model_len {max_model_len:,} needs {need_units:,} blocks "
        f"({_format_gib(need)} of KV per GPU) but the pool has {pool.capacity_units:,} "
        f"({_format_gib(budget)}); {fix}"
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
