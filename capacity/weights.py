"""Weights per GPU: the served format's bytes per parameter over the parameter model, or the checkpoint's size."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from capacity.dtypes import CANONICAL_DTYPE, GIB, WEIGHT_DTYPES, element_bytes, serving_dtype
from capacity.engines.kinds import Engine
from capacity.kv.kinds import FullAttention
from capacity.memo import per_object
from capacity.parallel import memo_per_model, pp_partition, stage_layer_counts
from capacity.spec import GpuSku, ModelSpec, SpecError

if TYPE_CHECKING:
    from capacity.engines.protocol import EngineProfile


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """Bytes per parameter of the quantized linear layers and which layers it applies to."""

    name: str
    linear_bytes_per_param: Fraction
    dense_bytes_per_param: Fraction  # embeddings, lm_head, norms, router, unquantized layers
    attention_dense: bool = False  # attention projections kept 16-bit (the checkpoint's ignore list)
    mlp_dense: bool = False  # the dense MLP and the shared experts kept 16-bit

    @classmethod
    def experts_only(cls, name: str, linear_bytes_per_param: Fraction, dense_bytes_per_param: Fraction) -> WeightFormat:
        """A format that quantizes the routed experts only."""
        return cls(name, linear_bytes_per_param, dense_bytes_per_param, attention_dense=True, mlp_dense=True)


def _int4_bytes(group_size: int, zero_points: bool = True) -> Fraction:
    # 4-bit weights + a 16-bit scale per group, and a packed 4-bit zero point per group where the scheme has
    # them (AWQ and GPTQ always; compressed-tensors when asymmetric)
    return Fraction(1, 2) + Fraction(2, group_size) + (Fraction(1, 2 * group_size) if zero_points else 0)


def stored_format(model: ModelSpec) -> WeightFormat:
    """The checkpoint's own format, as vLLM serves it with `--dtype auto` (its `format_name` names it)."""
    return weight_format(model, "auto", Engine.VLLM)


def weight_format(model: ModelSpec, weight_dtype: str, engine: str = Engine.VLLM) -> WeightFormat:
    """Resolve `--dtype` against the checkpoint: auto = what the checkpoint stores."""
    # per model object: the grid resolves one model's dtypes for every layout of it
    return per_object(model, ("weights/format", weight_dtype, engine), lambda: _resolve_format(model, weight_dtype, engine))


def _resolve_format(model: ModelSpec, weight_dtype: str, engine: str) -> WeightFormat:
    base = Fraction(element_bytes(serving_dtype(model, engine)))
    wanted = weight_dtype.lower()
    quant = model.quantization
    if wanted == "auto" and quant is not None:
        # the checkpoint's format, on the parts its ignore list does not keep 16-bit
        stored = replace(_resolve_format(model, quant.weight_format, engine), dense_bytes_per_param=base)
        if quant.weight_format == "int4":
            group = quant.group_size or 128
            stored = replace(
                stored,
                name=f"int4 ({quant.method}, group {group})",
                linear_bytes_per_param=_int4_bytes(group, quant.group_zero_points),
            )
        return replace(stored, attention_dense=not quant.attention_quantized, mlp_dense=not quant.mlp_quantized)
    if wanted == "auto":
        return WeightFormat(serving_dtype(model, engine), base, base)
    if wanted in ("bf16", "bfloat16", "fp16", "float16"):
        two = Fraction(2)
        return WeightFormat(CANONICAL_DTYPE[wanted], two, two)
    if wanted in ("float32", "fp32"):
        four = Fraction(4)
        return WeightFormat("float32", four, four)
    if wanted in ("fp8", "int8"):
        return WeightFormat(wanted, Fraction(1), base)
    if wanted == "int4":
        return WeightFormat("int4 (group 128)", _int4_bytes(128), base)
    if wanted == "mxfp4":
        # 4-bit elements + one 8-bit shared exponent per 32 elements = 4.25 bits
        return WeightFormat.experts_only("mxfp4", Fraction(17, 32), base)
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
    # PP > 1: per pipeline stage, the bytes its ranks hold fewer than the most loaded (0 there); what is added
    # per rank later (copies, kernel layouts, adapters) is added to every stage alike. Empty: every stage the same
    stage_shortfall_bytes: tuple[int, ...] = ()

    def stage_bytes(self, stage: int) -> int:
        """Weights on a rank of pipeline stage `stage`."""
        short = self.stage_shortfall_bytes
        return self.per_gpu_bytes - (short[stage] if stage < len(short) else 0)


