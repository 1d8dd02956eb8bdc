"""vLLM 0.34's KV cache sized from the memory measured after warmup (the extensible KV cache, `KvSizing.MEASURED`).

Oracles, none of them capplan's output: hand derivations from the 0.34.0 wheel, each step as the source writes it:
- `v1/worker/extensible_kv_cache.py` measure_kv_cache_bytes:
      non_kv_used = init_free - free - committed;  headroom = free + committed
      margin = max(KV_CACHE_MARGIN_FLOOR_BYTES (1 GiB, ROCm 3 GiB), int(transient_peak x 0.75))
      available = min(requested - non_kv_used, headroom - margin) - max(transient_peak, torch_reserve_growth)
  then `blocks_within(available)`;
- `gpu_worker.determine_available_memory` / `initialize_from_config`: the transient peak the cache keeps free starts as
  `peak_activation_memory` = the profiling run's transient_peak_headroom (torch peak - allocated after it) + the
  CUDA-graph estimate; `v1/worker/utils.py` request_memory: requested = ceil(total x utilization), no refusal when
  free memory is below it with the extensible cache;
- `config/cache.py`: resolved_gpu_memory_utilization 1.0 with the extensible cache, DEFAULT_BLOCK_SIZE 64;
  `platforms/interface.py` update_block_size_for_backend with the backends' `get_preferred_block_size`
  (`rocm_attn.py`: 16 whatever the default; `cutlass_mla.py`: 128 only).
The profiling run's own terms (the transient peak, the persistent buffers, non-torch memory, the graph estimate) are
0.33's, which other tests hold against vLLM 0.33's code; here they are read off the 0.33 estimate's named terms, and
free memory at init is total - the CUDA context (`ec.VLLM_INIT_CONTEXT_BYTES`, read off public start refusals) - the
other processes' memory.
"""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from capacity import engine_constants as ec
from capacity.engines.registry import engine_profile
from capacity.engines.vllm.releases import block_size
from capacity.estimate import Estimate, estimate
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec
from models_registry.sources.gpu_catalog import find_gpu_sku
from pipelines.cli import app
from tests.handmade import dense_spec, mla_spec
from tests.test_grid import gdn_spec, moe_spec

GIB = 1 << 30
PERSISTENT_TERMS = ("MoE workspace (persistent)", "sampler: penalty bins (persistent, V2 runner)")


def _estimate(model: ModelSpec, gpu: GpuSku, version: str, **deployment: object) -> Estimate:
    return estimate(model, DeploymentSpec(engine="vllm", engine_version=version, **deployment), gpu=gpu)  # type: ignore[arg-type]


def _measured_available(profiled: Estimate, gpu: GpuSku, utilization: float, other_bytes: int) -> int:
    """measure_kv_cache_bytes over the profiling run's terms of the 0.33 estimate, step by step as the source. Not
    free at init: the CUDA context and, above TP 2 on an NVLink switch board, NCCL's NVLS buffers (both public
    measurements, `ec.VLLM_INIT_CONTEXT_BYTES`, `ec.VLLM_NVLS_TP8_BYTES` scaled by TP / 8), and other processes'."""
    total, rocm = profiled.gpu_memory_bytes, gpu.amd
    nvls = ec.VLLM_NVLS_TP8_BYTES * profiled.tp // 8 if gpu.nvlink_multicast and profiled.tp > 2 else 0
    named = dict(profiled.activation_buffers)
    persistent = sum(named.get(term, 0) for term in PERSISTENT_TERMS)
    transient_headroom = profiled.activation_peak_bytes_per_gpu - persistent
    graphs = profiled.cuda_graph_bytes_per_gpu
    init_free = total - ec.VLLM_INIT_CONTEXT_BYTES - nvls - other_bytes
    committed = 0  # the prefix warmup committed is released before capture (`commit(min_committed_blocks, shrink)`)
    free = init_free - (profiled.weights_bytes_per_gpu + persistent + profiled.non_torch_bytes_per_gpu + graphs)
    requested = math.ceil(total * utilization)
    transient_peak = transient_headroom + graphs  # `peak_activation_memory`
    non_kv_used = init_free - free - committed
    headroom = free + committed
    margin = max((3 if rocm else 1) << 30, int(transient_peak * 0.75))
    available = min(requested - non_kv_used, headroom - margin)
    available -= max(transient_peak, 0)
    return max(available, 0)


MODELS = {
    "dense-8b": dense_spec(layers=36, kv_heads=8, intermediate=12288, vocab=151936, context=40960),
    "moe": moe_spec(),
}
TP = {"dense-8b": 1, "moe": 4}  # the MoE's 94 GB of bf16 weights over 4 GPUs (on H100: NVLS buffers at init)


