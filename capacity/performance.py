"""How fast a deployment runs: decode step time, prefill time, TPOT, TTFT and output tokens/s.

A roofline per engine step, pure and vectorizable (every formula reads the same on Python floats and
Polars expressions, like the engine rules in `capacity.numeric`):

- a step processes `tokens` new tokens (B for a decode step of B sequences; a prefill chunk adds its
  prompt tokens) while `batch` sequences read their cached context;
- bytes read per step = the weights on the rank (for MoE, the routed experts the step's tokens activate
  in expectation, `E x (1 - (1 - k / E) ** tokens)` of E, not all of them) + the KV each sequence holds
  (windowed layers at most their window, MLA latents, state) ;
- FLOPs per step = 2 x active parameters per token on the rank x tokens + attention
  (4 x heads x head dim x cached tokens per new token, per layer);
- step time = each operation on its own roofline, one after the other: the linear layers
  max(weight bytes / (memory efficiency x bandwidth), 2 x active params x tokens / (compute efficiency x peak))
  + attention max(KV bytes / (memory efficiency x bandwidth), attention FLOPs / (compute efficiency x peak))
  + tensor-parallel all-reduces over the SKU's interconnect (bytes over the link + a fitted latency per call)
  + a per-step engine overhead;
- PP: each stage holds its layers; a token passes every stage (TPOT = stages x stage time + hops).

The efficiency factors (`PerfEfficiency`) are few and named; `capacity.perf_fit` fits them on public
benchmark measurements (evaluation/data/perf_measurements.yaml) with leave-one-source-out validation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from capacity.dtypes import element_bytes, serving_dtype
from capacity.engines import Engine
from capacity.engines.protocol import ASSUMPTION_SHARE
from capacity.estimate import Estimate
from capacity.features.parallel_layout import RankLayout
from capacity.features.prefix_cache_engines import prefix_cache_rule
from capacity.features.speculative import SpeculativeSpeed
from capacity.memo import per_object
from capacity.numeric import Num, as_float, at_least, cdiv, choose
from capacity.parallel import pp_partition, stage_layer_counts
from capacity.spec import GpuSku, ModelSpec, SpecError
from capacity.weights import weight_format

GB = 1e9
TFLOP = 1e12


@dataclass(frozen=True, slots=True)
class PerfEfficiency:
    """Achievable shares of the datasheet peaks and fixed costs; each factor says what it stands for."""

    memory_bandwidth: float = 0.80  # share of peak HBM/GDDR bandwidth a decode step's reads reach
    compute: float = 0.60  # share of the dense peak FLOPS large GEMMs reach (prefill, big batches)
    step_overhead_s: float = 0.0015  # per engine step: scheduling, sampling, kernel launches between graphs
    allreduce_latency_s: float = 0.000015  # per all-reduce, beyond the bytes over the link
    request_overhead_s: float = 0.0  # per request before its first prefill step (HTTP, tokenizer, scheduler)
    source: str = "defaults before fitting (capacity.perf_fit replaces them)"


# Fitted by `python tools/perf_fit.py` (capacity.perf_fit) on evaluation/data/perf_measurements.yaml (public
# benchmark rows grouped by source, README-perf-measurements.md), minimising the mean absolute log error; a capped
# client concurrency is observed as the closed loop `capplan estimate --concurrency` reports (capacity.serving.closed_loop).
# Memory and compute efficiency per GPU vendor class, step and request overheads per engine, one all-reduce
# latency. Leave-one-source-family-out scores: README-perf-measurements.md ("Step costs from operations").
_FIT_SOURCE = "fitted on the public benchmark rows of evaluation/data/perf_measurements.yaml (tools/perf_fit.py)"
MEMORY_EFFICIENCY = {"nvidia": 0.784, "amd": 0.475}
COMPUTE_EFFICIENCY = {"nvidia": 0.509, "amd": 0.310}
STEP_OVERHEAD_S = {Engine.VLLM: 0.00327, Engine.SGLANG: 0.00579, Engine.TRTLLM: 0.00383}
REQUEST_OVERHEAD_S = {Engine.VLLM: 0.0, Engine.SGLANG: 0.112, Engine.TRTLLM: 0.149}
ALLREDUCE_LATENCY_S = 0.0000163  # per tensor-parallel all-reduce, beyond its bytes over the link

DEFAULT_EFFICIENCY = PerfEfficiency(
    memory_bandwidth=MEMORY_EFFICIENCY["nvidia"],
    compute=COMPUTE_EFFICIENCY["nvidia"],
    step_overhead_s=STEP_OVERHEAD_S[Engine.VLLM],
    allreduce_latency_s=ALLREDUCE_LATENCY_S,
    request_overhead_s=REQUEST_OVERHEAD_S[Engine.VLLM],
    source=f"vLLM on NVIDIA, {_FIT_SOURCE}",
)


def vendor_class(gpu: GpuSku) -> str:
    """The efficiency class a GPU's factors are fitted per: its vendor ("amd" or "nvidia")."""
    return "amd" if gpu.amd else "nvidia"


