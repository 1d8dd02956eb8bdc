"""The performance model against roofline arithmetic done by hand, and SLO-aware placement.

The expected numbers are written out from the model's definition (bytes read / bandwidth against
FLOPs / peak, plus fixed costs) with the efficiency factors given explicitly, so a refit of the
defaults does not change what these tests check.
"""

from __future__ import annotations

import math

import polars as pl
import pytest

from capacity.estimate import estimate
from capacity.performance import (
    DEFAULT_EFFICIENCY,
    PerfEfficiency,
    expected_active_experts,
    largest_batch_within,
    perf_inputs,
    performance,
    step_attention_flops,
    step_bytes,
    step_gemm_flops,
    step_kv_bytes,
    step_weight_bytes,
    tpot_seconds,
    ttft_at_rate_seconds,
)
from capacity.placement import place
from capacity.planning_types import WorkloadProfile
from capacity.spec import DeploymentSpec, GpuSku, KVKind
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from tests.handmade import dense_spec

EFF = PerfEfficiency(memory_bandwidth=0.5, compute=0.5, step_overhead_s=0.001, allreduce_latency_s=0.0, source="test")
# a round-numbers GPU: 1,000 GB/s, 100 TFLOPS, 100 GB/s links
GPU = GpuSku("round", "Round", "nvidia", 100 * 2**30, memory_bandwidth_gbps=1000, bf16_dense_tflops=100,
             interconnect_gbps=100, price_usd_per_gpu_hour=2.0, architecture="hopper")  # fmt: skip


def _est(spec, **deployment):  # type: ignore[no-untyped-def]
    return estimate(spec, DeploymentSpec(max_model_len=8192, **deployment), gpu=GPU, context_tokens=4096)


def test_decode_step_is_bytes_over_bandwidth_when_memory_bound() -> None:
    # 4 layers x 8 KV heads x (128 + 128) x 2 B = 16,384 B per cached token; W = the weights per GPU.
    spec = dense_spec(layers=4, heads=32, kv_heads=8, head_dim=128, hidden=4096, intermediate=11008)
    est = _est(spec, weights_bytes_per_gpu=10 * 2**30)
    p = perf_inputs(spec, est, GPU, "bf16")
    weights = 10 * 2**30
    assert p.dense_weight_bytes == weights and p.full_kv_bytes_per_token == 16_384
    # B = 8 sequences of T = 4,096: bytes = W + 8 x 4,096 x 16,384
    read = weights + 8 * 4096 * 16_384
    assert step_bytes(p, 8, 8, 4096) == read
    # memory time = read / (0.5 x 1e12); compute = 8 x 2 x active params / (0.5 x 1e14) is far smaller
    expected = read / (0.5 * 1e12) + 0.001
    assert tpot_seconds(p, 8, 4096, EFF) == pytest.approx(expected)


def test_a_step_is_the_linear_layers_roofline_then_attentions() -> None:
    # a big batch: the GEMMs are compute-bound while attention is bound by its KV reads; the step pays both
    # (one after the other), not the max of all bytes and all FLOPs
    spec = dense_spec(layers=4, heads=32, kv_heads=8, head_dim=128, hidden=4096, intermediate=11008)
    p = perf_inputs(spec, _est(spec, weights_bytes_per_gpu=2**30), GPU, "bf16")
    b, t = 512, 4096
    weights, kv = step_weight_bytes(p, b), step_kv_bytes(p, b, t)
    assert weights == 2**30 and kv == b * t * 16_384 and step_bytes(p, b, b, t) == weights + kv
    gemm, attention = step_gemm_flops(p, b), step_attention_flops(p, b, t)
    assert gemm == b * 2 * p.active_params and attention == b * 4 * 32 * 128 * 4 * t  # 4 x heads x dim, 4 layers
    linear_s = max(weights / 0.5e12, gemm / 0.5e14)
    attention_s = max(kv / 0.5e12, attention / 0.5e14)
    assert gemm / 0.5e14 > weights / 0.5e12 and kv / 0.5e12 > attention / 0.5e14  # the two bounds differ
    assert tpot_seconds(p, b, t, EFF) == pytest.approx(linear_s + attention_s + 0.001)


def test_windowed_layers_read_at_most_their_window() -> None:
    kinds = [(KVKind.SLIDING, 1024), (KVKind.FULL, None)] * 2
    spec = dense_spec(layers=4, heads=8, kv_heads=8, head_dim=64, kinds=kinds)
    p = perf_inputs(spec, _est(spec, weights_bytes_per_gpu=2**30), GPU, "bf16")
    per_layer = 8 * (64 + 64) * 2  # 2,048 B per cached token in each layer
    assert p.full_kv_bytes_per_token == 2 * per_layer
    assert p.windowed_kv == ((2 * per_layer, 1024),)
    kv_at_4096 = step_bytes(p, 1, 1, 4096) - step_bytes(p, 1, 0, 4096)
    assert kv_at_4096 == 2 * per_layer * 4096 + 2 * per_layer * 1024


def test_moe_reads_the_experts_a_batch_activates() -> None:
    # uniform routing, E = 8, k = 2: one token touches 2 experts, two tokens 8 x (1 - (6/8)^2) = 3.5
    assert expected_active_experts(8, 2, 1) == pytest.approx(2.0)
    assert expected_active_experts(8, 2, 2) == pytest.approx(3.5)
    assert expected_active_experts(8, 2, 10_000) == pytest.approx(8.0)
    # the same formula on a Polars column (the grid's path)
    frame = pl.DataFrame({"tokens": [1, 2]}).select(expected_active_experts(8, 2, pl.col("tokens")).alias("e"))
    assert frame["e"].to_list() == pytest.approx([2.0, 3.5])