@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize(
    ("gpu_id", "utilization", "other_gib"),
    [
        ("h100-sxm-80gb", None, 0),  # the default: utilization 1.0, the device bound binds
        ("h100-sxm-80gb", 0.9, 0),  # the requested budget binds: no margin, nothing missing at init charged
        ("h100-sxm-80gb", 0.97, 0),
        ("h100-sxm-80gb", None, 20),  # another process's 20 GiB comes off through the free memory at init
        ("h100-sxm-80gb", 0.5, 20),  # ... or not at all where the requested budget is far below it
        ("l40s-48gb", None, 0),
        ("mi300x-192gb", None, 0),  # ROCm: a 3 GiB margin floor
    ],
)
def test_budget_is_measure_kv_cache_bytes(model_name: str, gpu_id: str, utilization: float | None, other_gib: int) -> None:
    model, gpu, other = MODELS[model_name], find_gpu_sku(gpu_id), other_gib * GIB
    # the same batch in both releases (their batch defaults are the same table), so the profiling terms are
    tp = TP[model_name]
    profiled = _estimate(model, gpu, "0.33.0", gpu_memory_utilization=0.9, tp=tp)
    measured = _estimate(model, gpu, "0.34.0", gpu_memory_utilization=utilization, other_process_bytes=other, tp=tp)
    assert measured.max_num_batched_tokens == profiled.max_num_batched_tokens
    assert measured.gpu_memory_utilization == (utilization if utilization is not None else 1.0)
    expected = _measured_available(profiled, gpu, measured.gpu_memory_utilization, other)
    assert expected > 0
    # capplan truncates total x utilization where request_memory takes its ceiling: at most a byte apart
    assert abs(measured.kv_budget_bytes_per_gpu - expected) <= 1
    assert measured.pool.capacity_units == expected // measured.pool.unit_bytes


def test_block_size_of_release_0_34() -> None:
    """CacheConfig.DEFAULT_BLOCK_SIZE 64, which FlashAttention, FlashInfer and the MLA backends keep (their kernels
    take multiples of 16, or 32 / 64), CUTLASS MLA's 128 and ROCM_ATTN's 16 excepted."""
    h100, b200, mi300x = (find_gpu_sku(g) for g in ("h100-sxm-80gb", "b200-180gb", "mi300x-192gb"))
    dense, mla = dense_spec(), mla_spec()
    assert block_size(dense, h100, version="0.34.0") == 64
    assert block_size(dense, b200, version="0.34.0") == 64
    assert block_size(dense, mi300x, version="0.34.0") == 16  # ROCM_ATTN: get_preferred_block_size -> 16
    assert block_size(dense, h100, version="0.33.0") == 16
    for gpu in (h100, b200, mi300x):
        for kv_dtype in ("auto", "fp8"):
            older = block_size(mla, gpu, kv_dtype, "0.33.0")  # 16, 32 (FlashInfer MLA), 64 or 128 (CUTLASS)
            assert block_size(mla, gpu, kv_dtype, "0.34.0") == max(older, 64)


def test_hybrid_attention_block_grows_from_64() -> None:
    """`_align_hybrid_block_size`: the kernel alignment is max(the backend's smallest kernel block, cache block_size),
    so from 0.34 the attention block of a GDN hybrid grows in steps of 64 until its page holds the state page.
    The hand model (`gdn_spec`, bf16, TP 1, Ampere: no GDN prefill checkpoints): an attention page of 2 KV heads x
    (256 + 256) x 2 B = 2,048 B a token; a state page of conv + recurrent 16 x 128 x 128 elements x 2 B, between
    557,056 and 589,824 B whichever conv columns are kept (3 or 4 x 8,192). 0.33: 16 x ceil(page / (16 x 2,048))
    = 16 x 18 = 288 tokens; 0.34: 64 x ceil(page / (64 x 2,048)) = 64 x 5 = 320."""
    model, gpu = gdn_spec(), find_gpu_sku("a100-sxm-80gb")
    assert _estimate(model, gpu, "0.33.0").pool.block_size == 288
    assert _estimate(model, gpu, "0.34.0").pool.block_size == 320


def test_others_memory_is_not_refused_at_start() -> None:
    """request_memory refuses when free memory at init is below total x utilization, unless the cache is extensible."""
    gpu, model = find_gpu_sku("h100-sxm-80gb"), MODELS["dense-8b"]
    total = gpu.memory_total_bytes
    assert engine_profile("vllm", "0.33.0").start_memory_problem(total, 0.9, 20 * GIB) is not None
    assert engine_profile("vllm", "0.34.0").start_memory_problem(total, 0.9, 20 * GIB) is None
    est = _estimate(model, gpu, "0.34.0", gpu_memory_utilization=0.9, other_process_bytes=20 * GIB)
    assert not est.start_memory_refused and est.kv_budget_bytes_per_gpu > 0


