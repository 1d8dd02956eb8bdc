"""vLLM's CUDA-graph estimate (0.21+) against the public 'Estimated CUDA graph memory' log lines.

The capture counts are vLLM 0.33's rules (config/vllm.py _set_cudagraph_sizes), checked against the
counts the logs print; the coefficients are what the fit on the logs gives (shipped = refit), and the
leave-one-source-out error is a regression gate (measured: TP = 1 median 0.21 GiB, all 0.26 GiB; with the
TP > 1 charge split by custom all-reduce on / off: all 0.26 -> 0.23 GiB, TP > 1 0.32 -> 0.26 GiB).
"""

from __future__ import annotations

import re

import pytest

from capacity import engine_constants as ec
from capacity.engines.vllm.overhead import cudagraph_capture_counts, custom_all_reduce_on, vllm_overhead
from capacity.overhead import OverheadInputs
from evaluation import cudagraph_estimates as graphs
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku


@pytest.mark.parametrize(
    ("max_num_seqs", "max_num_batched_tokens", "counts"),
    [
        (256, 8192, (51, 35)),  # "PIECEWISE=51 (largest=512), FULL=35 (largest=256)"
        (128, 2048, (35, 19)),  # Qwen2.5-7B, 0.22.0: "PIECEWISE=35 (largest=256), FULL=19 (largest=128)"
        (8, 65536, (5, 4)),  # Qwen3.6-27B on GB10: "PIECEWISE=5 (largest=16), FULL=4 (largest=8)"
        (40, 8192, (13, 8)),  # Nemotron-Cascade-2, 0.19.1: "PIECEWISE=13 (largest=80), FULL=8 (largest=40)"
        (1024, 8192, (51, 51)),  # gemma-4-31B on B300, 0.26.0: "PIECEWISE=51 (largest=512), FULL=51 (largest=512)"
    ],
)
def test_capture_counts_are_the_logged_ones(max_num_seqs: int, max_num_batched_tokens: int, counts: tuple[int, int]) -> None:
    assert cudagraph_capture_counts(max_num_seqs, max_num_batched_tokens) == counts


def test_logged_counts_agree_with_the_rule_where_the_log_gives_the_settings() -> None:
    """Every log that states max_num_seqs and max_num_batched_tokens and runs the default capture sizes
    (its largest graph is min(2 x max_num_seqs, 512, max_num_batched_tokens), no drafter)."""
    import yaml

    entries = yaml.safe_load(graphs.ESTIMATES_PATH.read_text(encoding="utf-8"))["estimates"]
    checked = 0
    for e in entries:
        seqs, tokens = e.get("max_num_seqs"), e.get("max_num_batched_tokens")
        if not (seqs and tokens and e.get("piecewise_count") and e.get("full_count")):
            continue
        if e.get("max_cudagraph_capture_size") != min(2 * seqs, 512, tokens) or "mtp" in str(e.get("notes", "")).lower():
            continue  # a capture size set by hand, or a drafter's
        assert cudagraph_capture_counts(seqs, tokens) == (e["piecewise_count"], e["full_count"]), e["id"]
        checked += 1
    assert checked >= 3


def test_shipped_coefficients_are_the_fit() -> None:
    fitted = graphs.fit(graphs.load_rows())
    shipped = (ec.CG_BASE_BYTES, ec.CG_PER_GRAPH_BYTES, ec.CG_PER_GRAPH_TP_CUSTOM_AR_BYTES, ec.CG_PER_GRAPH_TP_NCCL_BYTES)
    refit = (fitted.base_bytes, fitted.per_graph_bytes, fitted.per_graph_custom_ar_bytes, fitted.per_graph_nccl_bytes)
    assert all(abs(a - b) <= 2**20 for a, b in zip(shipped, refit, strict=True)), (shipped, refit)


def test_every_row_is_fitted_or_left_out_with_a_reason() -> None:
    rows = graphs.load_rows()
    assert len(rows) >= 40
    assert sum(r.excluded is None for r in rows) >= 20
    assert {r.excluded for r in rows if r.excluded} <= {"no estimate line", "no capture counts", "unified memory (GB10)",
                                                          "speculative decoding"}  # fmt: skip


