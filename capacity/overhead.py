"""Non-KV memory an engine charges (activation peak, non-torch, CUDA graphs) and the defaults it picks."""

from __future__ import annotations

from dataclasses import dataclass

from capacity import engine_constants as ec
from capacity.numeric import Num, cdiv
from capacity.parallel import pp_partition
from capacity.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class Overhead:
    activation_peak_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    # named terms of the activation peak, (what, bytes per GPU), where the profile models them
    buffers: tuple[tuple[str, int], ...] = ()
    # PP > 1: per pipeline stage, the bytes its ranks' overhead is below the most loaded stage's (vLLM: only the
    # last stage runs the sampler); empty: every stage the same
    stage_shortfall_bytes: tuple[int, ...] = ()
    # the part of the total that only a bound by the device's free memory charges (vLLM 0.34's measured sizing: the
    # memory missing at init and the sizing margin); where total x utilization is the tighter bound it is not charged
    # (`EngineProfile.kv_budget`)
    device_bound_bytes: int = 0

    def stage_bytes(self, stage: int) -> int:
        """The overhead of a rank of pipeline stage `stage`."""
        short = self.stage_shortfall_bytes
        return self.total_bytes - (short[stage] if stage < len(short) else 0)

    @property
    def total_bytes(self) -> int:
        return int(overhead_total_bytes(self.activation_peak_bytes, self.non_torch_bytes, self.cuda_graph_bytes))


def overhead_total_bytes(activation_peak_bytes: Num, non_torch_bytes: Num, cuda_graph_bytes: Num) -> Num:
    """The non-KV memory a rank charges: its three terms (`Overhead.total_bytes`; the grid's overhead column, which
    a published context view computes when read)."""
    return activation_peak_bytes + non_torch_bytes + cuda_graph_bytes


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
    max_model_len: int = 0  # what a multimodal model's dummy items follow (0: the model's context limit)
    mm_text_only: bool = False  # every modality limited to 0: no encoder profiling (vLLM 0.11+)
    mm_limits: tuple[tuple[str, int], ...] = ()  # vLLM --limit-mm-per-prompt counts (unnamed: 999)
    cudagraph_cases: int = 1  # graphs vLLM captures per size: 2 with LoRA (features/lora.py lora_graph_cases)
    # vLLM DP > 1: the DP ranks whose tokens each MoE layer gathers in the profiling run (RankLayout.moe_dispatch_ranks)
    moe_dp_ranks: int = 1
    rocm: bool = False  # an AMD GPU (vLLM 0.34's measured sizing keeps a larger margin on ROCm)
    named_terms: bool = True  # False: the totals only, no `Overhead.buffers` (the grid reads no more)

    def profiled_batch(self) -> tuple[int, int]:
        """The batched tokens and sequences of the profiling pass: at least one token, and 256 sequences
        (vLLM's default) where the deployment sets no cap."""
        return max(self.max_num_batched_tokens, 1), self.max_num_seqs or 256


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
    inputs: OverheadInputs,
    release: ec.VllmRelease,
    coefficients: ec.OverheadCoefficients | None = None,
    *,
    graphs: bool = True,
) -> Overhead:
    """Activation peak of the profiling pass, non-torch memory and the CUDA-graph estimate (vLLM's
    profiling run; TensorRT-LLM's is the same pass without graphs in the budget, `graphs=False`)."""
    i = inputs
    c = coefficients or ec.vllm_overhead_coefficients(release)
    tokens, seqs = i.profiled_batch()
    mlp, logits = activation_features(i.model, i.tp, tokens, seqs, i.act_bytes)
    activation = int(max(c.a_mlp * mlp, c.a_logits * logits)) + c.a_base_bytes
    non_torch = c.nt_tp_bytes if i.tp > 1 else c.nt_base_bytes
    cuda_graphs = 0
    if graphs and release.cudagraph_memory_in_budget:
        layers_local = max(pp_partition(i.model.num_layers, i.pp))
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
