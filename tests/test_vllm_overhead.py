"""The named buffers of vLLM's profiling run, against sizes derived by hand from vLLM's source.

Expected values are worked out from the engine's code (0.33.0 wheel: fused_moe/experts/triton_moe.py
TritonExperts.workspace_shapes, experts/gpt_oss_triton_kernels_moe.py, v1/worker/gpu/model_runner.py
_dummy_sampler_run; 0.11.0 wheel: fused_moe/fused_moe.py fused_experts_impl) and the models' configs,
never from what capplan printed.
"""

from __future__ import annotations

import pytest

from capacity import engine_constants as ec
from capacity.engines.vllm.overhead import overhead_from_buffers, profiling_buffers
from capacity.estimate import estimate
from capacity.explain import derivation
from capacity.overhead import OverheadInputs
from capacity.spec import DeploymentSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku

T, S, BF16 = 8192, 1024, 2  # vLLM 0.33 on an H100: 8,192 batched tokens, 1,024 sequences (get_batch_defaults)


def test_qwen3_moe_workspace_and_sampler_logits() -> None:
    # Qwen3-30B-A3B: hidden K = 2048, 128 experts, top-8, moe_intermediate 768 -> N = 2 x 768 = 1536 (TP 1),
    # vocab 151,936. workspace13 = M x 8 x max(N/2, K) = M x 8 x 2048; workspace2 = M x 8 x max(N, K) = M x 8 x 2048
    spec = load_model("Qwen/Qwen3-30B-A3B").spec
    b = profiling_buffers(spec, 1, 1, T, S, BF16)
    assert b.moe_workspace_bytes == (T * 8 * 2048 + T * 8 * 2048) * BF16
    # 0.11 fused_experts_impl: cache13 = M x 8 x max(N, K), cache2 = M x 8 x N/2
    assert b.moe_legacy_bytes == (T * 8 * 2048 + T * 8 * 768) * BF16
    assert b.logits_bytes == S * 151_936 * BF16 and b.logits_fp32_bytes == S * 151_936 * 4
    # router logits in fp32 (T x 128) and top-k ids + weights (T x 8 x (4 + 4)); no shared experts
    assert b.moe_transient_bytes == T * 128 * 4 + T * 8 * 8


def test_gpt_oss_mxfp4_experts_take_the_oai_triton_layout() -> None:
    # gpt-oss-20b: hidden 2880, 32 experts, top-4, intermediate 2880 -> N = 5760; MXFP4 on the OAI Triton
    # kernels: workspace13 holds only the M x K output, workspace2 = M x 4 x N/2
    spec = load_model("openai/gpt-oss-20b").spec
    b = profiling_buffers(spec, 1, 1, T, S, BF16)
    assert b.moe_workspace_bytes == (T * 2880 + T * 4 * 2880) * BF16