def efficiency_for(engine: str, gpu: GpuSku) -> PerfEfficiency:
    """The fitted factors for an engine on a GPU's vendor class (NVIDIA's where a class has no data)."""
    vendor = vendor_class(gpu)
    try:
        name = Engine(str(engine).lower())
    except ValueError:
        name = Engine.VLLM
    return PerfEfficiency(
        memory_bandwidth=MEMORY_EFFICIENCY.get(vendor, MEMORY_EFFICIENCY["nvidia"]),
        compute=COMPUTE_EFFICIENCY.get(vendor, COMPUTE_EFFICIENCY["nvidia"]),
        step_overhead_s=STEP_OVERHEAD_S.get(name, STEP_OVERHEAD_S[Engine.VLLM]),
        allreduce_latency_s=ALLREDUCE_LATENCY_S,
        request_overhead_s=REQUEST_OVERHEAD_S.get(name, 0.0),
        source=f"{name} on {vendor}, {_FIT_SOURCE}",
    )


@dataclass(frozen=True, slots=True)
class PerfInputs:
    """What one rank of a deployment reads and computes per step, independent of B and T."""

    dense_weight_bytes: float  # every step reads these (attention, dense MLP, shared experts, embeddings)
    expert_weight_bytes: float  # all routed experts on the rank
    num_experts: int
    experts_per_token: int
    active_params: float  # parameters one token multiplies on the rank (2 FLOPs each)
    full_kv_bytes_per_token: float  # per cached token, layers that keep every token (full, MLA)
    windowed_kv: tuple[tuple[float, int], ...]  # (bytes per cached token, window) of windowed layers
    state_bytes_per_sequence: float
    attention_flops_per_cached_token: float  # per new token and cached token, all layers on the rank
    windowed_attention: tuple[tuple[float, int], ...]  # the same for windowed layers, with their window
    hidden_size: int
    layers_on_rank: int
    act_bytes: int
    tp: int
    pp: int
    bandwidth_bytes_per_s: float
    flops_per_s: float
    link_bytes_per_s: float  # the interconnect (inf where the catalog has none: traffic not costed)
    notes: tuple[str, ...] = field(default_factory=tuple)
    # DP attention / expert parallel (`capacity.features.parallel_layout`): MoE layers on the rank, the ranks their
    # tokens are dispatched over (`RankLayout.token_exchange_ranks`), the DP ranks whose tokens reach its experts
    moe_layers_on_rank: int = 0
    ep: int = 1
    expert_token_ranks: int = 1


def _peak_flops(gpu: GpuSku, weight_format_name: str) -> float:
    """Dense peak for the GEMM dtype: fp8 weights use the fp8 peak where the GPU has one."""
    bf16 = gpu.bf16_dense_tflops
    if bf16 is None:
        raise SpecError(f"GPU {gpu.id} has no bf16 dense TFLOPS in the catalog: cannot estimate speed")
    if weight_format_name.startswith("fp8") and gpu.fp8_dense_tflops:
        return gpu.fp8_dense_tflops * TFLOP
    return bf16 * TFLOP


@dataclass(frozen=True, slots=True)
class RankWeightTerms:
    """What one rank of a layout reads and multiplies of its weights (the KV dtype does not move them)."""

    dense_weight_bytes: float
    expert_weight_bytes: float
    active_params: float
    layers_on_rank: int
    act_bytes: int
    fp8_gemm: bool  # fp8 weights: the GEMMs run at the fp8 peak where the GPU has one
    moe_layers_on_rank: int = 0


@dataclass(frozen=True, slots=True)
class RankKVTerms:
    """What one rank of a layout reads and multiplies per cached token: its layers and the KV dtype only (no
    parameter count), so models that share their layers share these."""

    full_kv_bytes_per_token: float
    attention_flops_per_cached_token: float
    windowed: tuple[tuple[int, float, float], ...]  # (window, KV bytes per cached token, attention FLOPs)