def test_cross_validated_error_gate() -> None:
    rows = graphs.load_rows()
    cv = graphs.cross_validated_errors_gib(rows)
    single = graphs.accuracy(cv, {r.id for r in rows if r.tp == 1})
    assert single.median_abs_error_gib <= 0.25
    assert graphs.accuracy(cv).median_abs_error_gib <= 0.30
    assert single.within_half_gib >= 0.8
    multi = graphs.accuracy(cv, {r.id for r in rows if r.tp > 1})
    assert multi.n >= 8 and multi.median_abs_error_gib <= 0.30  # 0.32 with one TP > 1 charge, 0.26 split


@pytest.mark.parametrize(
    ("gpu", "tp", "on"),
    [
        ("A100-SXM4-80GB", 4, True),  # NVSwitch: every pair on NVLink (vllm#39610: "Registering 500 cuda graph addresses")
        ("H100 SXM", 8, True),
        ("H100 SXM", 3, False),  # world size 3 is not in _SUPPORTED_WORLD_SIZES
        ("H100 NVL", 2, True),  # a bridged pair: P2P over NVLink
        ("H100 NVL", 4, False),  # more than 2 GPUs, not fully connected
        ("L40S", 4, False),  # "not supported on more than two PCIe-only GPUs" (the g6e.12xlarge log: NCCL)
        ("L40S", 2, False),  # PCIe P2P assumed off (the l40s-180 log: no P2P)
        ("RTX 3090", 4, False),
        ("MI300X", 8, True),  # ROCm: XGMI fully connected, no P2P test
        ("Gaudi3", 2, False),
    ],
)
def test_custom_all_reduce_rule_per_gpu(gpu: str, tp: int, on: bool) -> None:
    assert custom_all_reduce_on(tp, find_gpu_sku(gpu).peer_link_gpus) is on


def test_unknown_gpu_takes_the_fabric_like_nvlink_multicast() -> None:
    assert [custom_all_reduce_on(tp, None) for tp in (1, 2, 3, 4, 6, 8)] == [False, True, False, True, True, True]


def test_scalar_overhead_charges_the_graphs_by_all_reduce_path() -> None:
    """0.21 deducts the estimate: base + per graph x 86 graphs (51 + 35 at 256 seqs / 8192 tokens)."""
    spec = load_model("meta-llama/Llama-3.1-8B-Instruct").spec
    release = ec.vllm_release("0.21.0")
    assert release.cudagraph_memory_in_budget
    sizes = {}
    for gpu in ("A100-SXM4-80GB", "L40S"):
        for tp in (1, 4):
            peers = find_gpu_sku(gpu).peer_link_gpus
            inputs = OverheadInputs(spec, tp, 1, 8192, 256, 2, nvlink_multicast=False, peer_link_gpus=peers)
            o = vllm_overhead(inputs, release)
            sizes[gpu, tp] = o.cuda_graph_bytes
    assert sizes["A100-SXM4-80GB", 1] == sizes["L40S", 1] == ec.CG_BASE_BYTES + 86 * ec.CG_PER_GRAPH_BYTES
    assert sizes["A100-SXM4-80GB", 4] == ec.CG_BASE_BYTES + 86 * ec.CG_PER_GRAPH_TP_CUSTOM_AR_BYTES
    assert sizes["L40S", 4] == ec.CG_BASE_BYTES + 86 * ec.CG_PER_GRAPH_TP_NCCL_BYTES


def test_rows_take_the_log_statement_else_the_rule() -> None:
    rows = {r.id: r for r in graphs.load_rows()}
    assert (rows["gh_vllm_39610_a100_tp4_nightly"].custom_all_reduce, rows["gh_vllm_39610_a100_tp4_nightly"].custom_all_reduce_from) == (True, "log")
    assert (rows["qwen25_72b_l40s_tp4_v0190"].custom_all_reduce, rows["qwen25_72b_l40s_tp4_v0190"].custom_all_reduce_from) == (False, "rule on l40s-48gb")
    assert rows["gh_club3090_pr44_dual4_tp4"].custom_all_reduce is False