def test_largest_batch_within_a_tpot_target_inverts_the_roofline() -> None:
    spec = dense_spec(layers=4, heads=32, kv_heads=8, head_dim=128)
    p = perf_inputs(spec, _est(spec, weights_bytes_per_gpu=10 * 2**30), GPU, "bf16")
    target = 0.05
    # memory-bound: TPOT(B) = (W + B x T x 16,384) / 5e11 + 0.001 <= 0.05
    by_hand = math.floor(((target - 0.001) * 0.5e12 - 10 * 2**30) / (4096 * 16_384))
    assert largest_batch_within(p, 4096, 10_000, target, EFF) == by_hand
    assert largest_batch_within(p, 4096, 10, target, EFF) == 10  # the memory bound binds first
    assert largest_batch_within(p, 4096, 10_000, 0.0001, EFF) == 0


def test_ttft_queueing_grows_without_bound_at_saturation() -> None:
    assert ttft_at_rate_seconds(0.1, 0.4, 0.0) == pytest.approx(0.1)
    # service 0.5 s at 1 request/s: rho = 0.5, waiting = 0.5 / 0.5 x 0.5 = 0.5 s
    assert ttft_at_rate_seconds(0.1, 0.4, 1.0) == pytest.approx(0.6)
    assert ttft_at_rate_seconds(0.1, 0.4, 2.0) == math.inf


def test_estimate_speed_for_llama_8b_on_h100() -> None:
    resolved = load_model("meta-llama/Llama-3.1-8B-Instruct")
    h100 = find_gpu_sku("h100-sxm-80gb")
    est = estimate(resolved.spec, DeploymentSpec(max_model_len=4096), gpu=h100,
                   checkpoint_bytes=resolved.checkpoint_bytes, context_tokens=4096, concurrency=64)  # fmt: skip
    pf = performance(resolved.spec, est, h100, concurrency=64, input_tokens=3840, output_tokens=256, chunk_tokens=8192)
    # decode at the mean context 3,840 + 128: weights + 64 x 3,968 x 131,072 B over the achievable bandwidth
    read = est.weights_bytes_per_gpu + 64 * 3968 * 131_072
    memory_s = read / (DEFAULT_EFFICIENCY.memory_bandwidth * 3350e9)
    assert pf.memory_bound
    assert pf.tpot_ms == pytest.approx((memory_s + DEFAULT_EFFICIENCY.step_overhead_s) * 1e3)
    # a closed loop's generation: 256 decode steps plus each of the 64 prompts' prefill beside the others
    generation_s = 256 * pf.tpot_ms / 1e3 + 64 * pf.prefill_ms / 1e3
    assert pf.output_tokens_per_second == pytest.approx(64 * 256 / generation_s)
    assert pf.output_tokens_per_second < 64 / (pf.tpot_ms / 1e3)  # below the decode steps' own rate
    assert pf.ttft_ms == pytest.approx(pf.prefill_ms + DEFAULT_EFFICIENCY.request_overhead_s * 1e3)
    assert pf.ttft_ms > 0 and pf.prefill_chunks == 1


def test_a_tpot_target_changes_the_placement_where_it_binds() -> None:
    resolved = load_model("meta-llama/Llama-3.1-8B-Instruct")
    h100 = find_gpu_sku("h100-sxm-80gb")
    base = WorkloadProfile(
        name="chat", models=("meta-llama/Llama-3.1-8B-Instruct",), target_concurrency=200, context_tokens=4096,
        gpus=("h100-sxm-80gb",), tp_sizes=(1,), pp_sizes=(1,), output_tokens=256,
    )  # fmt: skip
    memory_only = place(resolved.spec, base, [h100], model_id=base.models[0], checkpoint_bytes=resolved.checkpoint_bytes)
    plain = memory_only.best
    assert plain is not None and plain.binding == "memory"
    # TPOT(B) = (W + B x 3,968 x 131,072) / (eff x 3,350 GB/s) + overhead; a 12 ms target solves to
    target_ms = 12.0
    w = estimate(resolved.spec, DeploymentSpec(max_model_len=4096), gpu=h100,
                 checkpoint_bytes=resolved.checkpoint_bytes).weights_bytes_per_gpu  # fmt: skip
    eff = DEFAULT_EFFICIENCY
    b_latency = math.floor(
        ((target_ms / 1e3 - eff.step_overhead_s) * eff.memory_bandwidth * 3350e9 - w) / (3968 * 131_072)
    )
    assert 1 <= b_latency < plain.planned_per_replica  # the target binds before memory does
    slo = place(resolved.spec, WorkloadProfile(**{**_fields(base), "tpot_ms_target": target_ms}), [h100],
                model_id=base.models[0], checkpoint_bytes=resolved.checkpoint_bytes)  # fmt: skip
    best = slo.best
    assert best is not None and best.binding == "tpot"
    assert best.planned_per_replica == best.b_latency == b_latency
    assert best.replicas == math.ceil(200 / b_latency) > plain.replicas
    assert best.tpot_ms is not None and best.tpot_ms <= target_ms
    assert best.usd_per_million_output_tokens is not None and plain.usd_per_million_output_tokens is not None
    # fewer sequences per replica: each token costs more
    assert best.usd_per_million_output_tokens > plain.usd_per_million_output_tokens


def _fields(workload: WorkloadProfile) -> dict[str, object]:
    return {name: getattr(workload, name) for name in WorkloadProfile.__dataclass_fields__}