def rank_weight_terms(
    model: ModelSpec,
    *,
    tp: int,
    pp: int,
    weight_dtype: str,
    engine: str,
    weights_bytes_per_gpu: int,
    weight_format_name: str,
    layout: RankLayout | None = None,
) -> RankWeightTerms:
    """Per-rank weight bytes read per step (dense and routed experts) and active parameters of a layout on its first
    stage (the most loaded: remainder layers and the embeddings go first); `weight_dtype` is what was asked for
    (`--dtype`). A DP-attention / expert-parallel `layout` sets the rank's share of the routed experts and the TP its
    attention splits by. The KV dtype does not move them (`rank_kv_terms` is the cached tokens' part)."""
    fmt = weight_format(model, weight_dtype, engine)
    counts, experts, per_layer_active, attention_params, moe_layers, replicated = _stage_param_sums(model, pp)
    share = float(layout.expert_share(model.num_experts)) if layout is not None else 1 / tp
    expert_bytes = experts * float(fmt.linear_bytes_per_param) * share
    head = (model.lm_head_params or model.embedding_params) if pp == 1 else 0
    attention_tp = layout.attention_tp if layout is not None else tp
    # attention runs split by the attention TP (SGLang's DP attention: tp / dp), the rest by TP
    attention_extra = attention_params * (1 / attention_tp - 1 / tp) if attention_tp != tp else 0.0
    return RankWeightTerms(
        dense_weight_bytes=max(float(weights_bytes_per_gpu) - expert_bytes, 0.0),
        expert_weight_bytes=expert_bytes,
        active_params=(per_layer_active + head) / tp + attention_extra + replicated,
        layers_on_rank=max(counts),
        act_bytes=element_bytes(serving_dtype(model, engine)),
        fp8_gemm=weight_format_name.startswith("fp8"),
        moe_layers_on_rank=moe_layers if layout is not None else 0,
    )


def rank_kv_terms(model: ModelSpec, *, attention_tp: int, pp: int, kv_element_bytes: int) -> RankKVTerms:
    """The cached tokens' part of a rank's speed terms (`rank_weight_terms` the weights'): KV bytes per token and
    attention FLOPs of the first stage's layers on a rank whose attention is split by `attention_tp`, full layers
    apart from each window."""

    def compute() -> RankKVTerms:
        full, attn_full, windowed = _stage_attention_sums(model, attention_tp, pp, kv_element_bytes)
        return RankKVTerms(full, attn_full, tuple((w, kv, f) for w, (kv, f) in sorted(windowed.items())))

    return per_object(model, ("performance/kv_terms", attention_tp, pp, kv_element_bytes), compute)


def _stage_param_sums(model: ModelSpec, pp: int) -> tuple[list[int], float, float, int, int, int]:
    """(layers per stage, expert parameters, active parameters per token split by TP, attention parameters, MoE
    layers and the attention parameters every rank runs whole, of the first stage's layers)."""

    def compute() -> tuple[list[int], float, float, int, int, int]:
        counts = pp_partition(len(model.layer_params), pp)
        stage_params = model.layer_params[: counts[0]]
        experts = sum(p.experts for p in stage_params)
        per_layer_active = sum(
            p.attention + p.mlp + p.router + p.fp32_router + p.norms + _active_expert_params(model, p.experts)
            for p in stage_params
        )
        attention = sum(p.attention for p in stage_params)
        replicated = sum(p.replicated_attention for p in stage_params)
        return counts, experts, per_layer_active, attention, sum(1 for p in stage_params if p.experts), replicated

    # per model object: the grid asks for the same model at many dtypes and engines
    return per_object(model, ("performance/params", pp), compute)


def _active_expert_params(model: ModelSpec, expert_params: int) -> float:
    """The routed experts' parameters a token passes through: k of the n experts' share."""
    return expert_params * model.num_experts_per_token / model.num_experts if model.num_experts else expert_params


def _stage_attention_sums(
    model: ModelSpec, tp: int, pp: int, kv_element_bytes: int
) -> tuple[float, float, dict[int, list[float]]]:
    """KV bytes per cached token and attention FLOPs of the first stage's layers on a rank: (full
    layers' bytes, full layers' FLOPs, {window: [bytes, FLOPs]} of windowed layers)."""
    full = attn_full = 0.0
    windowed: dict[int, list[float]] = {}
    heads_rank = model.num_attention_heads / tp
    for layer, n in stage_layer_counts(model, pp)[0]:  # n layers of this shape
        cache = layer.cache
        if not cache.stores_per_token_kv:  # state and shared layers: nothing per token
            continue
        per_token = cache.bytes_per_token(kv_element_bytes, tp) * n
        # QK^T and AV: 2 FLOPs per multiply-add, two matmuls, per query head on the rank
        flops = 4.0 * heads_rank * cache.query_head_dim * n
        if cache.window is not None:
            slot = windowed.setdefault(cache.window, [0.0, 0.0])
            slot[0] += per_token
            slot[1] += flops
        else:
            full += per_token
            attn_full += flops
    return full, attn_full, windowed