@dataclass(frozen=True, slots=True)
class WeightShards:
    """How a layout splits each part of the weights over the GPUs of one replica (`tensor_parallel`: all by TP;
    `capacity.features.parallel_layout` gives the DP-attention / expert-parallel splits): the ranks a part is
    split over, and the share of the routed experts the most loaded rank holds."""

    attention: int  # attention projections (and an SSM/GDN mixer)
    mlp: int  # dense MLP and shared experts
    embedding: int  # the input embedding (and the loaded extra parameters beside it)
    head: int  # the LM head
    expert_share: Fraction  # of the routed experts' parameters, the most loaded rank's share

    @classmethod
    def tensor_parallel(cls, tp: int) -> WeightShards:
        """Every sharded part split by TP (the layout without DP attention or expert parallel)."""
        return _tensor_parallel_shards(tp)


@lru_cache(maxsize=64)  # pure and frozen; asked per layout
def _tensor_parallel_shards(tp: int) -> WeightShards:
    return WeightShards(tp, tp, tp, tp, Fraction(1, tp))


def _rank_weight_bytes(
    model: ModelSpec, fmt: WeightFormat, tp: int, pp: int, shards: WeightShards | None = None
) -> list[Fraction]:
    """Weight bytes of every pipeline stage for one rank (sharded parts over their `shards`, replicated whole)."""
    s = shards or WeightShards.tensor_parallel(tp)
    dense = fmt.dense_bytes_per_param
    linear = fmt.linear_bytes_per_param
    mlp_bytes = dense if fmt.mlp_dense else linear
    attention_bytes = dense if fmt.attention_dense else linear
    stages: list[Fraction] = []
    sums = _stage_param_sums(model, pp)
    shapes = stage_layer_counts(model, pp)
    for stage_index, stage in enumerate(sums):
        terms = [
            (stage.attention, attention_bytes, s.attention),
            (stage.replicated_attention, attention_bytes, 1),  # MLA's down-projections, whole on every rank
            (stage.mlp, mlp_bytes, s.mlp),
            (stage.experts, linear * s.expert_share, 1),
            (stage.whole_unquantized, dense, 1),  # norms and router, whole on every rank
            (stage.fp32_router, _FP32_BYTES, 1),
        ]
        # vLLM's and SGLang's QKVParallelLinear give a rank `heads_per_gpu` KV heads, at least one
        # (`num_kv_head_replicas` = TP / heads past them): the excess over the even split is copied K/V projections
        for layer, n in shapes[stage_index]:
            cache = layer.cache
            if isinstance(cache, FullAttention) and cache.num_kv_heads:
                copied_heads = cache.heads_per_gpu(s.attention) * s.attention - cache.num_kv_heads
                per_head = model.hidden_size * (cache.k_head_dim + cache.v_head_dim)
                terms.append((per_head * n * copied_heads, attention_bytes, s.attention))
        if stage_index == 0:
            terms.append((model.embedding_params + model.loaded_extra_params, dense, s.embedding))
        if stage_index == len(sums) - 1:
            head = model.lm_head_params or (model.embedding_params if pp > 1 else 0)
            terms += [(head, dense, s.head), (model.final_norm_params, dense, 1)]
        stages.append(_exact_sum(terms))
    return stages