def test_nvls_buffers_are_missing_at_init_on_a_switch_board() -> None:
    """The init snapshot is taken after the NCCL communicators exist (`init_device`: "Initialize the distributed
    environment BEFORE taking memory snapshot"): at TP 8 on an NVLink switch board NVLS's buffers are not free at
    init, so the device bound charges them (`ec.VLLM_NVLS_TP8_BYTES`, scaled by TP / 8); at TP 2, or over PCIe, none."""
    model = dense_spec(layers=80, heads=64, kv_heads=8, hidden=8192, intermediate=28672, vocab=128256)
    h200, pcie = find_gpu_sku("h200-sxm-141gb"), find_gpu_sku("l40s-48gb")
    init_terms = {
        (gpu.id, tp): dict(_estimate(model, gpu, "0.34.0", tp=tp).activation_buffers)
        for gpu, tp in ((h200, 8), (h200, 4), (h200, 2), (pcie, 4))
    }
    missing = {key: next(n for name, n in terms.items() if "missing at init" in name) for key, terms in init_terms.items()}
    assert missing[h200.id, 8] == ec.VLLM_INIT_CONTEXT_BYTES + ec.VLLM_NVLS_TP8_BYTES
    assert missing[h200.id, 4] == ec.VLLM_INIT_CONTEXT_BYTES + ec.VLLM_NVLS_TP8_BYTES // 2
    assert missing[h200.id, 2] == missing[pcie.id, 4] == ec.VLLM_INIT_CONTEXT_BYTES


def test_default_release_is_still_sized_as_profiled() -> None:
    """No --engine-version: 0.33 (the newest release also checked against vLLM's own code), 0.92 and 16 tokens."""
    est = estimate(MODELS["dense-8b"], DeploymentSpec(engine="vllm"), gpu=find_gpu_sku("h100-sxm-80gb"))
    assert (est.gpu_memory_utilization, est.pool.block_size, est.engine_version) == (0.92, 16, "0.33")
    assert ec.known_vllm_release("0.34.0") and ec.known_vllm_release("0.34.1")


def test_explicit_utilization_below_one_is_noted_with_what_it_keeps_out() -> None:
    """0.34 warns when 0.7 < utilization < 1.0 keeps at least 1 GiB of free memory out of the cache; what it keeps
    out is the device bound less the requested one."""
    gpu, model = find_gpu_sku("h100-sxm-80gb"), MODELS["dense-8b"]
    default = _estimate(model, gpu, "0.34.0")
    capped = _estimate(model, gpu, "0.34.0", gpu_memory_utilization=0.9)
    kept_out = default.kv_budget_bytes_per_gpu - capped.kv_budget_bytes_per_gpu
    note = next(n for n in capped.notes if n.startswith("gpu_memory_utilization 0.9 keeps"))
    assert f"keeps {kept_out / GIB:.2f} GiB" in note
    assert not any(n.startswith("gpu_memory_utilization 0.95 keeps") for n in _estimate(model, gpu, "0.34.0", gpu_memory_utilization=0.99).notes)


def test_cli_derivation_shows_both_bounds() -> None:
    result = CliRunner().invoke(
        app, ["estimate", "Qwen/Qwen3-8B", "--gpu", "h100-sxm-80gb", "--engine", "vllm", "--engine-version", "0.34.0"]
    )
    assert result.exit_code == 0, result.output
    assert "usable   = 79.19 GiB x 1 = 79.19 GiB" in result.output
    assert "KV budget = min(79.19 GiB + " in result.output
    assert "block = 64 tokens" in result.output
    assert "extensible KV cache: margin max(1 GiB, 0.75 x (transient peak + graph estimate))" in result.output


def test_a_0_34_command_turns_the_extensible_cache_off() -> None:
    """0.34's parser adds --enable-extensible-kv-cache and its negatives (`ENGINE_FLAGS["vllm"]["later"]`, written by
    tools/engine_flags.py --later from the 0.34.0 wheel's own parser); with it off, config/vllm.py
    `_resolve_extensible_kv_cache` leaves the profiling-run sizing and `resolved_gpu_memory_utilization` 0.92, the
    0.33 budget rule with 0.34's 64-token block."""
    from capacity.engines.command_line import CommandLineError, read_command

    for flag in ("--no-enable-extensible-kv-cache", "--disable-extensible-kv-cache"):
        command = read_command(f"vllm serve Qwen/Qwen3-8B {flag}", "0.34.0")
        assert command.options["extensible_kv_cache"] is False
    assert read_command("vllm serve M --enable-extensible-kv-cache", "0.34.0").options["extensible_kv_cache"] is True
    with pytest.raises(CommandLineError, match=r"not a flag of vLLM 0\.33\.0"):
        read_command("vllm serve M --no-enable-extensible-kv-cache", "0.33.0")
    gpu, model = find_gpu_sku("h100-sxm-80gb"), MODELS["dense-8b"]
    off = _estimate(model, gpu, "0.34.0", extensible_kv_cache=False)
    profiled = _estimate(model, gpu, "0.33.0")
    assert off.gpu_memory_utilization == 0.92 and off.pool.block_size == 64
    assert off.kv_budget_bytes_per_gpu == profiled.kv_budget_bytes_per_gpu
    assert off.overhead_bytes_per_gpu == profiled.overhead_bytes_per_gpu
    older = _estimate(model, gpu, "0.33.0", extensible_kv_cache=False)
    assert older.kv_budget_bytes_per_gpu == profiled.kv_budget_bytes_per_gpu
    assert any("vLLM 0.33.0 has none" in n for n in older.notes)