def perf_inputs(model: ModelSpec, est: Estimate, gpu: GpuSku, weight_dtype: str = "auto") -> PerfInputs:
    """The per-rank quantities of the estimate's deployment on `gpu`."""
    if gpu.memory_bandwidth_gbps is None:
        raise SpecError(f"GPU {gpu.id} has no memory bandwidth in the catalog: cannot estimate speed")
    weights = rank_weight_terms(
        model, tp=est.tp, pp=est.pp, weight_dtype=weight_dtype, engine=est.engine,
        weights_bytes_per_gpu=est.weights_bytes_per_gpu, weight_format_name=est.weight_dtype, layout=est.layout,
    )
    attention_tp = est.layout.attention_tp if est.layout is not None else est.tp
    kv = rank_kv_terms(model, attention_tp=attention_tp, pp=est.pp, kv_element_bytes=estimate_kv_element_bytes(est))
    link = gpu.interconnect_gbps * GB if gpu.interconnect_gbps else math.inf
    notes: list[str] = []
    if (est.tp > 1 or est.pp > 1) and math.isinf(link):
        notes.append(f"{gpu.id} has no interconnect bandwidth in the catalog: TP/PP traffic not costed")
    return PerfInputs(
        dense_weight_bytes=weights.dense_weight_bytes,
        expert_weight_bytes=weights.expert_weight_bytes,
        num_experts=model.num_experts,
        experts_per_token=model.num_experts_per_token,
        active_params=weights.active_params,
        full_kv_bytes_per_token=kv.full_kv_bytes_per_token,
        windowed_kv=tuple((kv_bytes, w) for w, kv_bytes, _ in kv.windowed),
        state_bytes_per_sequence=float(est.state_bytes_per_sequence_per_gpu),
        attention_flops_per_cached_token=kv.attention_flops_per_cached_token,
        windowed_attention=tuple((f, w) for w, _, f in kv.windowed),
        hidden_size=model.hidden_size,
        layers_on_rank=weights.layers_on_rank,
        act_bytes=weights.act_bytes,
        tp=est.tp,
        pp=est.pp,
        bandwidth_bytes_per_s=gpu.memory_bandwidth_gbps * GB,
        flops_per_s=_peak_flops(gpu, est.weight_dtype),
        link_bytes_per_s=link,
        notes=tuple(notes),
        moe_layers_on_rank=weights.moe_layers_on_rank,
        ep=est.layout.token_exchange_ranks if est.layout is not None else 1,
        expert_token_ranks=est.layout.dp if est.layout is not None else 1,
    )


def estimate_kv_element_bytes(est: Estimate) -> int:
    """Bytes of one cached element of the estimate's KV dtype (2 where the name is not an element size)."""
    name = est.kv_dtype.lower()
    try:
        return element_bytes(name)
    except SpecError:
        return 2


def _minimum(a: Num, b: Num) -> Num:
    """min(a, b) for floats or expressions (`a - relu(a - b)`)."""
    diff = a - b
    return a - (diff + abs(diff)) / 2


def _maximum(a: Num, b: Num) -> Num:
    diff = a - b
    return b + (diff + abs(diff)) / 2


def expected_active_experts(num_experts: int, experts_per_token: int, tokens: Num) -> Num:
    """Distinct routed experts `tokens` tokens touch in expectation under uniform routing:
    E x (1 - (1 - k / E) ** tokens)."""
    if not num_experts:
        return 0.0
    miss = 1.0 - experts_per_token / num_experts
    return num_experts * (1.0 - miss**tokens)


def active_expert_share(num_experts: Num, experts_per_token: Num, tokens: Num) -> Num:
    """The share of routed experts `tokens` tokens touch: 1 - (1 - k / E) ** tokens (0 for dense models,
    whose expert bytes are 0 anyway: E is taken as at least 1 so the formula needs no branch)."""
    return 1.0 - (1.0 - experts_per_token / at_least(num_experts, 1)) ** tokens


def step_weight_bytes(p: PerfInputs, tokens: Num) -> Num:
    """Weight bytes one rank reads in a step of `tokens` new tokens (MoE: the experts they touch)."""
    return p.dense_weight_bytes + p.expert_weight_bytes * active_expert_share(
        p.num_experts, p.experts_per_token, tokens * p.expert_token_ranks
    )


def step_kv_bytes(p: PerfInputs, batch: Num, context_tokens: Num) -> Num:
    """KV and state bytes `batch` sequences of T cached tokens read (windowed layers at most their window)."""
    kv = p.full_kv_bytes_per_token * context_tokens
    for per_token, window in p.windowed_kv:
        kv = kv + per_token * _minimum(context_tokens, window)
    return batch * (kv + p.state_bytes_per_sequence)