def test_the_estimate_names_the_peer_access_assumption_at_tp_2_on_pcie() -> None:
    """Two PCIe data-centre GPUs: custom all-reduce runs only where vLLM's P2P test passes, which capplan does
    not assume; the estimate says what the graphs would take with it (custom all-reduce's per-graph charge).
    GeForce cards' stock driver refuses peer access (nothing to assume), TP 4 on PCIe never runs it (every pair
    needs NVLink)."""
    from capacity.estimate import estimate
    from capacity.spec import DeploymentSpec

    resolved = load_model("Qwen/Qwen3-14B")

    def notes(gpu: str, tp: int) -> list[str]:
        est = estimate(resolved.spec, DeploymentSpec(tp=tp, engine_version="0.28.0", max_model_len=8192),
                       gpu=find_gpu_sku(gpu), checkpoint_bytes=resolved.checkpoint_bytes)  # fmt: skip
        return [n for n in est.notes if "peer access" in n]

    (l4,) = notes("L4", 2)
    custom_gib, nccl_gib = (float(x) for x in re.findall(r"is ([\d.]+) GiB instead of ([\d.]+) GiB", l4)[0])
    count = sum(cudagraph_capture_counts(256, 2048))  # L4 defaults: 256 sequences, 2048 batched tokens; 51 + 35
    assert custom_gib == pytest.approx((ec.CG_BASE_BYTES + count * ec.CG_PER_GRAPH_TP_CUSTOM_AR_BYTES) / 2**30, abs=0.02)
    assert nccl_gib == pytest.approx((ec.CG_BASE_BYTES + count * ec.CG_PER_GRAPH_TP_NCCL_BYTES) / 2**30, abs=0.02)
    assert notes("RTX-4090", 2) == [] and notes("L4", 4) == [] and notes("H100", 2) == []


def test_deployment_settings_decide_the_all_reduce_path() -> None:
    """--gpu-peer-access turns vLLM's custom all-reduce on at TP 2 over PCIe (its rule: two GPUs need only the
    P2P test), not at TP 4 (every pair on NVLink); --disable-custom-all-reduce or a failed P2P test turns it off."""
    from capacity.spec import DeploymentSpec

    l4, h100 = find_gpu_sku("L4").peer_link_gpus, find_gpu_sku("H100").peer_link_gpus
    assert DeploymentSpec(tp=2).all_reduce_peer_gpus(l4) == l4 == 1
    assert custom_all_reduce_on(2, DeploymentSpec(tp=2, gpu_peer_access=True).all_reduce_peer_gpus(l4))
    assert not custom_all_reduce_on(4, DeploymentSpec(tp=4, gpu_peer_access=True).all_reduce_peer_gpus(l4))
    assert custom_all_reduce_on(8, DeploymentSpec(tp=8).all_reduce_peer_gpus(h100))
    assert not custom_all_reduce_on(8, DeploymentSpec(tp=8, disable_custom_all_reduce=True).all_reduce_peer_gpus(h100))
    assert not custom_all_reduce_on(2, DeploymentSpec(tp=2, gpu_peer_access=False).all_reduce_peer_gpus(h100))
    assert DeploymentSpec(tp=2, gpu_peer_access=True).all_reduce_peer_gpus(None) is None  # unknown GPU: the rule's default


def test_the_estimate_flags_nvls_buffers_above_two_ranks_on_an_nvlink_switch() -> None:
    """NCCL turns NVLS on above 2 GPUs of an NVLink switch board (vllm#9699); capplan does not charge its buffers
    (no reference log at TP > 4 there) and says so: at TP 8 the measured order of magnitude (about 4.9 GiB of KV
    lost at TP 8 in vllm#9699), half of it at TP 4 by NCCL's per-rank sizing; nothing at TP 2, on PCIe cards, or
    on SGLang, which turns NVLS off unless --enable-nccl-nvls (sgl-project/sglang#631)."""
    from capacity.estimate import estimate
    from capacity.spec import DeploymentSpec

    def notes(model: str, gpu: str, tp: int, engine: str = "vllm") -> list[str]:
        resolved = load_model(model)
        est = estimate(resolved.spec, DeploymentSpec(tp=tp, engine=engine, max_model_len=8192),
                       gpu=find_gpu_sku(gpu), checkpoint_bytes=resolved.checkpoint_bytes)  # fmt: skip
        return [n for n in est.notes if "NVLS" in n]

    kimi, llama = "moonshotai/Kimi-K2-Thinking", "meta-llama/Llama-3.1-70B-Instruct"
    (tp8,) = notes(kimi, "H200", 8)  # 5 GiB of a 52 GiB budget
    assert "up to about 5.00 GiB a GPU" in tp8 and "scales with the ranks" not in tp8
    (tp4,) = notes(llama, "H100", 4)
    assert "about 2.50 GiB at TP 4" in tp4
    assert notes(llama, "H100", 2) == [] and notes(llama, "L40S", 4) == [] and notes(kimi, "H200", 8, "sglang") == []
    assert notes(llama, "H200", 8) == []  # 5 GiB is under 5 % of a 70B's budget there: not worth a note
