"""vLLM's data-parallel MoE token gathering in the profiling run, against sizes derived by hand from vLLM's source.

With `-dp D` every DP rank runs the same dummy batch of T = max_num_batched_tokens tokens (v1/worker/
gpu_model_runner.py `_dummy_run`, the counts all-reduced over the DP group: forward_context.py
`DPMetadata.num_tokens_across_dp`), and each MoE layer gathers all of them before its experts run:

* 0.10.0 / 0.10.1 wheels (VLLM_ALL2ALL_BACKEND default "naive"): model_executor/layers/fused_moe/layer.py
  `FusedMoE.forward_impl` takes `do_naive_dispatch_combine` for dp_size > 1, and distributed/device_communicators/
  all2all.py `NaiveAll2AllManager.dispatch` -> `naive_multicast` allocates a (cu_tokens_across_dp_cpu[-1], x.size(1))
  buffer in x's dtype for the hidden states and another for the router logits; `quant_method.apply` ->
  fused_moe.py `fused_experts_impl` then runs over all of them: cache13 = M x top-k x max(N, K) and
  cache2 = M x top-k x N/2, M = min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE = 32768) (envs.py);
* 0.33.0 (default all2all backend "allgather_reducescatter"): prepare_finalize/naive_dp_ep.py
  `MoEPrepareAndFinalizeNaiveDPEPModular.prepare` gathers the input and the top-k, and modular_kernel.py
  `FusedMoEModularKernel._allocate_buffers(M_full, M_full, ...)` sizes the workspaces at M = the gathered tokens.

The expected values below are worked out from those shapes and the models' configs, never from capplan's output.
"""

from __future__ import annotations

from dataclasses import replace

from capacity import engine_constants as ec
from capacity.engines import Engine
from capacity.engines.vllm.overhead import overhead_from_buffers, profiling_buffers, vllm_overhead
from capacity.features.parallel_layout import rank_layout
from capacity.overhead import OverheadInputs
from models_registry.resolve import load_model

# `vllm serve` on a 70+ GiB GPU other than an A100 (0.10.1 engine/arg_utils.py _set_default_args_v1): 8,192 batched
# tokens, 1,024 sequences
T, S, BF16 = 8192, 1024, 2


def test_qwen3_coder_480b_dp8_gathers_65536_tokens_into_each_moe_layer_on_0_10() -> None:
    # Qwen3-Coder-480B-A35B-Instruct-FP8 (config.json): hidden K = 6144, 160 experts, top-8, moe_intermediate 2560,
    # no shared experts. vllm serve -dp 8 --enable-expert-parallel (recipes PR 12, vLLM 0.10.1.dev101): EP puts
    # whole experts on each rank, so N = 2 x 2560 = 5120 (no TP split of the intermediate).
    spec = load_model("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8").spec
    g = 8 * T  # cu_tokens_across_dp_cpu[-1] = 8 ranks x 8,192 = 65,536
    m = 32_768  # min(65,536, VLLM_FUSED_MOE_CHUNK_SIZE): fused_experts_impl runs two chunks of 32,768
    one, dp8 = (profiling_buffers(spec, 1, 1, T, S, BF16, version="0.10.1", moe_dp_ranks=d) for d in (1, 8))

    # naive_multicast of the hidden states: 65,536 x 6144 x 2 B = 805,306,368 B (0.75 GiB)
    assert dp8.moe_dispatch_bytes == g * 6144 * BF16 == 805_306_368
    assert one.moe_dispatch_bytes == 0  # without DP the MoE layer takes the rank's own hidden states
    # router logits (capplan counts them in fp32: 160 x 4 B) and the top-k ids + weights (8 x (4 + 4) B) per token
    assert dp8.moe_transient_bytes == g * 160 * 4 + g * 8 * 8 == 46_137_344
    assert one.moe_transient_bytes == T * 160 * 4 + T * 8 * 8
    # cache13 = 32,768 x 8 x max(5120, 6144) x 2 B = 3,221,225,472; cache2 = 32,768 x 8 x 2560 x 2 B = 1,342,177,280
    assert dp8.moe_legacy_bytes == (m * 8 * 6144 + m * 8 * 2560) * BF16 == 4_563_402_752
    assert one.moe_legacy_bytes == (T * 8 * 6144 + T * 8 * 2560) * BF16 == 1_140_850_688
    # nothing outside the MoE layer moves: the hidden stream, attention and the sampler are the rank's own
    assert (dp8.hidden_stream_bytes, dp8.attention_bytes, dp8.sampler_phase_bytes) == (
        one.hidden_stream_bytes,
        one.attention_bytes,
        one.sampler_phase_bytes,
    )

    # 0.10's coefficients (intermediate caches per call, not held): the peak is the larger phase; the MoE
    # sublayer = router/top-k + gathered hidden states + caches = 5,414,846,464 B, above attention's
    c = ec.vllm_profiling_coefficients(ec.vllm_release("0.10.1"))
    assert not c.moe_workspace_persistent
    moe_sublayer = 46_137_344 + 805_306_368 + 4_563_402_752
    forward = int(c.forward_scale * (dp8.hidden_stream_bytes + moe_sublayer))
    o = overhead_from_buffers(dp8, c, graphs_in_budget=False)
    assert o.activation_peak_bytes == max(forward, dp8.sampler_phase_bytes)
    # here the gathered forward (7.04 GiB at forward_scale 1.3) passes the sampler's 1,024 x 151,936 logits
    # (5.51 GiB), which set the peak without DP
    assert forward > dp8.sampler_phase_bytes > int(c.forward_scale * one.forward_layer_bytes(False))