def step_bytes(p: PerfInputs, tokens: Num, batch: Num, context_tokens: Num) -> Num:
    """Bytes one rank reads in a step of `tokens` new tokens over `batch` sequences of T cached tokens."""
    return step_weight_bytes(p, tokens) + step_kv_bytes(p, batch, context_tokens)


def step_gemm_flops(p: PerfInputs, tokens: Num) -> Num:
    """The linear layers' FLOPs of one rank for `tokens` new tokens: 2 x active parameters each."""
    return tokens * 2.0 * p.active_params


def step_attention_flops(p: PerfInputs, tokens: Num, context_tokens: Num) -> Num:
    """QK^T and AV FLOPs of one rank for `tokens` new tokens, each attending to `context_tokens` cached ones."""
    attention = p.attention_flops_per_cached_token * context_tokens
    for flops, window in p.windowed_attention:
        attention = attention + flops * _minimum(context_tokens, window)
    return tokens * attention


def step_flops(p: PerfInputs, tokens: Num, context_tokens: Num) -> Num:
    """FLOPs of one rank for `tokens` new tokens, each attending to `context_tokens` cached ones."""
    return step_gemm_flops(p, tokens) + step_attention_flops(p, tokens, context_tokens)


def allreduce_seconds(p: PerfInputs, tokens: Num, eff: PerfEfficiency) -> Num:
    """Two all-reduces per layer on the rank (attention and MLP outputs), ring algorithm: nothing at
    TP = 1 (the (TP - 1) / TP factor and the latency indicator vanish), and no bytes where the catalog
    has no link bandwidth (an infinite link)."""
    payload = tokens * p.hidden_size * p.act_bytes
    ring = 2.0 * (p.tp - 1) / p.tp * payload / p.link_bytes_per_s
    return 2 * p.layers_on_rank * (ring + eff.allreduce_latency_s * as_float(p.tp > 1))


def all_to_all_seconds(p: PerfInputs, tokens: Num, eff: PerfEfficiency) -> Num:
    """Expert parallel's dispatch and combine in every MoE layer on the rank: each of `tokens` tokens sends its
    hidden state to its k experts' ranks and gets their outputs back, (EP - 1) / EP of them on other ranks, over
    the interconnect, plus a collective's latency each way; nothing without EP (the factor and indicator vanish)."""
    payload = tokens * p.experts_per_token * p.hidden_size * p.act_bytes * (p.ep - 1) / p.ep
    return 2 * p.moe_layers_on_rank * (payload / p.link_bytes_per_s + eff.allreduce_latency_s * as_float(p.ep > 1))


def step_seconds(
    p: PerfInputs,
    tokens: Num,
    batch: Num,
    context_tokens: Num,
    eff: PerfEfficiency,
    attention_context_tokens: Num | None = None,
) -> Num:
    """One engine step on one stage: the linear layers' roofline, then attention's, plus communication
    plus the engine's fixed cost.

    `context_tokens` is the mean cached context per sequence (the KV the step reads);
    `attention_context_tokens` the mean context per new token (what the attention FLOPs follow),
    the same unless given: a mixed step (a prefill chunk beside decodes) has them apart."""
    attended = context_tokens if attention_context_tokens is None else attention_context_tokens
    bandwidth = eff.memory_bandwidth * p.bandwidth_bytes_per_s
    peak = eff.compute * p.flops_per_s
    # each operation on its own roofline, one after the other: the linear layers (weights read or GEMM
    # FLOPs), then attention (KV read or its FLOPs)
    linear = _maximum(step_weight_bytes(p, tokens) / bandwidth, step_gemm_flops(p, tokens) / peak)
    attention = _maximum(
        step_kv_bytes(p, batch, context_tokens) / bandwidth, step_attention_flops(p, tokens, attended) / peak
    )
    communication = allreduce_seconds(p, tokens, eff) + all_to_all_seconds(p, tokens, eff)
    return linear + attention + communication + eff.step_overhead_s


def pipeline_seconds(p: PerfInputs, stage_seconds: Num, tokens: Num) -> Num:
    """A token passes every stage; activations hop between stages over the interconnect."""
    hop = tokens * p.hidden_size * p.act_bytes / p.link_bytes_per_s
    return p.pp * stage_seconds + (p.pp - 1) * hop