def test_the_cli_reads_a_pasted_0_34_command() -> None:
    pasted = "docker run vllm/vllm-openai:v0.34.0 --model Qwen/Qwen3-8B --no-enable-extensible-kv-cache"
    result = CliRunner().invoke(app, ["estimate", "--gpu", "h100-sxm-80gb", "--from-command", pasted])
    assert result.exit_code == 0, result.output
    assert "usable   = 79.19 GiB x 0.92 = 72.85 GiB" in result.output and "block = 64 tokens" in result.output


@pytest.mark.parametrize(
    ("connector", "gpu_id", "off"),
    [
        ("NixlConnector", "h100-sxm-80gb", True),  # FABRIC handles without an IMEX channel
        ("MooncakeConnector", "h100-sxm-80gb", False),  # REGISTERS: off on ROCm only
        ("MooncakeConnector", "mi300x-192gb", True),
        ("LMCacheMPConnector", "h100-sxm-80gb", True),  # legacy CUDA IPC
        ("LMCacheConnectorV1", "h100-sxm-80gb", False),  # in process
    ],
)
def test_connectors_that_turn_the_extensible_cache_off(connector: str, gpu_id: str, off: bool) -> None:
    """0.34 `_resolve_extensible_kv_cache` over `KVConnectorFactory.kv_cache_access` (each connector's classmethod)."""
    from capacity.engines.kinds import Engine
    from capacity.features.offload_sizing import kv_offload_for

    gpu = find_gpu_sku(gpu_id)
    model = MODELS["dense-8b"]
    kv = kv_offload_for(Engine.VLLM, connector=connector)
    est = _estimate(model, gpu, "0.34.0", kv_offload=kv)
    assert (est.gpu_memory_utilization == 0.92) is off
    assert any(n.startswith("the extensible KV cache is off") for n in est.notes) is off


@pytest.mark.parametrize(
    ("version", "charged"),
    [("0.7.3", True), ("0.9.0", True), ("0.10.1", True), ("0.11.0", False), ("0.19.0", False), ("0.33.0", False)],
)
def test_nvls_buffers_are_charged_where_the_baseline_precedes_nccl(version: str, charged: bool) -> None:
    """Read in the wheels: V0 `worker.py` init_device (0.7.3: `baseline_snapshot = MemorySnapshot()` before
    `init_worker_distributed_environment`) and V1 `gpu_worker.py` (0.9.0 `init_gpu_memory`, 0.10.1 `init_snapshot`
    before it; 0.11.0 on after it): NCCL's NVLS buffers (TP > 2 on an NVLink switch board) are non-torch memory the
    older releases charge. From 0.11 they are not: 0.19.0 on H100 prints 2.07 GiB of non-torch memory at TP 2 and
    2.13 at TP 4 (evaluation/data/vllm_public_measurements.yaml, llm-d-planner's report)."""
    model = dense_spec(layers=80, heads=64, kv_heads=8, hidden=8192, intermediate=28672, vocab=128256)
    h100 = find_gpu_sku("h100-sxm-80gb")
    tp4, tp2 = (_estimate(model, h100, version, tp=tp).non_torch_bytes_per_gpu for tp in (4, 2))
    assert tp4 - tp2 == (ec.VLLM_NVLS_TP8_BYTES // 2 if charged else 0)
    v0 = estimate(model, DeploymentSpec(engine="vllm", engine_version="0.9.0", tp=8, vllm_v0_engine=True), gpu=h100)
    assert v0.non_torch_bytes_per_gpu - _estimate(model, h100, "0.7.3", tp=2).non_torch_bytes_per_gpu == ec.VLLM_NVLS_TP8_BYTES


def test_a_release_without_rules_says_whose_rules_size_it() -> None:
    gpu, model = find_gpu_sku("h100-sxm-80gb"), MODELS["dense-8b"]
    newer = _estimate(model, gpu, "0.35.0")
    assert any(n.startswith("capplan has no rules for vLLM 0.35.0: sized by those of 0.34") for n in newer.notes)
    assert not any("no rules" in n for n in _estimate(model, gpu, "0.34.2").notes)
