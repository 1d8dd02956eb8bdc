"""vLLM's non-KV memory, modelled as the profiling run allocates it, each buffer named.

What vLLM measures (vLLM 0.33.0, `v1/worker/gpu_worker.py` determine_available_memory with
`utils/mem_utils.py` memory_profiling): non-KV = weights + what the profiling run leaves allocated
(total consumed since the engine was created: weights, persistent workspaces, non-torch memory) + the
transient headroom of its torch peak, minus nothing else; then, with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
(on by default), the CUDA-graph estimate of `profile_cudagraph_memory`. Older V1 releases took the torch
peak increase during profiling (weights and persistent buffers included once, the same total).

The profiling run (`gpu_model_runner.profile_run`, V2 runner `v1/worker/gpu/model_runner.py`) has two
phases that peak at different times, so the activation peak is their MAX, plus whatever persists:

- forward (`_dummy_run(max_num_tokens)`): one decoder layer's tensors at a time over T =
  max_num_batched_tokens tokens: the hidden stream (residual, input, normed input, projection output),
  then the largest sublayer: attention (QKV projection and attention output, per TP rank), dense MLP
  (gate/up projection 2I/TP and the SiLU-and-mul output I/TP), MoE (router logits T x E in fp32, top-k ids
  and weights, the shared experts' MLP);
- sampler (`_dummy_sampler_run`): S = min(max_num_seqs, T) rows of logits over the whole vocabulary on
  every rank (gathered, not split by TP), in the model dtype, then what the release's sampler keeps alive
  at its peak, a RULE read off each release's code (`ec.VLLM_SAMPLER_RULES`, `sampler_units`; derivations
  in evaluation/data/README-sampler.md): up to 0.16 the torch sort's peak, 9 fp32-sized copies of the
  logits at 128+ rows (the fp32 cast, the sorted values and int64 indices, and the CUDA sort's own iota
  indices and cub buffers; 6.5 tensors stay alive afterwards: masks, softmax, scatter), 3 from 0.17 (the
  Triton top-k/top-p works in place; cast, softmax, exponential draws) plus its cached per-program buffer
  of min(next_pow2(min(SMs, S)), SMs) rows, 3 with FlashInfer's sampler where the release turns it on,
  and on the V2 model runner (the default by release and model: `runs_v2_model_runner`) a pass with the
  default parameters (one fp32 copy on 0.22-0.25, none on 0.26-0.32), on 0.33 then a warmup-param pass:
  3 (FlashInfer) or 1 + the buffer; the penalties' per-request bins (max_num_seqs x vocab int32) held from load;
- persistent (0.17 and later here): the fused-MoE workspaces (0.33 `fused_moe/modular_kernel.py`
  _allocate_buffers through `v1/worker/workspace.py` WorkspaceManager, which keeps the largest request,
  M unchunked): the Triton experts' `workspace_shapes` (experts/triton_moe.py) are workspace13 =
  M x top-k x max(N/2, K) (or the M x K output when larger) and workspace2 = M x top-k x max(N, K),
  N = 2 x expert intermediate / TP, K = hidden, M = T; MXFP4 experts on the OAI Triton kernels
  (experts/gpt_oss_triton_kernels_moe.py) need only the M x K output and M x top-k x N/2.
  Before (read in the 0.11.0 wheel: `fused_moe/layer.py` takes the modular kernel only with an
  all-to-all prepare/finalize, else `fused_moe.fused_experts_impl`): the intermediate caches are
  allocated per call and freed, so they are a forward-phase sublayer: cache13 = M x top-k x max(N, K)
  and cache2 = M x top-k x N/2, M = min(T, VLLM_FUSED_MOE_CHUNK_SIZE = 32768). The release where the
  workspace manager took over (between 0.11 and 0.19) is not pinned: the 0.19 logs show it held.
- data parallel (`-dp D`, D > 1, with or without --enable-expert-parallel; `RankLayout.moe_dispatch_ranks`):
  the MoE layers gather every DP rank's tokens before the experts, and in the profiling run each of the D
  ranks runs the same dummy batch of T tokens (`_dummy_run` -> `DPMetadata.num_tokens_across_dp`, all-reduced
  over the DP group), so every MoE term above runs over G = D x T tokens instead of T: the router logits and
  top-k, the intermediate caches (M = min(G, 32768)) or the workspaces (M = G), plus the gathered hidden states
  themselves, G x hidden in the model dtype (0.33 gathers the quantized input: no more). 0.10 (the 0.10.0 and 0.10.1 wheels, default VLLM_ALL2ALL_BACKEND
  "naive"): `FusedMoE.forward_impl` (do_naive_dispatch_combine) -> `NaiveAll2AllManager.dispatch`, whose
  `naive_multicast` allocates cu_tokens_across_dp_cpu[-1] x hidden for the hidden states and for the router
  logits, then `fused_experts_impl` over all of them; 0.11 (default "allgather_reducescatter"):
  `AgRsAll2AllManager.dispatch`, all_gatherv of the same two tensors; 0.33: the modular kernel's
  `MoEPrepareAndFinalizeNaiveDPEPModular.prepare` gathers the (quantized) input and the top-k, and
  `FusedMoEModularKernel._allocate_buffers` sizes the workspaces at M_full = the gathered tokens. The shared
  experts' MLP runs on the rank's own T tokens. `OverheadInputs.moe_dp_ranks` says D: `estimate` passes the
  layout's, and the grid computes its overhead rows per DP size of its layouts.

Non-torch memory: a constant at TP = 1 and another at TP > 1 on an NVLink4/5 switch fabric (NCCL's
communicators and the NVLink all-reduce workspaces; `GpuSku.nvlink_multicast`), plus, where the release takes its
memory baseline before the NCCL communicators exist (`VllmRelease.baseline_before_nccl`: V0, V1 up to 0.10), NCCL's
NVLS buffers above 2 ranks on such a board (`nvls_buffer_bytes`; from 0.11 the baseline follows them: 0.19.0 on
H100 prints 2.07 GiB of non-torch memory at TP 2 and 2.13 at TP 4), which a DP > 1 rank at TP 1 takes
too (distributed/parallel_state.py `initialize_model_parallel`, read in 0.10.1 and 0.33: the DP group of dp ranks
gets a `CudaCommunicator` with its own pynccl communicator, as the TP group does; the one figure stands for one or
more such communicators, as the fitted TP > 1 rows had: 0.33 also gives MoE models' EP group of dp x tp ranks one,
0.10.1 none); PCIe cards and NVLink
bridges keep the TP = 1 figure (public logs: 0.20-0.25 GiB at TP 2 on RTX 3090/4090 and L4, 2.07 GiB on
H100 SXM). CUDA graphs, where the release deducts the estimate (0.21+): the first capture plus a charge
per further graph, the graphs counted from the capture sizes vLLM derives from max_num_seqs and
max_num_batched_tokens (`cudagraph_capture_counts`). At TP > 1 the charge per graph depends on the
all-reduce the graphs capture: vLLM's custom all-reduce where it turns on (`custom_all_reduce_on`, the
rule of `CustomAllreduce.__init__`), else NCCL's kernels, which hold far more per graph.

The coefficients that are not read off the source (`ec.VllmProfilingCoefficients`) are few, shared by
every family, and each says what it stands for. Facts carried over from vLLM, no vLLM code.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import NamedTuple, TypeVar

from capacity import engine_constants as ec
from capacity.engines.vllm.multimodal import encoder_profile, item_tokens
from capacity.memo import per_object
from capacity.numeric import cdiv
from capacity.overhead import Overhead, OverheadInputs
from capacity.parallel import pp_partition
from capacity.spec import ModelSpec, VisionTower

FP32_BYTES = 4
INDEX_BYTES = 4  # top-k ids (int32) and weights (fp32) per routed slot
MOE_CHUNK_TOKENS = 32768  # VLLM_FUSED_MOE_CHUNK_SIZE default (0.11 envs.py): fused_experts_impl's M chunk
# CustomAllreduce._SUPPORTED_WORLD_SIZES (distributed/device_communicators/custom_all_reduce.py): [2, 4, 6, 8]
# read in the 0.20.0, 0.21.0, 0.24.0 and 0.26.0 wheels; 0.29.0 and 0.33.0 add 16, which needs a 16-GPU node
# or a multi-node MNNVL group (Blackwell), neither planned here (TP <= GPUs per node)
CUSTOM_ALL_REDUCE_WORLD_SIZES = (2, 4, 6, 8, 16)


def custom_all_reduce_on(tp: int, peer_link_gpus: int | None) -> bool:
    """Whether vLLM's custom all-reduce runs for a TP group (else the graphs capture NCCL's all-reduce):
    vLLM 0.20-0.33 `CustomAllreduce.__init__` returns disabled unless the world size is one of
    _SUPPORTED_WORLD_SIZES, the group is on one node, more than 2 GPUs are fully connected by NVLink
    (`platforms/cuda.py` is_fully_connected: NVML P2P status over NVLink for every pair; ROCm: XGMI) and
    the P2P test passes (`_can_p2p` -> all_reduce_utils.gpu_p2p_access_check). `peer_link_gpus` is
    `GpuSku.peer_link_gpus` (PCIe peer access assumed off; None, an unknown GPU: a switch fabric, as
    `nvlink_multicast`'s default); --disable-custom-all-reduce and a failed P2P test reach it as 1
    (`DeploymentSpec.all_reduce_peer_gpus`)."""
    if tp not in CUSTOM_ALL_REDUCE_WORLD_SIZES:
        return False
    return peer_link_gpus is None or tp <= peer_link_gpus


@dataclass(frozen=True, slots=True)
class ProfilingBuffers:
    """The byte sizes of the named buffers of one rank's profiling run (before any coefficient)."""

    hidden_stream_bytes: int  # live hidden-sized tensors of the forward over T tokens
    attention_bytes: int  # QKV projection output + attention output
    dense_mlp_bytes: int  # gate/up output + SiLU-and-mul output
    moe_transient_bytes: int  # router logits, top-k ids/weights, shared experts' MLP
    moe_workspace_bytes: int  # fused-MoE workspace13 + workspace2 of the modular kernel (held)
    moe_legacy_bytes: int  # fused_experts_impl's intermediate caches (per call, freed)
    logits_bytes: int  # S x vocab in the model dtype
    logits_fp32_bytes: int  # one fp32 copy of them (the unit of the sampler rule)
    sampler_units: float  # fp32 logits-sized tensors alive at the sampler's peak (ec.VLLM_SAMPLER_RULES)
    sampler_buffer_bytes: int  # the Triton top-k/top-p per-program buffer (cached, so held from then on)
    sampler_bins_bytes: int  # V2 runner: the penalties' per-request bins, allocated at load (persistent)
    graph_layers: int  # decoder layers on the most loaded rank
    graph_count: int  # PIECEWISE + FULL CUDA graphs vLLM captures (the CUDA-graph estimate's scale)
    tp: int
    nvlink_multicast: bool = True  # GpuSku.nvlink_multicast: the TP > 1 non-torch term applies
    custom_all_reduce: bool = True  # custom_all_reduce_on(tp, GpuSku.peer_link_gpus): which TP > 1 graph charge
    sampler_rule: str = ""  # the first release of the sampler rule applied ("" before V1: no sampler phase)
    encoder_forward_bytes: int = 0  # multimodal: the dummy items' encoder pass (`multimodal.encoder_profile`)
    encoder_outputs_bytes: int = 0  # multimodal: their embeddings, held through the decoder's dummy run
    moe_dispatch_bytes: int = 0  # DP > 1: the hidden states the MoE layer gathers from every DP rank
    dp_ranks: int = 1  # vLLM's data-parallel size: > 1, the DP group's NCCL communicator (the multi-GPU non-torch)

    @property
    def moe_dp_ranks(self) -> int:
        """DP ranks whose tokens the MoE terms run over: the DP size where an MoE layer gathers, else 1."""
        return self.dp_ranks if self.moe_dispatch_bytes else 1

    @property
    def sampler_phase_bytes(self) -> int:
        """The sampler dummy run's peak: model-dtype logits + the rule's fp32 copies + the Triton buffer."""
        if not self.sampler_rule:
            return 0
        return self.logits_bytes + round(self.sampler_units * self.logits_fp32_bytes) + self.sampler_buffer_bytes

    def with_links(self, nvlink_multicast: bool, custom_all_reduce: bool) -> ProfilingBuffers:
        """These buffers on a GPU whose links say otherwise (what `overhead_from_buffers` reads of them). Built from
        the fields in order: `dataclasses.replace` costs twice as much, and the grid asks this per kind of link."""
        if self.nvlink_multicast == nvlink_multicast and self.custom_all_reduce == custom_all_reduce:
            return self
        values = [getattr(self, name) for name in _BUFFER_FIELDS]
        values[_MULTICAST_AT], values[_CUSTOM_AR_AT] = nvlink_multicast, custom_all_reduce
        return ProfilingBuffers(*values)

    def forward_layer_bytes(self, moe_workspace_held: bool) -> int:
        """The largest sublayer of a decoder layer plus the hidden stream, before the coefficient (the
        MoE sublayer holds its intermediate caches itself when no workspace manager keeps them)."""
        moe = self.moe_transient_bytes + self.moe_dispatch_bytes + (0 if moe_workspace_held else self.moe_legacy_bytes)
        return self.hidden_stream_bytes + max(self.attention_bytes, self.dense_mlp_bytes, moe)


_BUFFER_FIELDS = tuple(f.name for f in fields(ProfilingBuffers))
_MULTICAST_AT, _CUSTOM_AR_AT = _BUFFER_FIELDS.index("nvlink_multicast"), _BUFFER_FIELDS.index("custom_all_reduce")
_T = TypeVar("_T")


def _memo(model: ModelSpec, key: tuple[Hashable, ...], compute: Callable[[], _T]) -> _T:
    """Results per model object and arguments (`capacity.memo`)."""
    return per_object(model, ("vllm_overhead", *key), compute)


def layer_intermediates(model: ModelSpec) -> tuple[int, int, int]:
    """(widest dense MLP intermediate, widest shared-expert intermediate, expert intermediate), read from
    the per-layer parameter counts (gate, up and down: 3 x hidden x intermediate)."""
    return _memo(model, ("intermediates",), lambda: _read_intermediates(model))


def _read_intermediates(model: ModelSpec) -> tuple[int, int, int]:
    h = max(model.hidden_size, 1)
    dense = shared = expert = 0
    for p in model.layer_params:
        if p.experts and model.num_experts:
            expert = max(expert, gated_intermediate(p.experts // model.num_experts, h)[0])
            shared = max(shared, gated_intermediate(p.mlp, h)[0])
        elif p.mlp:
            dense = max(dense, gated_intermediate(p.mlp, h)[0])
    return dense, shared, expert


def gated_intermediate(params: int, hidden: int) -> tuple[int, bool]:
    """(I, biased) from one gated MLP's parameters: 3 x H x I, or with biases (gpt-oss) 3 x H x I + 2 x I + H."""
    with_bias, rest = divmod(params - hidden, 3 * hidden + 2)
    if rest == 0 and with_bias > 0:
        return with_bias, True
    return params // (3 * hidden), False


def sampler_units(
    rule: ec.VllmSamplerRule,
    rows: int,
    sm_count: int | None = None,
    flashinfer: bool | None = None,
    model_dtype_bytes: int = 2,
) -> tuple[float, int]:
    """(fp32 logits-sized copies, Triton buffer rows) the release's sampler dummy run keeps alive at its
    peak over `rows` requests; `flashinfer` None takes the release's default for VLLM_USE_FLASHINFER_SAMPLER;
    `model_dtype_bytes` sizes what a release that sorts the model-dtype logits keeps in that dtype."""
    if rule.default_pass_only:  # default parameters: no top-k/top-p, only what the logits processing keeps
        return rule.native_units, 0
    if rule.triton_min_rows is None or rows < rule.triton_min_rows:  # the torch sort, with its CUDA scratch
        model_units = model_dtype_bytes / FP32_BYTES
        keys = model_units if rule.sorts_model_dtype else 1.0
        no_copy = rule.fp32_cast_by_to and model_dtype_bytes == FP32_BYTES  # `.to(torch.float)` returns self
        tensors = rule.native_units if rule.triton_min_rows is None else rule.small_batch_units
        tensors += rule.native_model_dtype_tensors * model_units - (1.0 if no_copy else 0.0)
        cast = not rule.sorts_model_dtype and not no_copy
        sort = ec.torch_sort_live_units(keys, cast=cast) + ec.torch_sort_scratch_units(rows, keys)
        native = (max(tensors, sort), 0)
    else:
        sms = sm_count or ec.VLLM_ASSUMED_SM_COUNT
        programs = min(sms, rows)  # topk_topp_triton.apply_top_k_top_p_triton: NUM_PROGRAMS = min(num_sm, batch)
        native = (rule.native_units, min(1 << (programs - 1).bit_length(), sms))
    if not (rule.flashinfer_default if flashinfer is None else flashinfer):
        return native
    fused = (rule.flashinfer_units, 0)
    if not rule.warms_native:
        return fused
    return max(fused, native, key=lambda u: u[0] * rows + u[1])  # both calls run: the larger peak


def profiling_buffers(
    model: ModelSpec,
    tp: int,
    pp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    act_bytes: int,
    nvlink_multicast: bool = True,
    version: str = ec.VLLM_DEFAULT_VERSION,
    sm_count: int | None = None,
    flashinfer_sampler: bool | None = None,
    peer_link_gpus: int | None = None,
    moe_dp_ranks: int = 1,
) -> ProfilingBuffers:
    """Each buffer of the profiling run on one rank, in bytes (`version` picks the sampler rule; `moe_dp_ranks`,
    vLLM's DP size, the ranks whose tokens each MoE layer gathers)."""
    # what the GPU's links move (two flags) is set on the buffers of the other inputs, computed once
    inputs = _BufferInputs(
        tp, pp, max_num_batched_tokens, max_num_seqs, act_bytes, version, sm_count, flashinfer_sampler, moe_dp_ranks
    )
    buffers = _memo(model, ("buffers", inputs), lambda: _link_free_buffers(model, inputs))
    return buffers.with_links(nvlink_multicast, custom_all_reduce_on(tp, peer_link_gpus))


class _BufferInputs(NamedTuple):
    """What the profiling buffers depend on besides the model (the link flags aside): the memo key."""

    tp: int
    pp: int
    max_num_batched_tokens: int
    max_num_seqs: int
    act_bytes: int
    version: str
    sm_count: int | None
    flashinfer_sampler: bool | None
    moe_dp_ranks: int


def _link_free_buffers(model: ModelSpec, inputs: _BufferInputs) -> ProfilingBuffers:
    """`profiling_buffers` with the link flags at their defaults (multicast, custom all-reduce on)."""
    tp, pp, max_num_batched_tokens, max_num_seqs, act_bytes, version, sm_count, flashinfer_sampler, dp = inputs
    t = max(max_num_batched_tokens, 1)
    dp = max(dp, 1)
    g = dp * t  # tokens each MoE layer runs over: every DP rank's dummy batch, gathered (module docstring)
    s = min(max(max_num_seqs, 1), t)
    b = act_bytes
    dense_i, shared_i, expert_i = layer_intermediates(model)
    hidden = ec.VLLM_LIVE_HIDDEN_TENSORS * t * model.hidden_size * b
    q = model.num_attention_heads * model.head_dim
    kv = 2 * model.num_kv_heads * model.head_dim
    attention = t * (cdiv(q + kv, tp) + cdiv(q, tp)) * b
    dense = t * 3 * cdiv(dense_i, tp) * b  # gate/up (2I/TP) + SiLU-and-mul (I/TP)
    moe_transient = moe_workspace = moe_legacy = moe_dispatch = 0
    if model.num_experts and expert_i:
        k = max(model.num_experts_per_token, 1)
        # router logits and top-k over the gathered tokens; the shared experts on the rank's own
        moe_transient = g * model.num_experts * FP32_BYTES + g * k * 2 * INDEX_BYTES + t * 3 * cdiv(shared_i, tp) * b
        moe_dispatch = g * model.hidden_size * b if dp > 1 else 0  # the gathered hidden states (dispatch)
        n = 2 * cdiv(expert_i, tp)  # w13 output per routed slot
        hidden_k = model.hidden_size
        quant = model.quantization
        m = min(g, MOE_CHUNK_TOKENS)
        if quant is not None and quant.method == "mxfp4":  # gpt-oss's MXFP4 experts on the OAI Triton kernels
            ws13, ws2 = g * hidden_k, g * k * (n // 2)
            cache13, cache2 = m * hidden_k, m * k * (n // 2)
        else:
            ws13, ws2 = max(g * k * max(n // 2, hidden_k), g * hidden_k), g * k * max(n, hidden_k)
            cache13, cache2 = m * k * max(n, hidden_k), m * k * (n // 2)
        moe_workspace, moe_legacy = (ws13 + ws2) * b, (cache13 + cache2) * b
    logits = s * model.vocab_size
    rule = ec.vllm_sampler_rule(version, runs_v2_model_runner(model, version))
    units, buffer_rows, bins = 0.0, 0, 0
    if rule is not None:
        units, buffer_rows = sampler_units(rule, s, sm_count, flashinfer_sampler, b)
        if rule.penalty_bins:  # output_bin_counts + prompt_bin_mask, max_num_reqs rows of int32
            seqs = max(max_num_seqs, 1)
            bins = seqs * model.vocab_size * 4 + seqs * cdiv(model.vocab_size, 32) * 4
    return ProfilingBuffers(
        hidden_stream_bytes=hidden,
        attention_bytes=attention,
        dense_mlp_bytes=dense,
        moe_transient_bytes=moe_transient,
        moe_workspace_bytes=moe_workspace,
        moe_legacy_bytes=moe_legacy,
        logits_bytes=logits * b,
        logits_fp32_bytes=logits * FP32_BYTES,
        sampler_units=units,
        sampler_buffer_bytes=buffer_rows * model.vocab_size * FP32_BYTES,
        sampler_bins_bytes=bins,
        graph_layers=max(pp_partition(model.num_layers, pp)),
        graph_count=sum(cudagraph_capture_counts(max_num_seqs, max_num_batched_tokens)),
        tp=tp,
        sampler_rule=(rule.version + (", V2 model runner" if rule.v2_runner else "")) if rule is not None else "",
        moe_dispatch_bytes=moe_dispatch,
        dp_ranks=dp,
    )


def runs_v2_model_runner(model: ModelSpec, version: str) -> bool:
    """Whether the release serves this model on the V2 model runner by default (ec.VLLM_RUNNER_RULES:
    `VllmConfig.use_v2_model_runner`); its profiling run has its own sampler pass (ec.VLLM_SAMPLER_RULES).
    `model.architecture` is the config's first `architectures` entry. Not modelled: ROCm keeping
    ec.ROCM_V1_RUNNER_ARCHITECTURES on V1, and the features that fall back to V1 (some speculative methods)."""
    return _memo(model, ("v2_runner", version), lambda: _runs_v2_model_runner(model, version))


def _runs_v2_model_runner(model: ModelSpec, version: str) -> bool:
    rule = ec.vllm_runner_rule(version)
    listed = model.architecture in rule.architectures
    moe, hybrid = model.num_experts > 0, model.has_state_layers
    attention_free = all(layer.cache.holds_state for layer in model.layers)
    match rule.default:
        case ec.V2RunnerDefault.NEVER:
            return False
        case ec.V2RunnerDefault.LISTED_DENSE:
            return listed and not moe and model.quantization is None
        case ec.V2RunnerDefault.LISTED:
            return listed
        case ec.V2RunnerDefault.DENSE_OR_LISTED:
            return not hybrid and not attention_free and (listed or not moe)
        case ec.V2RunnerDefault.DENSE_OR_LISTED_HYBRID:
            return (listed or not hybrid) and not attention_free and (listed or not moe)
        case ec.V2RunnerDefault.ALL:
            return True


@lru_cache(maxsize=1024)  # pure; the grid asks it per model, TP, PP and batch setting
def cudagraph_capture_counts(max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs of the default FULL_AND_PIECEWISE mode (0.33 config/vllm.py
    _set_cudagraph_sizes): sizes 1, 2, 4, 8..248 by 8, 256.. by 16 up to min(2 x max_num_seqs, 512,
    max_num_batched_tokens), plus max_num_batched_tokens and max_num_seqs when within it; FULL decode
    graphs for the sizes up to max_num_seqs. (SM100's 1024 ceiling is not modelled.)"""
    seqs, tokens = max(max_num_seqs, 1), max(max_num_batched_tokens, 1)
    largest = min(2 * seqs, 512, tokens)
    sizes = {n for n in (1, 2, 4) if n <= largest} | set(range(8, min(largest + 1, 256), 8))
    sizes |= set(range(256, largest + 1, 16))
    sizes |= {n for n in (tokens, seqs) if n <= largest}
    return len(sizes), sum(1 for n in sizes if n <= seqs)


def nvls_buffer_bytes(ranks: int, nvlink_multicast: bool) -> int:
    """NCCL's NVLink-SHARP buffers a rank of a communicator of `ranks` GPUs holds on an NVLink switch board (NVLS is
    on above 2 ranks unless NCCL_NVLS_ENABLE=0): `ec.VLLM_NVLS_TP8_BYTES`, a public TP 8 measurement, scaled by the
    ranks / 8. A rank of several communicators (TP and DP groups) is charged its largest one's."""
    return ec.VLLM_NVLS_TP8_BYTES * ranks // 8 if nvlink_multicast and ranks > 2 else 0


def measured_margin_bytes(reserve_bytes: int, rocm: bool = False) -> int:
    """vLLM 0.34 `measure_kv_cache_bytes`: the memory kept free beyond the transient reserve,
    max(1 GiB (3 GiB on ROCm), 0.75 x the reserve)."""
    floor = ec.VLLM_MEASURED_MARGIN_FLOOR_ROCM_BYTES if rocm else ec.VLLM_MEASURED_MARGIN_FLOOR_BYTES
    return max(floor, int(reserve_bytes * ec.VLLM_MEASURED_MARGIN_FRACTION))


@dataclass(frozen=True, slots=True)
class _MeasuredTerms:
    """What vLLM 0.34's measured sizing (`ec.KvSizing.MEASURED`) charges beyond the profiling run's terms."""

    graph_reserve_bytes: int  # the CUDA-graph estimate, part of the transient reserve kept free
    margin_bytes: int  # measured_margin_bytes of the reserve
    init_bytes: int  # what the device lacks at init: the CUDA context, NCCL's NVLS buffers
    before_last_margin_bytes: int  # PP > 1: the margin of a stage before the last (its reserve has no sampler phase)
    margin_floor_bytes: int

    def named_terms(self, kept_free_bytes: int) -> tuple[tuple[str, int], ...]:
        """The derivation's lines for these terms (`Overhead.buffers`), after the activation peak's."""
        init_what = "CUDA context, NCCL NVLS buffers" if self.init_bytes > ec.VLLM_INIT_CONTEXT_BYTES else "CUDA context"
        fraction = ec.VLLM_MEASURED_MARGIN_FRACTION
        return (
            ("extensible KV cache: the CUDA-graph estimate, kept free with the transient peak", self.graph_reserve_bytes),
            (
                f"extensible KV cache: margin max({self.margin_floor_bytes / ec.GIB:g} GiB, {fraction:g} x (transient "
                "peak + graph estimate))",
                self.margin_bytes,
            ),
            ("kept free for transients = activation peak + graph estimate + margin", kept_free_bytes),
            (f"non-torch: + missing at init ({init_what})", self.init_bytes),
        )


def _measured_terms(transient: int, before_last: int, cuda_graphs: int, nvls_bytes: int, rocm: bool) -> _MeasuredTerms:
    """vLLM 0.34.0 (the extensible KV cache, read in `v1/worker/extensible_kv_cache.py`, `gpu_worker.py`): after
    warmup and graph capture, KV = min(requested - non-KV in use, free at init - non-KV in use - margin) - reserve,
    where non-KV in use = weights + persistent buffers + non-torch + the captured graphs, and the reserve kept free
    is the profiling run's transient peak (torch peak - allocated after it) plus the CUDA-graph estimate
    (`peak_activation_memory`; the sizing warmup's own transient, which runs attention, can raise it: not
    modelled). The graphs are charged twice: their pool, and their estimate in the reserve."""
    reserve = transient + cuda_graphs
    return _MeasuredTerms(
        graph_reserve_bytes=cuda_graphs,
        margin_bytes=measured_margin_bytes(reserve, rocm),
        init_bytes=ec.VLLM_INIT_CONTEXT_BYTES + nvls_bytes,
        before_last_margin_bytes=measured_margin_bytes(reserve - before_last, rocm),
        margin_floor_bytes=measured_margin_bytes(0, rocm),
    )


def overhead_from_buffers(
    buffers: ProfilingBuffers,
    c: ec.VllmProfilingCoefficients,
    graphs_in_budget: bool,
    pp: int = 1,
    *,
    named_terms: bool = True,
    sizing: ec.KvSizing = ec.KvSizing.PROFILED,
    rocm: bool = False,
    nvls_charged: bool = False,
) -> Overhead:
    """The activation peak (max of the phases plus what persists), non-torch memory and CUDA graphs,
    with the named terms in `Overhead.buffers`. With PP > 1 only the last stage's ranks run the sampler's
    dummy run (`gpu_model_runner.profile_run`: `if get_pp_group().is_last_rank`; V0's `execute_model` returns
    the hidden states before the logits on the others): the stages before it peak without that phase.
    With the measured sizing (`_measured_terms`) the activation term is what is kept free for transients (the peak,
    the graph estimate, the margin), the non-torch term holds what the device lacks at init, and those two extra
    parts that only bind through the device's free memory are `Overhead.device_bound_bytes`."""
    forward = int(c.forward_scale * buffers.forward_layer_bytes(c.moe_workspace_persistent))
    sampler = buffers.sampler_phase_bytes
    persistent = (buffers.moe_workspace_bytes if c.moe_workspace_persistent else 0) + buffers.sampler_bins_bytes
    encoder_forward, encoder_outputs = (
        int(c.forward_scale * buffers.encoder_forward_bytes),
        buffers.encoder_outputs_bytes,
    )
    activation = persistent + max(encoder_forward, encoder_outputs + max(forward, sampler))
    before_last = activation - (persistent + max(encoder_forward, encoder_outputs + forward))
    stage_shortfall = (before_last,) * (pp - 1) + (0,) if pp > 1 and before_last else ()
    # a rank in a device communicator of several GPUs (`initialize_model_parallel`: the TP group's, or at DP > 1 the
    # DP group's pynccl communicator) holds NCCL's buffers on a switch fabric
    several = buffers.tp > 1 or buffers.dp_ranks > 1
    non_torch = c.non_torch_tp_bytes if several and buffers.nvlink_multicast else c.non_torch_bytes
    nvls = nvls_buffer_bytes(max(buffers.tp, buffers.dp_ranks), buffers.nvlink_multicast)
    if nvls_charged:  # created after the baseline: NVLS's buffers are non-torch memory the budget charges
        non_torch += nvls
    per_graph = c.cg_per_graph_bytes
    if buffers.tp > 1:
        per_graph = c.cg_per_graph_tp_custom_ar_bytes if buffers.custom_all_reduce else c.cg_per_graph_tp_nccl_bytes
    cuda_graphs = c.cg_base_bytes + per_graph * buffers.graph_count if graphs_in_budget else 0
    profiled_activation = activation
    measured = None
    if sizing is ec.KvSizing.MEASURED:
        measured = _measured_terms(activation - persistent, before_last, cuda_graphs, nvls, rocm)
        activation += measured.graph_reserve_bytes + measured.margin_bytes
        non_torch += measured.init_bytes
        if stage_shortfall:
            short = before_last + measured.margin_bytes - measured.before_last_margin_bytes
            stage_shortfall = (short,) * (pp - 1) + (0,)
    device_bound = measured.margin_bytes + measured.init_bytes if measured else 0
    if not named_terms:  # the totals only (the grid's)
        return Overhead(activation, non_torch, cuda_graphs, (), stage_shortfall, device_bound)
    phase = "forward" if forward >= sampler else "sampler"
    if encoder_forward > encoder_outputs + max(forward, sampler):
        phase = "vision encoder"
    elif encoder_outputs:
        phase = f"encoder outputs + {phase}"
    peak_form = (
        "max(encoder pass, encoder outputs + max(forward, sampler))" if encoder_outputs else "max(forward, sampler)"
    )
    held_parts = [
        name
        for name, n in (
            ("MoE workspace", persistent - buffers.sampler_bins_bytes),
            ("penalty bins", buffers.sampler_bins_bytes),
        )
        if n
    ]
    held = "".join(f"{name} + " for name in held_parts)
    named: tuple[tuple[str, int], ...] = (
        ("forward: hidden stream", buffers.hidden_stream_bytes),
        ("forward: attention (QKV + output)", buffers.attention_bytes),
        ("forward: dense MLP (gate/up + SiLU-mul)", buffers.dense_mlp_bytes),
        ("forward: MoE router + shared experts", buffers.moe_transient_bytes),
        (f"forward: MoE dispatch ({buffers.moe_dp_ranks} DP ranks' tokens gathered)", buffers.moe_dispatch_bytes),
        (f"forward phase x {c.forward_scale:g} (largest sublayer + hidden stream)", forward),
        ("sampler: logits (model dtype)", buffers.logits_bytes if sampler else 0),
        ("sampler: Triton top-k/top-p buffer", buffers.sampler_buffer_bytes if sampler else 0),
        (
            f"sampler phase: logits + {buffers.sampler_units:g} fp32 copies (rule of vLLM {buffers.sampler_rule}"
            f"{'' if not buffers.sampler_buffer_bytes else ' + Triton buffer'})",
            sampler,
        ),
        ("MoE workspace (persistent)", persistent - buffers.sampler_bins_bytes),
        ("sampler: penalty bins (persistent, V2 runner)", buffers.sampler_bins_bytes),
        ("forward: MoE intermediate caches (per call)", 0 if c.moe_workspace_persistent else buffers.moe_legacy_bytes),
        (f"vision encoder pass over the dummy items x {c.forward_scale:g}", encoder_forward),
        ("encoder cache: the dummy items' embeddings (held through forward and sampler)", encoder_outputs),
        (f"activation peak = {held}{peak_form}: {phase}", profiled_activation),
    )
    if measured is not None:
        named += measured.named_terms(activation)
    return Overhead(
        activation, non_torch, cuda_graphs, tuple((name, n) for name, n in named if n), stage_shortfall, device_bound
    )


def inputs_buffers(inputs: OverheadInputs, version: str) -> ProfilingBuffers:
    """The profiling run's buffers for a deployment's overhead inputs in a release: the decoder's and,
    for a multimodal model not served text-only, the dummy items' encoder pass and cached outputs."""
    i = inputs
    tokens, seqs = i.profiled_batch()
    tower = i.model.vision
    length = i.max_model_len or i.model.context_limit_tokens
    if tower is not None and not i.mm_text_only and ec.vllm_release(version).is_v0:
        seqs = v0_multimodal_profile_seqs(seqs, tokens, tower, length, dict(i.mm_limits), version)
    buffers = profiling_buffers(
        i.model,
        i.tp,
        i.pp,
        tokens,
        seqs,
        i.act_bytes,
        i.nvlink_multicast,
        version,
        flashinfer_sampler=i.flashinfer_sampler,
        peer_link_gpus=i.peer_link_gpus,
        moe_dp_ranks=i.moe_dp_ranks,
    )
    if i.cudagraph_cases != 1:
        buffers = replace(buffers, graph_count=buffers.graph_count * i.cudagraph_cases)
    if tower is None or i.mm_text_only:
        return buffers
    enc = encoder_profile(tower, i.tp, i.act_bytes, length, seqs, tokens, dict(i.mm_limits), version)
    if enc is None:
        return buffers
    return replace(buffers, encoder_forward_bytes=enc.forward_bytes, encoder_outputs_bytes=enc.outputs_bytes)


def v0_multimodal_profile_seqs(
    max_num_seqs: int, batched_tokens: int, tower: VisionTower, max_model_len: int, limits: dict[str, int], version: str
) -> int:
    """V0's dummy prompts for a multimodal model (`ModelRunner.profile_run`, read in the 0.6.4 and 0.7.3 wheels):
    min(max_num_seqs, max_num_batched_tokens // the registry's max multimodal tokens), at least 1, those tokens being
    each modality's largest item times its limit per prompt (V0's default limit: 1). Fewer prompts, fewer sampled rows."""
    mm_tokens = sum(limits.get(modality, 1) * n for modality, n in item_tokens(tower, max_model_len, version).items())
    if mm_tokens <= 0:
        return max_num_seqs
    return max(1, min(max_num_seqs, batched_tokens // mm_tokens))


def vllm_overhead(
    inputs: OverheadInputs,
    release: ec.VllmRelease,
    coefficients: ec.VllmProfilingCoefficients | None = None,
    version: str | None = None,
) -> Overhead:
    """vLLM's non-KV, non-weight memory per GPU for one release (`version`, the exact release when known,
    picks the sampler rule; else the first release of `release`'s row); the inputs' `flashinfer_sampler`
    None takes the release's default for the FlashInfer sampler; their `peer_link_gpus`, GpuSku's, says
    whether the custom all-reduce runs at TP > 1."""
    c = coefficients or ec.vllm_profiling_coefficients(release)
    buffers = inputs_buffers(inputs, version or release.version)
    return overhead_from_buffers(
        buffers,
        c,
        release.cudagraph_memory_in_budget,
        inputs.pp,
        named_terms=inputs.named_terms,
        sizing=release.kv_sizing,
        rocm=inputs.rocm,
        nvls_charged=release.baseline_before_nccl,
    )