def test_workspace_is_sized_at_the_gathered_tokens_on_0_33() -> None:
    # Qwen3-30B-A3B: K = 2048, 128 experts, top-8, moe_intermediate 768 -> N = 1536 (TP 1). TritonExperts.
    # workspace_shapes at M_full = 2 x 8,192 = 16,384: workspace13 = M x 8 x max(N/2, K), workspace2 = M x 8 x
    # max(N, K), both M x 8 x 2048; the gathered input 16,384 x 2048 in bf16
    spec = load_model("Qwen/Qwen3-30B-A3B").spec
    g = 2 * T
    b = profiling_buffers(spec, 1, 1, T, S, BF16, moe_dp_ranks=2)
    assert b.moe_workspace_bytes == (g * 8 * 2048 + g * 8 * 2048) * BF16 == 1_073_741_824
    assert b.moe_dispatch_bytes == g * 2048 * BF16
    assert b.moe_transient_bytes == g * 128 * 4 + g * 8 * 8


def test_the_layout_feeds_the_dp_size_and_dense_models_gather_nothing() -> None:
    spec = load_model("Qwen/Qwen3-30B-A3B").spec
    # vLLM -tp 2 -dp 4 --enable-expert-parallel: the DP group of 4 gathers; the TP ranks of one DP rank hold the
    # same tokens (sequence-parallel MoE gathers cdiv(T, 2) over 8 EP ranks: the same 4 x T)
    layout = rank_layout(Engine.VLLM, spec, 2, dp=4, ep=8)
    assert layout.moe_dispatch_ranks == 4
    assert rank_layout(Engine.VLLM, spec, 8).moe_dispatch_ranks == 1
    release = ec.vllm_release("0.19.0")
    inputs = OverheadInputs(spec, 2, 1, T, 256, BF16, moe_dp_ranks=layout.moe_dispatch_ranks)
    terms = dict(vllm_overhead(inputs, release).buffers)  # what `estimate` lists as its activation_terms
    # -tp 2: N = 2 x cdiv(768, 2) = 768; workspaces at M = 4 x 8,192 = 32,768, each M x 8 x max(768 or 384, 2048)
    assert terms["MoE workspace (persistent)"] == 2 * (4 * T * 8 * 2048) * BF16
    assert terms["forward: MoE dispatch (4 DP ranks' tokens gathered)"] == 4 * T * 2048 * BF16
    # a dense model has no MoE layer to gather into: -dp 4 changes none of its buffers, only the DP size it carries
    dense = load_model("meta-llama/Llama-3.1-8B-Instruct").spec
    at_dp4 = profiling_buffers(dense, 1, 1, T, S, BF16, moe_dp_ranks=4)
    assert at_dp4.dp_ranks == 4
    assert replace(at_dp4, dp_ranks=1) == profiling_buffers(dense, 1, 1, T, S, BF16)


def test_a_dp_rank_at_tp1_holds_the_multi_gpu_non_torch() -> None:
    # initialize_model_parallel (0.10.1, 0.33): at DP > 1 the DP group's CudaCommunicator opens a pynccl communicator,
    # as a TP group does, so a TP 1 rank of -dp 8 on a switch fabric holds the TP > 1 figure; on PCIe the TP 1 one
    dense = load_model("meta-llama/Llama-3.1-8B-Instruct").spec
    release = ec.vllm_release("0.10.1")
    c = ec.vllm_profiling_coefficients(release)

    def non_torch(tp: int, dp: int, multicast: bool) -> int:
        inputs = OverheadInputs(dense, tp, 1, T, 256, BF16, nvlink_multicast=multicast, moe_dp_ranks=dp)
        return vllm_overhead(inputs, release).non_torch_bytes

    # 0.10.1's baseline precedes the communicators: an 8-rank one's NVLS buffers are charged, DP or TP alike
    assert non_torch(1, 8, True) == non_torch(8, 1, True) == c.non_torch_tp_bytes + ec.VLLM_NVLS_TP8_BYTES
    assert non_torch(1, 2, True) == non_torch(2, 1, True) == c.non_torch_tp_bytes
    assert non_torch(1, 1, True) == non_torch(1, 8, False) == c.non_torch_bytes
    assert c.non_torch_tp_bytes > c.non_torch_bytes