def replica_step_seconds(
    p: PerfInputs,
    tokens: int,
    batch: int,
    context_tokens: float,
    eff: PerfEfficiency,
    attention_context_tokens: float | None = None,
) -> float:
    """One scheduler step of the replica, every pipeline stage passed (the serving simulation's clock)."""
    stage = step_seconds(p, tokens, batch, context_tokens, eff, attention_context_tokens)
    return float(pipeline_seconds(p, stage, tokens))


def tpot_seconds(p: PerfInputs, batch: Num, context_tokens: Num, eff: PerfEfficiency = DEFAULT_EFFICIENCY) -> Num:
    """Time per output token (= ITL) at steady state: a decode step of `batch` sequences of T tokens."""
    return pipeline_seconds(p, step_seconds(p, batch, batch, context_tokens, eff), batch)


def output_tokens_per_second(
    p: PerfInputs, batch: Num, context_tokens: Num, eff: PerfEfficiency = DEFAULT_EFFICIENCY
) -> Num:
    """Decode throughput of one replica with `batch` sequences in flight (PP keeps PP batches moving)."""
    per_step = tpot_seconds(p, batch, context_tokens, eff)
    return batch * p.pp / per_step


def serving_tokens_per_second(decode_tokens_per_s: Num, concurrency: Num, output_tokens: Num, prefill_s: Num) -> Num:
    """Output tokens/s of a closed loop of `concurrency` requests (what `vllm bench serve --max-concurrency`
    measures), not of the decode steps alone: a generation of every running request is its output tokens' decode
    steps plus each request's prefill, whose chunks are steps of their own beside the others (`prefill_seconds`).
    The fit's observations are this sum (evaluation/perf_cv.py `observations_for`: a served row's throughput is
    `o_len` decode steps plus `running` prefills beside the batch), so the factors are fitted on what this prints."""
    generated = concurrency * output_tokens
    return generated / (generated / decode_tokens_per_s + concurrency * prefill_s)


def prefill_chunks(prompt_tokens: Num, chunk_tokens: Num, running_batch: Num = 0, cached_tokens: Num = 0) -> Num:
    """Chunks a prompt's uncached tokens take beside `running_batch` decodes, which take one budget token each."""
    return cdiv(prompt_tokens - cached_tokens, at_least(chunk_tokens - running_batch, 1))


def prefill_seconds(
    p: PerfInputs,
    prompt_tokens: Num,
    chunk_tokens: Num,
    running_batch: Num = 0,
    context_tokens: Num = 0,
    eff: PerfEfficiency = DEFAULT_EFFICIENCY,
    cached_tokens: Num = 0,
) -> Num:
    """Time to prefill one prompt in chunks of `chunk_tokens` (chunked prefill at max_num_batched_tokens),
    each chunk sharing its step with `running_batch` decoding sequences of `context_tokens` tokens (a chunk
    step lasts at least their decode step). The first `cached_tokens` come from the prefix cache: only the rest
    is computed, attending to them. The computed tokens go in n = ceil(new / (chunk - running)) equal chunks
    at the prompt's mean context (cached + new / 2, the mean of the chunks' own), so the form reads the same
    on floats and column expressions."""
    new = prompt_tokens - cached_tokens
    chunks = prefill_chunks(prompt_tokens, chunk_tokens, running_batch, cached_tokens)
    per_chunk = new / at_least(chunks, 1)
    step = step_seconds(p, per_chunk, 1, cached_tokens + new / 2, eff)
    decode = step_seconds(p, running_batch, running_batch, context_tokens, eff) - eff.step_overhead_s
    step = choose(running_batch > 0, _maximum(step, decode), step)
    return pipeline_seconds(p, chunks * step, new)


@dataclass(frozen=True, slots=True)
class Performance:
    """Speed of one deployment at `concurrency` requests of `input_tokens` + `output_tokens`."""

    concurrency: int
    input_tokens: int
    output_tokens: int
    tpot_ms: float  # time per output token (ITL) at mid-generation context
    ttft_ms: float  # steady-state time to first token (prefill sharing steps with the running batch)
    output_tokens_per_second: float  # per replica, a closed loop's (`serving_tokens_per_second`)
    decode_step_bytes: float
    decode_step_flops: float
    memory_bound: bool
    efficiency: PerfEfficiency
    decode_weight_bytes: float = 0.0  # of decode_step_bytes: weights (the experts the step touches)
    decode_memory_ms: float = 0.0  # bytes / achievable bandwidth
    decode_compute_ms: float = 0.0  # FLOPs / achievable compute
    decode_comm_ms: float = 0.0  # TP all-reduces and expert parallel's all-to-all
    prefill_chunks: int = 0
    prefill_ms: float = 0.0  # one prompt's prefill steps beside the running batch (TTFT less the request overhead)
    inputs: PerfInputs | None = None
    notes: tuple[str, ...] = ()
    speculation: SpeculativeSpeed | None = None  # how speculative decoding changed TPOT (`features.speculative_speed`)

    def contract(self) -> dict[str, object]:
        return {
            "concurrency": self.concurrency,
            "input_len": self.input_tokens,
            "output_len": self.output_tokens,
            "output_tokens_per_second": round(self.output_tokens_per_second, 1),
            "tpot_ms": round(self.tpot_ms, 3),
            "ttft_ms": round(self.ttft_ms, 3),
            "decode_memory_bound": self.memory_bound,
        }