def test_dense_mlp_and_tp_split() -> None:
    # Llama-3.1-8B: intermediate 14,336: gate/up 2I/TP + SiLU-mul I/TP per token; the logits are not split
    spec = load_model("meta-llama/Llama-3.1-8B-Instruct").spec
    for tp in (1, 2, 4):
        b = profiling_buffers(spec, tp, 1, T, S, BF16)
        assert b.dense_mlp_bytes == T * 3 * (14_336 // tp) * BF16
        assert b.moe_workspace_bytes == 0
        assert b.logits_bytes == S * 128_256 * BF16


def test_activation_is_the_larger_phase_plus_what_persists() -> None:
    spec = load_model("Qwen/Qwen3-30B-A3B").spec
    b = profiling_buffers(spec, 1, 1, T, S, BF16)
    c = ec.VLLM_PROFILING_COEFFICIENTS["v1"]
    o = overhead_from_buffers(b, c, graphs_in_budget=True)
    forward = int(c.forward_scale * b.forward_layer_bytes(True))
    # 0.33 V2 runner, FlashInfer on by default: bf16 logits + fp32 copy + FlashInfer's masked logits and probs
    # (3 fp32 copies); the penalties' bins (1,024 x 151,936 int32 + 1,024 x cdiv(151,936, 32) int32) held from load
    vocab = 151_936
    sampler = S * vocab * BF16 + 3 * S * vocab * 4
    bins = S * vocab * 4 + S * -(-vocab // 32) * 4
    assert b.sampler_phase_bytes == sampler and b.sampler_bins_bytes == bins
    assert o.activation_peak_bytes == b.moe_workspace_bytes + bins + max(forward, sampler)
    legacy = overhead_from_buffers(b, ec.VLLM_PROFILING_COEFFICIENTS["v1-mid"], graphs_in_budget=False)
    assert legacy.cuda_graph_bytes == 0
    assert dict(legacy.buffers)["forward: MoE intermediate caches (per call)"] == b.moe_legacy_bytes


@pytest.mark.parametrize("model", ["Qwen/Qwen3-30B-A3B", "meta-llama/Llama-3.1-8B-Instruct"])
def test_estimate_shows_each_named_buffer(model: str) -> None:
    resolved = load_model(model)
    est = estimate(resolved.spec, DeploymentSpec(), gpu=find_gpu_sku("NVIDIA H100 80GB HBM3"),
                   checkpoint_bytes=resolved.checkpoint_bytes)  # fmt: skip
    names = [name for name, _ in est.activation_buffers]
    assert any(name.startswith("sampler phase") for name in names)
    assert dict(est.activation_buffers)[names[-1]] == est.activation_peak_bytes_per_gpu
    text = "\n".join(derivation(est, resolved.spec))
    assert "sampler: logits (model dtype)" in text
    assert ("MoE workspace (persistent)" in text) == (model == "Qwen/Qwen3-30B-A3B")
    assert any(note.startswith("assumed vllm 0.33") or note.startswith("assumed gpu_memory_utilization")
               for note in est.notes)  # fmt: skip


def test_tp_non_torch_term_only_on_an_nvlink_switch_fabric() -> None:
    """NCCL's NVLS buffers and the NVLink all-reduce workspaces exist only on NVLink4/5 switch fabrics:
    H100 SXM at TP 2 charges the TP > 1 term, L4 (PCIe) and RTX 4090 keep the TP = 1 one (public logs:
    0.25 GiB non-torch at TP 2 on 2 x RTX 4090, vllm#13061; 2.07 GiB on H100 SXM, llm-d-planner 0.19)."""
    from capacity import engine_constants as ec
    from capacity.engines.vllm.overhead import vllm_overhead
    from models_registry.resolve import load_model
    from models_registry.sources.gpu_catalog import find_gpu_sku

    assert find_gpu_sku("H100").nvlink_multicast and find_gpu_sku("B200").nvlink_multicast
    assert not any(find_gpu_sku(g).nvlink_multicast for g in ("L4", "RTX 4090", "A100-80GB", "L40S"))
    spec = load_model("meta-llama/Llama-3.1-8B-Instruct").spec
    release = ec.vllm_release("0.19.0")
    coefficients = ec.vllm_profiling_coefficients(release)
    switch = vllm_overhead(OverheadInputs(spec, 2, 1, 8192, 256, 2, nvlink_multicast=True), release)
    pcie = vllm_overhead(OverheadInputs(spec, 2, 1, 8192, 256, 2, nvlink_multicast=False), release)
    assert switch.non_torch_bytes == coefficients.non_torch_tp_bytes
    assert pcie.non_torch_bytes == coefficients.non_torch_bytes
    assert switch.activation_peak_bytes == pcie.activation_peak_bytes


@pytest.mark.parametrize(
    ("engine", "version", "reads_links"),
    [
        ("vllm", "0.33", True),
        ("vllm", "0.11.0", True),
        ("vllm", "0.6.1", True),
        ("sglang", None, True),
        ("trtllm", None, False),
    ],
)
def test_links_of_one_overhead_link_kind_give_one_overhead(engine: str, version: str | None, reads_links: bool) -> None:
    """The grid asks the overhead once per `overhead_link_kind` at a TP: for every pair of link facts among the
    catalog's GPUs (and an unknown GPU's), at TP 1-8 and DP 1 / 4, a dense and an MLA model, links of one kind give
    the overhead of the kind's first pair, term by term; TensorRT-LLM's overhead reads no link (one kind)."""
    from pathlib import Path

    from capacity.engines.registry import engine_profile
    from models_registry.sources.gpu_catalog import load_gpu_skus
    from tests.handmade import dense_spec, mla_spec

    catalog = Path(__file__).resolve().parent.parent / "models_registry" / "catalog" / "gpus.yaml"
    links = sorted({(g.nvlink_multicast, g.peer_link_gpus) for g in load_gpu_skus(catalog)}, key=str)
    links.append((True, None))
    profile = engine_profile(engine, version)
    split, kinds = False, set()
    for spec in (dense_spec(layers=8, heads=32, kv_heads=8, hidden=4096, intermediate=14336), mla_spec(layers=4)):
        for tp, dp in ((1, 1), (2, 1), (4, 1), (8, 1), (1, 4), (2, 4)):
            first: dict[object, tuple[int, int, int]] = {}
            for multicast, peers in links:
                got = profile.overhead(OverheadInputs(spec, tp, 1, 8192, 256, 2, multicast, peers, moe_dp_ranks=dp))
                terms = (got.activation_peak_bytes, got.non_torch_bytes, got.cuda_graph_bytes)
                kind = profile.overhead_link_kind(tp, multicast, peers)
                kinds.add(kind)
                assert first.setdefault(kind, terms) == terms, (spec.family, tp, dp, multicast, peers)
            split = split or len(set(first.values())) > 1
    # the links do move the overhead somewhere where the rule reads them (else the test would prove nothing)
    assert split is reads_links and (len(kinds) > 1) is reads_links