def _exact_sum(terms: list[tuple[int, Fraction, int]]) -> Fraction:
    """The sum of params x bytes per param / ranks over `terms`, exactly: integer numerators over one common
    denominator, reduced once (the same value as summing Fractions term by term, at a fraction of the cost)."""
    denominators = [per_param.denominator * ranks for _, per_param, ranks in terms]
    common = math.lcm(*denominators)
    numerator = sum(
        params * per_param.numerator * (common // d) for (params, per_param, _), d in zip(terms, denominators, strict=True)
    )
    return Fraction(numerator, common)


_FP32_BYTES = Fraction(4)


class _StageParams(NamedTuple):
    """One pipeline stage's decoder parameters by how a rank holds them."""

    attention: int  # split by the attention TP
    mlp: int  # split by TP
    experts: int  # the routed experts (the rank's share is the layout's)
    whole_unquantized: int  # norms, routers, row-parallel biases: whole on every rank, in the model dtype
    replicated_attention: int  # MLA's down-projections: whole on every rank, quantized with attention
    fp32_router: int  # whole on every rank, in fp32


def _stage_param_sums(model: ModelSpec, pp: int) -> list[_StageParams]:
    """Per pipeline stage: its layers' parameters summed by how a rank holds them."""

    def compute() -> list[_StageParams]:
        sums = []
        start = 0
        for count in pp_partition(len(model.layer_params), pp):
            layers = model.layer_params[start : start + count]
            start += count
            sums.append(
                _StageParams(
                    sum(params.attention for params in layers),
                    sum(params.mlp for params in layers),
                    sum(params.experts for params in layers),
                    sum(params.router + params.norms for params in layers),
                    sum(params.replicated_attention for params in layers),
                    sum(params.fp32_router for params in layers),
                )
            )
        return sums

    return memo_per_model("stage_param_sums", model, pp, compute)


def estimate_weights(
    model: ModelSpec,
    weight_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    checkpoint_bytes: int | None = None,
    engine: str = Engine.VLLM,
    shards: WeightShards | None = None,
) -> WeightsEstimate:
    """Weights on the most loaded GPU. The checkpoint's real size wins when the served format is
    the checkpoint's own; it is spread over ranks in the proportions the parameter model gives. `shards`: how a
    DP-attention / expert-parallel layout splits the parts (default: all by TP)."""
    fmt = weight_format(model, weight_dtype, engine)
    stages = _rank_weight_bytes(model, fmt, tp, pp, shards)
    per_gpu = max(stages)
    # what one GPU would hold of the whole model: the same for every layout of a model and format
    # (keyed by what resolves the format: hashing its Fractions costs more than the lookup saves)
    loaded_total = per_object(
        model, ("weights/loaded", weight_dtype, engine), lambda: sum(_rank_weight_bytes(model, fmt, 1, 1))
    )
    native = weight_dtype.lower() == "auto" or (
        model.quantization is None and CANONICAL_DTYPE.get(weight_dtype.lower()) == model.torch_dtype
    )
    source = "modeled"
    if checkpoint_bytes and native and loaded_total > 0:
        # The checkpoint also holds parts the engine skips (extra_params it does not load: MTP heads).
        in_checkpoint = loaded_total + (model.extra_params - model.loaded_extra_params) * fmt.dense_bytes_per_param
        scale = Fraction(checkpoint_bytes) / in_checkpoint
        per_gpu, loaded_total, source = per_gpu * scale, loaded_total * scale, "checkpoint"
        stages = [stage * scale for stage in stages] if len(stages) > 1 else stages
    most = math.ceil(per_gpu)
    shortfall = tuple(most - math.ceil(stage) for stage in stages) if len(stages) > 1 else ()
    return WeightsEstimate(most, math.ceil(loaded_total), fmt.name, source, shortfall)


def _plus(
    weights: WeightsEstimate, extra: int, tp: int, pp: int, notes: list[str] | None, what: str
) -> WeightsEstimate:
    """`weights` with `extra` bytes on every rank, and a note saying `what` they are (none when zero)."""
    if not extra:
        return weights
    if notes is not None:
        notes.append(f"weights include {extra / GIB:.2f} GiB per GPU of {what}")
    return replace(
        weights, per_gpu_bytes=weights.per_gpu_bytes + extra, total_bytes=weights.total_bytes + extra * tp * pp
    )


def with_weight_copies(
    weights: WeightsEstimate, profile: EngineProfile, model: ModelSpec, tp: int, pp: int, notes: list[str] | None = None
) -> WeightsEstimate:
    """The weights plus the copies the engine derives at load and keeps beside them (vLLM 0.7.1-0.7.3's absorbed
    MLA matrices); the same on every GPU. A note names them when they are not zero."""
    extra = profile.weight_copy_bytes(model, tp, pp, weights.format_name)
    if not extra:
        return weights
    what = f"absorbed MLA matrices kept beside the raw projections ({profile.engine.value} {profile.version or ''})"
    return _plus(weights, extra, tp, pp, notes, what)


def with_layout_extra(
    weights: WeightsEstimate,
    profile: EngineProfile,
    model: ModelSpec,
    tp: int,
    pp: int,
    gpu: GpuSku | None,
    notes: list[str] | None = None,
    triton_kernels: bool | None = None,
) -> WeightsEstimate:
    """The weights plus what the engine's kernels keep beyond the checkpoint's format (`with_weight_copies`, then
    MXFP4 experts in vLLM's fused-MoE layouts); a note names it when it is not zero."""
    weights = with_weight_copies(weights, profile, model, tp, pp, notes)
    if weights.format_name != "mxfp4":
        return weights
    extra = profile.weight_layout_extra_bytes(model, tp, pp, gpu, triton_kernels)
    where = f"{profile.engine.value} {profile.version or ''} on {gpu.id if gpu else 'this GPU'}"
    return _plus(weights, extra, tp, pp, notes, f"MXFP4 expert padding and re-layout ({where})")