def performance(
    model: ModelSpec,
    est: Estimate,
    gpu: GpuSku,
    *,
    concurrency: int,
    input_tokens: int,
    output_tokens: int,
    chunk_tokens: int,
    weight_dtype: str = "auto",
    eff: PerfEfficiency | None = None,
    inputs: PerfInputs | None = None,
) -> Performance:
    """TPOT, TTFT and throughput at steady state: `concurrency` sequences decoding at the mean context
    of a request (prompt + half the output), prompts prefilled in chunks beside them. `inputs` is
    `perf_inputs(model, est, gpu, weight_dtype)` when a caller already holds it (a search over B)."""
    if concurrency < 1 or input_tokens < 1 or output_tokens < 1:
        raise SpecError("concurrency, input and output lengths must be positive")
    eff = eff or efficiency_for(est.engine, gpu)
    p = inputs if inputs is not None else perf_inputs(model, est, gpu, weight_dtype)
    context = input_tokens + output_tokens // 2
    tpot = float(tpot_seconds(p, concurrency, context, eff))
    cached = est.prefix_caching.hit_tokens(prefix_cache_rule(Engine(est.engine)), input_tokens, est.block_size)
    prefill = float(prefill_seconds(p, input_tokens, chunk_tokens, concurrency - 1, context, eff, cached))
    decoding = float(output_tokens_per_second(p, concurrency, context, eff))
    throughput = float(serving_tokens_per_second(decoding, concurrency, output_tokens, prefill))
    ttft = prefill + eff.request_overhead_s
    decode_bytes = float(step_bytes(p, concurrency, concurrency, context))
    decode_flops = float(step_flops(p, concurrency, context))
    memory = decode_bytes / (eff.memory_bandwidth * p.bandwidth_bytes_per_s)
    compute = decode_flops / (eff.compute * p.flops_per_s)
    weights = float(step_bytes(p, concurrency, 0, context))
    return Performance(
        concurrency=concurrency,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        tpot_ms=tpot * 1e3,
        ttft_ms=ttft * 1e3,
        output_tokens_per_second=throughput,
        decode_step_bytes=decode_bytes,
        decode_step_flops=decode_flops,
        memory_bound=memory >= compute,
        efficiency=eff,
        decode_weight_bytes=weights,
        decode_memory_ms=memory * 1e3,
        decode_compute_ms=compute * 1e3,
        decode_comm_ms=float(allreduce_seconds(p, concurrency, eff) + all_to_all_seconds(p, concurrency, eff)) * 1e3,
        prefill_chunks=prefill_chunks(input_tokens, chunk_tokens, concurrency - 1, cached),
        prefill_ms=prefill * 1e3,
        inputs=p,
        notes=p.notes,
    )


def assumption_speed_note(assumed: str, alternative: str, stated: Performance, other: Performance) -> str | None:
    """An unstated input of the speed figures named where the plausible alternative moves TPOT or output tokens/s by
    more than `ASSUMPTION_SHARE`, as the memory estimate names its assumptions: an unstated KV dtype moves whole
    benchmark tables (fp8 halves the KV bytes a decode step reads and holds twice the sequences)."""
    if stated.tpot_ms <= 0 or stated.output_tokens_per_second <= 0:
        return None
    tpot = other.tpot_ms / stated.tpot_ms - 1
    throughput = other.output_tokens_per_second / stated.output_tokens_per_second - 1
    if max(abs(tpot), abs(throughput)) <= ASSUMPTION_SHARE:
        return None
    return (
        f"assumed {assumed} for the speed figures: {alternative} gives TPOT {other.tpot_ms:,.1f} ms ({tpot:+.0%}) and "
        f"{other.output_tokens_per_second:,.0f} output tokens/s ({throughput:+.0%}), against {stated.tpot_ms:,.1f} ms "
        f"and {stated.output_tokens_per_second:,.0f}"
    )


class Latencies(Protocol):
    """What a latency target is checked on: a steady-state `Performance`, or a simulated percentile."""

    @property
    def tpot_ms(self) -> float: ...

    @property
    def ttft_ms(self) -> float: ...


L = TypeVar("L", bound=Latencies)


class LatencyTarget(StrEnum):
    """Which latency a target bounds (the `binding` a latency-bound batch names)."""

    TPOT = "tpot"
    TTFT = "ttft"


@dataclass(frozen=True, slots=True)
class LatencyTargets:
    """Steady-state latency targets, milliseconds (None: no target)."""

    tpot_ms: float | None = None
    ttft_ms: float | None = None

    @property
    def any(self) -> bool:
        return self.tpot_ms is not None or self.ttft_ms is not None

    def target_ms(self, which: LatencyTarget) -> float | None:
        return self.tpot_ms if which is LatencyTarget.TPOT else self.ttft_ms

    def missed(self, perf: Latencies) -> LatencyTarget | None:
        """The first target `perf` misses (TPOT before TTFT), or None when it meets them all."""
        if self.tpot_ms is not None and perf.tpot_ms > self.tpot_ms:
            return LatencyTarget.TPOT
        if self.ttft_ms is not None and perf.ttft_ms > self.ttft_ms:
            return LatencyTarget.TTFT
        return None


@dataclass(frozen=True, slots=True)
class BatchWithin(Generic[L]):
    """The largest batch meeting latency targets: `batch` 0 when one sequence misses them; `binding` the
    target the next batch misses (None: `max_batch` itself meets them); `perf` the latencies at `batch`."""

    batch: int
    binding: LatencyTarget | None
    perf: L | None


def largest_batch_meeting(speed: Callable[[int], L], max_batch: int, targets: LatencyTargets) -> BatchWithin[L]:
    """Bisect B in [1, max_batch] for the largest whose `speed(B)` meets `targets`. TPOT and TTFT both grow
    with B (more KV read per step, more decode tokens sharing a prefill step, in a closed loop more
    requests ahead in the queue), so the batches that meet them are a prefix of 1..max_batch."""
    at_max = speed(max_batch)
    missed = targets.missed(at_max)
    if missed is None:
        return BatchWithin(max_batch, None, at_max)
    one = speed(1) if max_batch > 1 else at_max
    if targets.missed(one) is not None:
        return BatchWithin(0, targets.missed(one), None)
    lo, hi, at_lo = 1, max_batch, one  # lo meets the targets, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        at_mid = speed(mid)
        if targets.missed(at_mid) is None:
            lo, at_lo = mid, at_mid
        else:
            hi, missed = mid, targets.missed(at_mid)
    return BatchWithin(lo, missed, at_lo)


def speed_at(
    model: ModelSpec,
    est: Estimate,
    gpu: GpuSku,
    *,
    input_tokens: int,
    output_tokens: int,
    weight_dtype: str = "auto",
    eff: PerfEfficiency | None = None,
) -> Callable[[int], Performance]:
    """`performance` of requests of these lengths as a function of B, for a search over B: the layer walk
    (`perf_inputs`) done once; prompts prefilled in chunks of the engine's max_num_batched_tokens."""
    inputs = perf_inputs(model, est, gpu, weight_dtype)
    chunk = est.pool.max_num_batched_tokens or input_tokens

    def speed(batch: int) -> Performance:
        return performance(
            model,
            est,
            gpu,
            concurrency=batch,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            chunk_tokens=chunk,
            weight_dtype=weight_dtype,
            eff=eff,
            inputs=inputs,
        )

    return speed


def largest_batch_within(
    p: PerfInputs, context_tokens: int, max_batch: int, tpot_target_s: float, eff: PerfEfficiency = DEFAULT_EFFICIENCY
) -> int:
    """The largest B <= max_batch whose TPOT meets the target (TPOT grows with B); 0 when B = 1 misses it."""
    if max_batch < 1 or float(tpot_seconds(p, 1, context_tokens, eff)) > tpot_target_s:
        return 0
    lo, hi = 1, max_batch
    if float(tpot_seconds(p, hi, context_tokens, eff)) <= tpot_target_s:
        return hi
    while hi - lo > 1:  # lo meets, hi misses
        mid = (lo + hi) // 2
        if float(tpot_seconds(p, mid, context_tokens, eff)) <= tpot_target_s:
            lo = mid
        else:
            hi = mid
    return lo


def ttft_at_rate_seconds(prefill_s: float, decode_s_per_request: float, requests_per_s: float) -> float:
    """TTFT under a Poisson arrival rate, M/M/1 on the replica: service = prefill + a request's share of
    decode time; waiting = rho / (1 - rho) x service; infinite past saturation."""
    service = prefill_s + decode_s_per_request
    rho = requests_per_s * service
    if rho >= 1:
        return float("inf")
    return prefill_s + rho / (1 - rho) * service
