"""SGLang 0.5.23's own rules, derived by hand from its source (the 0.5.23 wheel), against capplan.

Every expected number is worked out in the comment beside it from the engine's code and the model's
config.json, not from what capplan printed. Sources (python/sglang/srt/...):
- `arg_groups/memory_hook.py` `handle_gpu_memory_settings`, `reserve_for_graph_mb`;
  `arg_groups/cuda_graph_hook.py` `generate_prefill_cuda_graph_batch_sizes`;
- `mem_cache/kv_cache_configurator.py` `_profile_available_bytes`, `_handle_max_mamba_cache`,
  `resolve_max_num_reqs`; `model_executor/pool_configurator.py` `DefaultPoolConfigurator`,
  `HybridSWAPoolConfigurator`, `validate_swa_pool_size`, `MemoryPoolConfig.__post_init__`;
- `configs/model_config.py` `is_hybrid_swa_model`; `configs/mamba_utils.py` (state shapes and dtypes).

GPU memory is the catalog's (what the driver reports), read by SGLang in MiB.
"""

from __future__ import annotations

import json
import os
import subprocess
import types
from pathlib import Path

import pytest

from capacity.engines import DefaultsRequest, Engine, PoolRequest
from capacity.engines import sglang as sg
from capacity.engines.protocol import StartRequest
from capacity.engines.registry import engine_profile
from capacity.estimate import estimate
from capacity.features.speculative import SpecMethod, SpeculativeSpec
from capacity.hf_config import parse_config
from capacity.pool import b_max, max_concurrency
from capacity.spec import DeploymentSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from tests.conftest import SGLANG_CPU_PREAMBLE

GIB = 1 << 30
PROFILE = engine_profile(Engine.SGLANG)
CONTEXT = int(0.6 * GIB)  # engine_constants.SGLANG_CONTEXT_BYTES


def _spec(model_id: str):  # type: ignore[no-untyped-def]
    return load_model(model_id).spec


def _estimate(model_id: str, gpu: str, **deployment: object):  # type: ignore[no-untyped-def]
    resolved = load_model(model_id)
    context = deployment.pop("context", None)
    return estimate(
        resolved.spec,
        DeploymentSpec(engine="sglang", **deployment),  # type: ignore[arg-type]
        gpu=find_gpu_sku(gpu),
        checkpoint_bytes=resolved.checkpoint_bytes,
        context_tokens=context,  # type: ignore[arg-type]
    )


# --- defaults: handle_gpu_memory_settings ---------------------------------------------------------


def test_prefill_graph_sizes() -> None:
    # range(4, 33, 4): 8; range(48, 257, 16): 14; range(288, 513, 32): 8; range(576, 1025, 64): 8;
    # range(1280, 4097, 256): 12; range(4608, max + 1, 512): 8 at 8192, 24 at 16384
    assert len(sg.prefill_cuda_graph_sizes(2048)) == 8 + 14 + 8 + 8 + 4  # 1280, 1536, 1792, 2048
    assert len(sg.prefill_cuda_graph_sizes(4096)) == 50
    assert len(sg.prefill_cuda_graph_sizes(8192)) == 58
    assert len(sg.prefill_cuda_graph_sizes(16384)) == 74


@pytest.mark.parametrize(
    ("gpu", "tp", "mla", "chunked", "decode_bs", "reserved", "fraction"),
    [
        # H100 SXM, 85,029,615,043 B = 81,090.56 MiB: the < 90 GiB tier (8192 tokens, decode bs 256 at TP < 4);
        # 512 + 1.5 x 8192 + 1 x 1 / 8 x 1024 + 2 x 256 + 8 x 58 = 512 + 12288 + 128 + 512 + 464 = 13,904 MiB
        # (above the 10 GiB floor); (81,090.56 - 13,904) / 81,090.56 = 0.82854 -> 0.829
        ("h100-sxm-80gb", 1, False, 8192, 256, 13904, 0.829),
        # L4, 22,522 MiB: the < 35 GiB tier (4096, bs 48); 512 + 6144 + 128 + 96 + 8 x 50 = 7,280 MiB; no floor
        # at or below 60 GiB; (22,522 - 7,280) / 22,522 = 0.67676 -> 0.677
        ("l4-24gb", 1, False, 4096, 48, 7280, 0.677),
        # T4, 14,929.92 MiB: the < 20 GiB tier (2048, bs 8); 512 + 3072 + 128 + 16 + 8 x 42 = 4,064;
        # (14,929.92 - 4,064) / 14,929.92 = 0.72780 -> 0.728
        ("t4-16gb", 1, False, 2048, 8, 4064, 0.728),
        # B200, 182,640.64 MiB: the largest tier (16384, bs 512); 512 + 24576 + 128 + 1024 + 8 x 74 = 26,832;
        # (182,640.64 - 26,832) / 182,640.64 = 0.85309 -> 0.853
        ("b200-180gb", 1, False, 16384, 512, 26832, 0.853),
        # H200, 143,166.58 MiB, TP 8, an MLA model (DeepSeek-V3): the < 160 GiB tier (8192, bs 512 at TP >= 4);
        # 512 + 12288 + 8 / 8 x 1024 + 2 x 512 + 1536 (MLA prefill graphs) = 16,384;
        # (143,166.58 - 16,384) / 143,166.58 = 0.88556 -> 0.886
        ("h200-sxm-141gb", 8, True, 8192, 512, 16384, 0.886),
        # H100 at TP 4: decode bs 512; 512 + 12288 + 512 + 1024 + 464 = 14,800; 66,290.56 / 81,090.56 -> 0.817
        ("h100-sxm-80gb", 4, False, 8192, 512, 14800, 0.817),
    ],
)
def test_mem_fraction_static_by_tier(
    gpu: str, tp: int, mla: bool, chunked: int, decode_bs: int, reserved: int, fraction: float
) -> None:
    total = find_gpu_sku(gpu).memory_total_bytes
    assert sg.chunked_prefill_size(total) == chunked
    assert sg.decode_cuda_graph_max_bs(total, tp) == decode_bs
    assert sg.reserved_mib(total, tp, 1, mla=mla) == reserved
    assert sg.mem_fraction_static(total, tp, 1, mla=mla) == fraction


def test_floor_of_ten_gib_above_60_gib() -> None:
    # 64 GiB = 65,536 MiB (> 60 GiB), the < 90 GiB tier: 13,904 MiB reserved; at 61 GiB the same;
    # a made-up 62 GiB part with TP 1 keeps 13,904 > 10,240, so the floor shows only through a smaller
    # reserve: none of the defaults' reserves on a > 60 GiB device is below 10 GiB except none -> check the
    # rule on its own: 40 GiB (40,960 MiB, the < 60 GiB tier: 4096 / bs 32) reserves
    # 512 + 6144 + 128 + 64 + 400 = 7,248 MiB, no floor
    assert sg.reserved_mib(40 * GIB, 1, 1, mla=False) == 7248
    # 61 GiB (62,464 MiB, < 90 GiB tier): 13,904 -> above the floor, unchanged
    assert sg.reserved_mib(61 * GIB, 1, 1, mla=False) == 13904


def test_defaults_of_the_profile() -> None:
    h100 = find_gpu_sku("h100-sxm-80gb")
    llama = _spec("meta-llama/Llama-3.1-8B-Instruct")
    d = PROFILE.defaults(DefaultsRequest(llama, h100, h100.memory_total_bytes, 131072, 1, 1))
    # no sequence cap here: resolve_max_num_reqs sizes it from the pool (at least 2,048); the fraction by
    # nvidia-smi's memory.total, 81,559 MiB: (81,559 - 13,904) / 81,559 = 0.8295 -> 0.830
    assert (d.gpu_memory_utilization, d.max_num_seqs, d.max_num_batched_tokens, d.block_size) == (0.83, 0, 8192, 1)
    b200 = find_gpu_sku("b200-180gb")
    # SM100: trtllm_mha (model_override_base.get_default_attn_backend) -> page 64 (_mla_backend_page_constraints)
    assert PROFILE.defaults(DefaultsRequest(llama, b200, b200.memory_total_bytes, 131072, 1, 1)).block_size == 64
    mi300x = find_gpu_sku("mi300x-192gb")
    # AMD: the aiter backend; context 131,072 > 8,192 -> 0.85 x 0.864 (196,587.52 MiB: 26,832 reserved, 0.864)
    assert PROFILE.defaults(DefaultsRequest(llama, mi300x, mi300x.memory_total_bytes, 131072, 1, 1)).gpu_memory_utilization == (
        pytest.approx(0.864 * 0.85)
    )
    assert PROFILE.defaults(DefaultsRequest(llama, mi300x, mi300x.memory_total_bytes, 8192, 1, 1)).gpu_memory_utilization == 0.864


def test_vlm_factor() -> None:
    # adjust_mem_fraction_for_vlm, Gemma-3-27B's SigLIP tower (27 layers, hidden 1152):
    # c = 27 x 1152^2 / (24 x 1024^2) = 35,831,808 / 25,165,824 = 1.42383; 1 - 0.1 x 0.42383 = 0.957617;
    # x 0.95 = 0.909736 (on an H100: 0.829 x 0.909736 = 0.7542)
    assert sg.vlm_mem_fraction_factor(27, 1152) == pytest.approx(0.909736, abs=1e-6)
    assert sg.vlm_mem_fraction_factor(None, None) == pytest.approx(0.95)  # ViT-L/14 itself
    assert sg.vlm_mem_fraction_factor(64, 2048) == pytest.approx(0.95 * 0.8)  # clamped at 0.8
    assert sg.vlm_mem_fraction_factor(6, 512) == pytest.approx(0.95 * 1.05)  # clamped at 1.05


def test_nvidia_smi_memory_where_the_sku_carries_it() -> None:
    # H100 SXM: nvidia-smi memory.total 81,559 MiB: (81,559 - 13,904) / 81,559 = 0.82952 -> 0.830
    h100 = find_gpu_sku("h100-sxm-80gb")
    with_smi = types.SimpleNamespace(memory_total_bytes=h100.memory_total_bytes, memory_total_mib_smi=81_559)
    assert sg.device_memory_bytes(with_smi, h100.memory_total_bytes) == 81_559 << 20  # type: ignore[arg-type]
    assert sg.mem_fraction_static(81_559 << 20, 1, 1) == 0.830
    # an overridden device memory (--gpu-memory-gib) is what it says
    assert sg.device_memory_bytes(with_smi, 80 * GIB) == 80 * GIB  # type: ignore[arg-type]
    assert sg.device_memory_bytes(None, 80 * GIB) == 80 * GIB


@pytest.mark.parametrize(
    ("tokens", "context", "slots", "per_request", "requests"),
    [
        (410_345, 131072, None, 3, 2048),  # int(410,345 / 131,072 x 512) = 1,602 -> clamped up to 2,048
        (2_000_000, 131072, None, 3, 4096),  # int(7,812.5) -> clamped down to 4,096
        (3_000, 8192, None, 3, 1500),  # 2,048 > 3,000 // 2 = 1,500
        (1_150_157, 262144, 328, 5, 65),  # Qwen3-Next below: 328 state slots // 5 per request = 65
    ],
)
def test_max_running_requests(tokens: int, context: int, slots: int | None, per_request: int, requests: int) -> None:
    assert sg.max_running_requests(tokens, context, slots, per_request) == requests


# --- budget and the token pool: _profile_available_bytes, DefaultPoolConfigurator --------------------


def test_llama_8b_on_h100_token_count() -> None:
    # mem_fraction_static by nvidia-smi's 81,559 MiB: (81,559 - 13,904) / 81,559 = 0.8295 -> 0.830
    # budget = int(85,029,615,043 x 0.830) - weights (the checkpoint, 16,060,522,496) - 0.6 GiB
    #        = 70,574,580,485 - 16,060,522,496 - 644,245,094 = 53,869,812,895
    # cell = 8 KV heads x (128 + 128) x 32 layers x 2 B = 131,072; tokens = 53,869,812,895 // 131,072 = 410,994
    est = _estimate("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb")
    assert est.kv_budget_bytes_per_gpu == 53_869_812_895
    assert est.kv_cache_tokens == 410_994
    assert est.block_size == 1 and est.num_blocks == 410_994
    assert est.starts


def test_llama_8b_on_b200_pages_of_64() -> None:
    # nvidia-smi 183,359 MiB: (183,359 - 26,832) / 183,359 = 0.8537 -> 0.854
    # budget = int(191,512,591,729 x 0.854) - 16,060,522,496 - 644,245,094 = 163,551,753,336 - ... = 146,846,985,746
    # 146,846,985,746 // 131,072 = 1,120,353 tokens, page-aligned to 64: 1,120,320 (17,505 pages)
    est = _estimate("meta-llama/Llama-3.1-8B-Instruct", "b200-180gb")
    assert est.kv_budget_bytes_per_gpu == 146_846_985_746
    assert est.kv_cache_tokens == 1_120_320
    assert est.block_size == 64 and est.num_blocks == 17_505


def test_llama_8b_fp8_on_l4_starts_at_the_default_length() -> None:
    # SGLang does not refuse a pool shorter than context_len: the scheduler caps request lengths at
    # max_total_num_tokens (refuses_short_pool False), unlike vLLM's _check_enough_kv_cache_memory
    est = _estimate("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "l4-24gb")
    assert est.max_model_len == 131072 and 0 < est.kv_cache_tokens < 131072
    assert est.starts and not est.fits  # one request of 131,072 tokens never fits the pool
    short = _estimate("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "l4-24gb", context=8192)
    assert short.starts and short.fits and short.b_max == short.kv_cache_tokens // 8192


def test_llama_8b_bf16_on_l4_does_not_start() -> None:
    # mem_fraction_static on the L4 by nvidia-smi's 23,034 MiB: (23,034 - 7,280) / 23,034 = 0.6839 -> 0.684;
    # int(23,616,028,672 x 0.684) = 16,153,363,611 B of static memory leave 92,841,115 B beside the
    # 16,060,522,496 B of bf16 weights, less than the 0.6 GiB context reserve: no KV budget
    est = _estimate("meta-llama/Llama-3.1-8B-Instruct", "l4-24gb")
    assert est.gpu_memory_utilization == 0.684
    assert est.kv_budget_bytes_per_gpu == 16_153_363_611 - 16_060_522_496 - CONTEXT
    assert not est.starts and not est.fits


def test_deepseek_v3_mla_cell() -> None:
    # calculate_mla_kv_cache_dim: kv_lora_rank 512 + qk_rope_head_dim 64 = 576 per layer, one "head",
    # replicated on every TP rank: 576 x 61 layers x 2 B = 70,272 B per token at TP 1 and TP 8
    spec = _spec("deepseek-ai/DeepSeek-V3")
    for tp in (1, 8):
        c = sg.cells(spec, 2, 4, tp, 1)
        assert (c.full_cell, c.full_layers, c.swa_layers, c.state_bytes, c.hybrid) == (70_272, 61, 0, 0, False)
    # a 10 GiB budget: 10,737,418,240 / 70,272 = 152,797.9 -> 152,797 tokens
    pool = PROFILE.stage_pools(PoolRequest(spec, 10 * GIB, 2, 4, 2, 8, 1, 1, 8192, 8192))[0]
    assert pool.capacity_units == 152_797 and pool.unit_bytes == 70_272


def test_deepseek_v32_dsa_cell_and_page() -> None:
    # DeepSeek-V3.2 (DSA): 61 MLA layers, each with the lightning indexer's key (index_head_dim 128):
    # _compute_dsa_indexer_cell_size: ceil_div(128 + 128 // 128 x 4, index_kpool 1) = 132 uint8 B per layer,
    # replicated. bf16 KV: (576 x 2 + 132) x 61 = 1,284 x 61 = 78,324 B per token.
    # fp8 KV (flashmla_kv, the Hopper default with fp8): calculate_mla_kv_cache_dim = 512 + 512 // 128 x 4
    # + 64 x 2 (bf16 rope) = 656 B; (656 + 132) x 61 = 48,068 B per token.
    config = json.loads((Path(__file__).parent / "configs" / "deepseek_v32-deepseek-v3.2.json").read_text())
    spec = parse_config(config)
    assert sg.cells(spec, 2, 4, 8, 1).full_cell == 78_324
    assert sg.cells(spec, 1, 4, 8, 1).full_cell == 48_068
    # page 64 x index_kpool for DSA on CUDA (model_overrides/deepseek_v2.py)
    h200 = find_gpu_sku("h200-sxm-141gb")
    assert PROFILE.defaults(DefaultsRequest(spec, h200, h200.memory_total_bytes, 163840, 8, 1)).block_size == 64


# --- hybrid SWA pools: is_hybrid_swa_model, HybridSWAPoolConfigurator ------------------------------


def _swa_split(c: sg.SglangCells) -> tuple[int, int, int, int, int, bool]:
    """How a hybrid-SWA model's cells split: full and SWA bytes per token, their layers, the window, hybrid."""
    return (c.full_cell, c.swa_cell, c.full_layers, c.swa_layers, c.window, c.hybrid)


def test_gemma_3_has_no_hybrid_swa_pool() -> None:
    # Gemma3ForConditionalGeneration is not in is_hybrid_swa_model's list (and model_overrides/
    # gemma2_gemma3.py sets disable_hybrid_swa_memory): all 62 layers keep every token in one pool,
    # cell = 16 KV heads x 256 x 62 x 2 B = 507,904
    spec = _spec("google/gemma-3-27b-it")
    c = sg.cells(spec, 2, 4, 1, 1)
    assert not sg.is_hybrid_swa(spec)
    assert (c.full_cell, c.full_layers, c.swa_cell, c.hybrid) == (507_904, 62, 0, False)
    pool = PROFILE.stage_pools(PoolRequest(spec, 40 * GIB, 2, 4, 2, 1, 1, 1, 8192, 8192))[0]
    # 42,949,672,960 // 507,904 = 84,562
    assert pool.swa_capacity_units is None and pool.capacity_units == 84_562


def test_gpt_oss_120b_hybrid_swa_split() -> None:
    # GptOssForCausalLM (SWA_SINK_ARCHS): 18 full + 18 sliding (window 128) layers, 8 KV heads x 64:
    # full per token 18 x 8 x 128 x 2 = 36,864, SWA 36,864; cell = 36,864 + 0.8 x 36,864 = 66,355.2
    # 40 GiB: full = int(42,949,672,960 / 66,355.2) = 647,269; SWA = int(647,269 x 0.8) = 517,815
    spec = _spec("openai/gpt-oss-120b")
    c = sg.cells(spec, 2, 4, 1, 1)
    assert _swa_split(c) == (36_864, 36_864, 18, 18, 128, True)
    assert c.swa_denominator == pytest.approx(66_355.2)
    pool = PROFILE.stage_pools(PoolRequest(spec, 40 * GIB, 2, 4, 2, 1, 1, 1, 8192, 8192))[0]
    assert (pool.capacity_units, pool.swa_capacity_units, pool.swa_window_tokens) == (647_269, 517_815, 128)
    # page 64 (B200): full 647,269 -> 647,232; SWA int(647,232 x 0.8) = 517,785 -> 517,760
    paged = PROFILE.stage_pools(PoolRequest(spec, 40 * GIB, 2, 4, 2, 1, 1, 64, 8192, 8192))[0]
    assert (paged.capacity_units, paged.swa_capacity_units) == (647_232, 517_760)


def test_gpt_oss_swa_pool_too_small_does_not_start() -> None:
    # validate_swa_pool_size: window 128 + page 1 >= SWA tokens refuses. A budget of 160 x 66,355.2 B:
    # full 160, SWA 128 -> 129 >= 128: ValueError; 163 full -> SWA int(130.4) = 130 > 129 starts
    spec = _spec("openai/gpt-oss-120b")
    refused = PROFILE.stage_pools(PoolRequest(spec, int(160 * 66_355.2), 2, 4, 2, 1, 1, 1, 8192, 8192))[0]
    assert refused.capacity_units == 0 and refused.swa_capacity_units == 0
    started = PROFILE.stage_pools(PoolRequest(spec, int(163 * 66_355.2) + 1, 2, 4, 2, 1, 1, 1, 8192, 8192))[0]
    assert (started.capacity_units, started.swa_capacity_units) == (163, 130)
    assert sg.swa_pool_starts(130, 128, 1) and not sg.swa_pool_starts(129, 128, 1)


def test_llama_4_chunked_layers_in_the_swa_pool() -> None:
    # Llama4ForConditionalGeneration: layers (i + 1) % 4 != 0 are the SWA (chunked, 8,192) layers: 36 of 48;
    # 8 KV heads x 128: 12 x 4,096 = 49,152 full, 36 x 4,096 = 147,456 SWA per token
    spec = _spec("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    c = sg.cells(spec, 2, 4, 1, 1)
    assert _swa_split(c) == (49_152, 147_456, 12, 36, 8192, True)
    # its config has no sliding_window, so validate_swa_pool_size checks nothing (floor 0): a budget for ~8,000
    # full-pool tokens gives an SWA pool of int(0.8 x 8,000) = 6,400 < 8,192 + 1 tokens and still starts
    assert c.floor_window == 0
    budget = int(8000 * (49_152 + 0.8 * 147_456)) + 1
    pool = PROFILE.stage_pools(PoolRequest(spec, budget, 2, 4, 2, 1, 1, 1, 8192, 8192))[0]
    assert (pool.capacity_units, pool.swa_capacity_units) == (8000, 6400)


def test_gemma_2_sliding_layers_stay_in_the_full_pool() -> None:
    spec = _spec("google/gemma-2-9b-it")  # Gemma2ForCausalLM: not a hybrid SWA architecture either
    assert not sg.is_hybrid_swa(spec) and not sg.cells(spec, 2, 4, 1, 1).hybrid


def test_gemma_4_hybrid_swa_with_unequal_layers() -> None:
    # Gemma4ForConditionalGeneration is hybrid SWA; get_hybrid_layer_ids from layer_types: 25 sliding (1024)
    # layers of 8 KV heads x 256 and 5 full layers of 2 KV heads x 512 (swa_head_dim / head_dim differ):
    # full 5 x 2 x 1024 x 2 = 20,480, SWA 25 x 8 x 512 x 2 = 204,800; cell = 20,480 + 0.8 x 204,800 = 184,320
    # 20 GiB: full = int(21,474,836,480 / 184,320) = 116,508; SWA = int(93,206.4) = 93,206
    spec = _spec("google/gemma-4-26B-A4B")
    c = sg.cells(spec, 2, 4, 1, 1)
    assert (c.full_cell, c.swa_cell, c.window, c.hybrid) == (20_480, 204_800, 1024, True)
    pool = PROFILE.stage_pools(PoolRequest(spec, 20 * GIB, 2, 4, 2, 1, 1, 1, 8192, 8192))[0]
    assert (pool.capacity_units, pool.swa_capacity_units) == (116_508, 93_206)


# --- Mamba / GDN hybrids: the state pool before the KV pool (_handle_max_mamba_cache) -----------------


def test_qwen3_next_state_per_request() -> None:
    # 36 gated-delta-net layers: conv (conv_dim 2 x 16 x 128 + 32 x 128 = 8,192, kernel 4 - 1 = 3) in bf16:
    # 24,576 x 2 = 49,152 B; SSM (32 heads, 128, 128) = 524,288 in float32 (mamba2_state_dtype default):
    # 2,097,152 B; (49,152 + 2,097,152) x 36 = 77,266,944 B. The 12 attention layers: 2 KV heads x 512 x 2
    # = 2,048 B each, 24,576 per token. extra_buffer architecture: 3 + 2 state slots per running request.
    spec = _spec("Qwen/Qwen3-Next-80B-A3B-Instruct")
    c = sg.cells(spec, 2, 4, 1, 1)
    assert (c.full_cell, c.full_layers, c.state_bytes) == (24_576, 12, 77_266_944)
    assert sg.mamba_slots_per_request(spec) == 5
    # TP 2: conv 8,192 / 2 x 3 x 2 = 24,576, SSM 262,144 x 4 = 1,048,576; x 36 = 38,633,472
    assert sg.cells(spec, 2, 4, 2, 1).state_bytes == 38_633_472


def test_qwen3_next_mamba_split() -> None:
    # 50 GiB of budget: mamba_budget = 50 x 0.9 / 1.9 GiB = 25,430,727,410.5 B;
    # K = int((25,430,727,410.5 - 77,266,944) // 77,266,944) = 328 slots; the state pool holds K + 1 = 329:
    # 25,420,824,576 B; the KV pool gets 53,687,091,200 - 25,420,824,576 = 28,266,266,624 B
    # -> 28,266,266,624 // 24,576 = 1,150,157 tokens; max_running_requests = min(2048, ..., 328 // 5) = 65
    spec = _spec("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert sg.mamba_state_slots(50 * GIB, 77_266_944) == 328
    assert sg.mamba_kv_bytes(50 * GIB, 77_266_944) == 28_266_266_624
    pool = PROFILE.stage_pools(PoolRequest(spec, 50 * GIB, 2, 4, 2, 1, 1, 1, 8192, 8192))[0]
    assert pool.capacity_units == 1_150_157 and pool.state_bytes_per_sequence == 77_266_944
    # SGLang's second pool: 328 state slots, 5 per running request -> at most 65 sequences at any length
    assert (pool.swa_capacity_units, pool.swa_window_tokens) == (328, 5)
    assert b_max(pool, 4096) == 65 and b_max(pool, 65_536) == 1_150_157 // 65_536 == 17
    assert max_concurrency(pool, 4096) == pytest.approx(328 / 5)


def test_nemotron_h_state_and_no_state_slot() -> None:
    # Nemotron-H-8B: 24 Mamba-2 layers: conv (8,192 + 2 x 8 x 128 = 10,240, kernel 4 - 1 = 3) bf16: 61,440 B;
    # SSM (128 heads, 64, 128) float32: 4,194,304 B; x 24 = 102,137,856 B. 4 attention layers: 8 x 256 x 2
    # = 4,096 B each, 16,384 per token.
    spec = _spec("nvidia/Nemotron-H-8B-Base-8K")
    c = sg.cells(spec, 2, 4, 1, 1)
    assert (c.full_cell, c.full_layers, c.state_bytes) == (16_384, 4, 102_137_856)
    # a budget of 3 states: 306,413,568 x 0.9 / 1.9 = 145,143,269 -> K = int(0.42) = 0: RuntimeError
    # ("Not enough GPU memory for hybrid (mamba/linear-attention) state cache")
    assert sg.mamba_state_slots(3 * 102_137_856, 102_137_856) == 0
    assert PROFILE.stage_pools(PoolRequest(spec, 3 * 102_137_856, 2, 4, 2, 1, 1, 1, 8192, 8192))[0].capacity_units == 0
    # 1 GiB: 1,073,741,824 x 0.9 / 1.9 = 508,614,548.2 -> K = int(3.98) = 3 slots (KV 665,190,400 // 16,384
    # = 40,600 tokens), but 3 // 5 slots per request = 0 running requests: resolve_max_num_reqs raises
    assert sg.mamba_state_slots(GIB, 102_137_856) == 3
    assert PROFILE.stage_pools(PoolRequest(spec, GIB, 2, 4, 2, 1, 1, 1, 8192, 8192))[0].capacity_units == 0
    # 2 GiB: 1,017,229,096.4 / 102,137,856 = 9.96 -> K = 8 (8 // 5 = 1 request); state 9 x 102,137,856 =
    # 919,240,704; KV 2,147,483,648 - 919,240,704 = 1,228,242,944 // 16,384 = 74,966 tokens
    pool = PROFILE.stage_pools(PoolRequest(spec, 2 * GIB, 2, 4, 2, 1, 1, 1, 8192, 8192))[0]
    assert (pool.capacity_units, pool.swa_capacity_units, pool.swa_window_tokens) == (74_966, 8, 5)
    # the state pool caps running requests: min(74,966 // 1,024, 8 // 5) = 1 at 1,024 tokens
    assert b_max(pool, 1024) == 1


def test_nemotron_h_on_h100_starts_with_its_state_pool() -> None:
    est = _estimate("nvidia/Nemotron-H-8B-Base-8K", "h100-sxm-80gb")
    assert est.starts and est.kv_cache_tokens > 0
    state = sg.cells(_spec("nvidia/Nemotron-H-8B-Base-8K"), 2, 4, 1, 1).state_bytes
    slots = sg.mamba_state_slots(est.kv_budget_bytes_per_gpu, state)
    kv = est.kv_budget_bytes_per_gpu - (slots + 1) * state
    assert abs(est.kv_cache_tokens - kv // 16_384) <= 1  # the GiB round trip of rest_memory
    # at 8,192 tokens memory holds kv_cache_tokens // 8192 sequences; SGLang runs at most slots // 5
    assert est.b_max == min(est.kv_cache_tokens // 8192, slots // 5) == slots // 5


# --- the oracle: SGLang 0.5.23's own pool configurators ---------------------------------------------

_ORACLE_PYTHON = Path(__file__).resolve().parent.parent / ".venv-oracle" / "bin" / "python"
# dill, gguf and torchvision 0.28.0 (--no-deps): what `sglang.srt.model_executor.pool_configurator`
# imports beyond tools/engine_oracle/requirements.txt, in a folder setup_venv.sh fills for this oracle only
_ORACLE_EXTRA_PATH = _ORACLE_PYTHON.parent.parent / "sglang-extra"

_ORACLE_SCRIPT = (
    r"""
import json, sys, types
"""
    + SGLANG_CPU_PREAMBLE
    + r"""
import sglang.srt.arg_groups.memory_hook as mh
import sglang.srt.mem_cache.kv_cache_configurator as kc
from sglang.srt.arg_groups.cuda_graph_hook import generate_prefill_cuda_graph_batch_sizes
from sglang.srt.arg_groups.model_override_base import resolved_view
from sglang.srt.configs.model_config import AttentionArch
from sglang.srt.model_executor.cuda_graph_config import Backend, default_cuda_graph_config
from sglang.srt.model_executor.pool_configurator import DefaultPoolConfigurator, HybridSWAPoolConfigurator
from sglang.srt.server_args import ServerArgs


def fraction(case):
    # handle_gpu_memory_settings on an unresolved ServerArgs: the device memory as nvidia-smi would report
    # it, the CUDA default graphs (decode full, prefill breakable), a fixture model config
    mh.get_device_memory_capacity = lambda device=None: case["gpu_mib"]
    graphs = default_cuda_graph_config()
    graphs.prefill.backend = Backend.BREAKABLE
    sa = ServerArgs(model_path="fixture", device="cuda", tp_size=case["tp"], pp_size=case["pp"],
                    cuda_graph_config=graphs)
    sa._cuda_graph_config_locked = set()
    sa._model_config = types.SimpleNamespace(
        is_multimodal=False, attention_arch=AttentionArch.MLA if case["mla"] else AttentionArch.MHA,
        hf_config=types.SimpleNamespace(architectures=["Fixture"]))
    mh.handle_gpu_memory_settings(sa)
    v = resolved_view(sa)
    return [v.mem_fraction_static, v.chunked_prefill_size, v.cuda_graph_config.decode.max_bs]


class _Configurator(kc.KVCacheConfigurator):
    def fused_entry_bytes(self, name):
        return None


def mamba(case):
    # _handle_max_mamba_cache (ratio mode) and resolve_max_num_reqs with the defaults' config bags
    sched = types.SimpleNamespace(max_mamba_cache_size=None, mamba_full_memory_ratio=0.9,
                                  max_running_requests=None, disable_overlap_schedule=False)
    exe = types.SimpleNamespace(mamba=types.SimpleNamespace(
        enable_linear_replayssm_spec=False, enable_mamba_extra_buffer=case["extra_buffer"],
        enable_mamba_extra_buffer_lazy=False))

    class Context:
        def override(self, source, **fields):
            for key, value in fields.items():
                setattr(sched, key, value)

    kc.get_schedule, kc.get_exec, kc.get_context = (lambda: sched), (lambda: exe), (lambda: Context())
    kc.get_memory = lambda: types.SimpleNamespace(disable_radix_cache=False)
    c = object.__new__(_Configurator)
    c.mambaish_config = types.SimpleNamespace(
        mamba2_cache_params=types.SimpleNamespace(layers=[0], mamba_cache_per_req=case["per_req"]))
    c.pp_size, c.attn_dp_size, c.extra_mamba_cache_bytes_per_req = 1, 1, 0
    c.spec_algorithm = types.SimpleNamespace(is_none=lambda: True)
    c.hybrid_gdn_config = c.hybrid_kda_config = None
    c.model_config = types.SimpleNamespace(context_len=case["context_len"])
    try:
        rest_gib = c._handle_max_mamba_cache(case["budget"] / (1 << 30))
    except RuntimeError:
        return [0, 0, 0]
    tokens = int(rest_gib * (1 << 30)) // case["cell"] // case["page"] * case["page"]
    try:
        requests = c.resolve_max_num_reqs(tokens)
    except RuntimeError:
        requests = 0
    return [sched.max_mamba_cache_size, tokens, requests]


def pool_sizes(c, case):
    # calculate_pool_sizes; with a "cap" (--max-total-tokens), config_from_budget as SGLang runs it: the
    # user's cap in the schedule config, the configurator this case built
    if "cap" not in case:
        return c.calculate_pool_sizes(case["budget"], case["page"])
    import sglang.srt.model_executor.pool_configurator as pc
    pc.create_memory_pool_configurator = lambda kvc: c
    kc.get_schedule = lambda: types.SimpleNamespace(max_total_tokens=case["cap"], page_size=case["page"])
    kc.get_parallel = lambda: types.SimpleNamespace(pp_size=1)
    kc.get_memory = lambda: types.SimpleNamespace(enable_unified_memory=False)
    return kc.KVCacheConfigurator.config_from_budget(object.__new__(_Configurator), case["budget"])


print("@@IMPORTED@@")
out = []
for case in json.loads(sys.stdin.read()):
    if case["kind"] == "fraction":
        out.append(fraction(case))
    elif case["kind"] == "mamba":
        out.append(mamba(case))
    elif case["kind"] == "vlm":
        vision = types.SimpleNamespace(**{k: v for k, v in case["vision"].items() if v is not None})
        config = types.SimpleNamespace(hf_config=types.SimpleNamespace(vision_config=vision))
        out.append(mh.adjust_mem_fraction_for_vlm(1.0, config, False, 81920.0))
    elif case["kind"] == "graphs":
        out.append(len(generate_prefill_cuda_graph_batch_sizes(case["max_bs"])))
    elif case["kind"] == "default":
        c = object.__new__(DefaultPoolConfigurator)
        c._cell_size, c._fixed_overhead_bytes, c._zero_kv_max_tokens = case["cell"], 0, 0
        try:
            out.append(pool_sizes(c, case).max_total_num_tokens)
        except RuntimeError:
            out.append(0)
    else:
        c = object.__new__(HybridSWAPoolConfigurator)
        c.kv_cache_dtype_str = "auto"
        c._full_per_token, c._swa_per_token = case["full_per_token"], case["swa_per_token"]
        c._full_layers_num, c._swa_layers_num = case["full_layers"], case["swa_layers"]
        c._swa_full_tokens_ratio, c._sliding_window_size = 0.8, case["window"]
        c._page_size, c._enable_unified_memory = case["page"], False
        c._draft_full_layers_num = c._draft_swa_layers_num = c._draft_swa_full_layers_num = 0
        c._draft_cell_size, c._fused_full_entry, c._fused_swa_entry = 0, None, None
        c._recompute_cell_size()
        try:
            r = pool_sizes(c, case)
            out.append([r.max_total_num_tokens if "cap" in case else r.full_max_total_num_tokens,
                        r.swa_max_total_num_tokens])
        except (ValueError, RuntimeError):
            out.append([0, 0])
print("@@ORACLE@@" + json.dumps(out))
"""
)


def _oracle(cases: list[dict[str, object]]) -> list[object]:
    if not _ORACLE_PYTHON.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("no .venv-oracle under CI: .ci/run builds it (tools/engine_oracle/setup_venv.sh)")
        pytest.skip("no .venv-oracle (tools/engine_oracle/setup_venv.sh)")
    env = {**os.environ, "PYTHONPATH": str(_ORACLE_EXTRA_PATH)}
    done = subprocess.run(
        [str(_ORACLE_PYTHON), "-c", _ORACLE_SCRIPT], input=json.dumps(cases), capture_output=True, text=True,
        env=env, timeout=600, check=False,
    )  # fmt: skip
    marker = [line for line in done.stdout.splitlines() if line.startswith("@@ORACLE@@")]
    if not marker and "@@IMPORTED@@" in done.stdout:
        pytest.fail(f"SGLang's own code failed on a case: {done.stderr.strip()[-1000:]}")
    if not marker:
        reason = f"SGLang 0.5.23's pool configurator does not import here: {done.stderr.strip()[-300:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)  # CI builds the oracle venv: an import failure there is a broken harness
        pytest.skip(reason)
    return json.loads(marker[0][len("@@ORACLE@@") :])  # type: ignore[no-any-return]


_ORACLE_MODELS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "google/gemma-3-27b-it",
    "openai/gpt-oss-120b",
    "openai/gpt-oss-20b",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "deepseek-ai/DeepSeek-V3",
    "google/gemma-4-26B-A4B",
    "Qwen/Qwen3-8B",
)


@pytest.mark.engine_oracle
def test_pool_sizes_equal_sglang_own_configurators() -> None:
    """capplan's pools against `DefaultPoolConfigurator` / `HybridSWAPoolConfigurator.calculate_pool_sizes`
    (cell sizes from capplan's layer specs, budgets from 1 MiB to 120 GiB, pages 1 and 64, TP 1/2/4/8),
    and the prefill graph sizes against `generate_prefill_cuda_graph_batch_sizes`."""
    cases: list[dict[str, object]] = []
    mine: list[object] = []
    for max_bs in (2048, 4096, 8192, 16384):
        cases.append({"kind": "graphs", "max_bs": max_bs})
        mine.append(len(sg.prefill_cuda_graph_sizes(max_bs)))
    budgets = [1 << 20, 7 * 66_355 * 20, 10**9 + 7, 13 * GIB + 12_345, 40 * GIB, 120 * GIB]
    for model_id in _ORACLE_MODELS:
        spec = _spec(model_id)
        for tp in (1, 2, 4, 8):
            if spec.num_kv_heads % tp and tp % spec.num_kv_heads:
                continue
            for kv_bytes in (2, 1):
                c = sg.cells(spec, kv_bytes, 4, tp, 1)
                for page in (1, 64):
                    for budget in budgets:
                        pool = PROFILE.stage_pools(PoolRequest(spec, budget, kv_bytes, 4, 2, tp, 1, page, 8192, 8192))[0]
                        if c.hybrid:
                            cases.append({"kind": "swa", "full_per_token": c.full_cell // c.full_layers,
                                          "swa_per_token": c.swa_cell // c.swa_layers, "full_layers": c.full_layers,
                                          "swa_layers": c.swa_layers, "window": c.window if c.window != 8192 else None,
                                          "page": page, "budget": budget})  # fmt: skip
                            mine.append([pool.capacity_units, pool.swa_capacity_units])
                        else:
                            cases.append({"kind": "default", "cell": c.full_cell, "page": page, "budget": budget})
                            mine.append(pool.capacity_units * page)
    theirs = _oracle(cases)
    disagree = [(case, a, b) for case, a, b in zip(cases, mine, theirs, strict=True) if a != b]
    # Llama 4's config has no `sliding_window`: SGLang (fed window None here) skips the SWA floor check for its
    # chunked layers, and so does capplan (`SglangCells.floor_window`)
    assert not disagree, f"{len(disagree)} of {len(cases)} cases disagree, e.g. {disagree[:3]}"
    assert len(cases) >= 770  # 772 compared


_ORACLE_GPUS = ("t4-16gb", "l4-24gb", "a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200-180gb", "mi300x-192gb")


@pytest.mark.engine_oracle
def test_defaults_and_mamba_pools_equal_sglang_own_code() -> None:
    """mem_fraction_static, chunked prefill and decode graph batch size against `handle_gpu_memory_settings`
    (catalog GPUs x TP 1/2/4/8 x PP 1/2 x MLA or not), and the Mamba split, KV tokens and
    max_running_requests against `_handle_max_mamba_cache` / `resolve_max_num_reqs` (Qwen3-Next,
    Nemotron-H, Jamba at TP 1/2/4/8, budgets from 0.2 to 120 GiB)."""
    cases: list[dict[str, object]] = []
    mine: list[object] = []
    for gpu_id in _ORACLE_GPUS:
        total = find_gpu_sku(gpu_id).memory_total_bytes
        for tp in (1, 2, 4, 8):
            for pp in (1, 2):
                for mla in (False, True):
                    cases.append({"kind": "fraction", "gpu_mib": total / (1 << 20), "tp": tp, "pp": pp, "mla": mla})
                    mine.append([sg.mem_fraction_static(total, tp, pp, mla=mla), sg.chunked_prefill_size(total),
                                 sg.decode_cuda_graph_max_bs(total, tp)])  # fmt: skip
    for layers, hidden in ((27, 1152), (32, 1280), (24, 1024), (None, None), (40, 1536), (6, 512), (63, 1664)):
        cases.append({"kind": "vlm", "vision": {"num_hidden_layers": layers, "hidden_size": hidden}})
        mine.append(sg.vlm_mem_fraction_factor(layers, hidden))
    budgets = [GIB // 5, GIB, 3 * GIB + 12_345, 17 * GIB, 50 * GIB, 120 * GIB]
    for model_id in (
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "nvidia/Nemotron-H-8B-Base-8K",
        "ai21labs/AI21-Jamba-1.5-Mini",
    ):
        spec = _spec(model_id)
        ratio = sg.mamba_slots_per_request(spec)
        for tp in (1, 2, 4, 8):
            if spec.num_kv_heads % tp and tp % spec.num_kv_heads:
                continue
            c = sg.cells(spec, 2, 4, tp, 1)
            for page in (1, 64):
                for budget in budgets:
                    cases.append({"kind": "mamba", "budget": budget, "per_req": c.state_bytes, "cell": c.full_cell,
                                  "page": page, "context_len": spec.context_limit_tokens,
                                  "extra_buffer": ratio > 3})  # fmt: skip
                    pool = PROFILE.stage_pools(PoolRequest(spec, budget, 2, 4, 2, tp, 1, page, 8192, 8192))[0]
                    tokens = pool.capacity_units * page
                    if tokens:  # started: state slots, KV tokens, max_running_requests (the pool's cap)
                        slots = pool.swa_capacity_units or 0
                        requests = sg.max_running_requests(tokens, spec.context_limit_tokens, slots, ratio)
                        assert b_max(pool, 8) == min(pool.capacity_units // 8, slots // ratio)
                        mine.append([slots, tokens, requests])
                    else:  # SGLang raises: no state slot, or no running request
                        mine.append("refused")
    theirs = _oracle(cases)
    theirs = [t if not (isinstance(t, list) and len(t) == 3 and t[2] == 0) else "refused" for t in theirs]
    disagree = [(case, a, b) for case, a, b in zip(cases, mine, theirs, strict=True) if a != b]
    assert not disagree, f"{len(disagree)} of {len(cases)} cases disagree, e.g. {disagree[:3]}"


def test_what_the_profile_does_not_reproduce_is_said() -> None:
    # no JambaForCausalLM in the 0.5.23 wheel (python/sglang/srt/models/ has no jamba.py): the engine cannot start
    # it, so it is refused with that reason rather than sized and flagged; multimodal checkpoints are sized
    # (tests/test_sglang_vlm.py)
    jamba = _spec("ai21labs/AI21-Jamba-1.5-Mini")
    refusal = PROFILE.start_refusal(StartRequest(jamba, find_gpu_sku("h100-sxm-80gb"), "bf16", 4096))
    assert refusal == "SGLang 0.5.23 has no JambaForCausalLM model class: it does not serve this model"
    assert PROFILE.unmodelled(jamba) is None
    assert PROFILE.unmodelled(_spec("google/gemma-3-27b-it")) is None
    assert PROFILE.unmodelled(_spec("google/gemma-4-26B-A4B")) is None
    assert PROFILE.unmodelled(_spec("meta-llama/Llama-3.1-8B-Instruct")) is None
    assert PROFILE.unmodelled(_spec("Qwen/Qwen3-Next-80B-A3B-Instruct")) is None


def test_pipeline_stages_split_as_sglang_does() -> None:
    # get_pp_indices: the remainder goes to the LAST stages (61 layers over 2: 30 + 31; vLLM: 31 + 30)
    assert sg.pp_partition(61, 2) == [30, 31]
    assert sg.pp_partition(48, 5) == [9, 9, 10, 10, 10]
    # Llama 4 Scout at PP 5: the last stage holds layers 38..47, full attention at 39, 43, 47 ((i + 1) % 4 == 0):
    # 3 x 4,096 = 12,288 full and 7 x 4,096 = 28,672 SWA bytes per token (vLLM's split would put 38..47 last too,
    # but its first stage 0..9 holds 2 full layers)
    c = sg.cells(_spec("meta-llama/Llama-4-Scout-17B-16E-Instruct"), 2, 4, 1, 5)
    assert (c.full_cell, c.swa_cell, c.full_layers, c.swa_layers) == (12_288, 28_672, 3, 7)


@pytest.mark.parametrize(
    ("smi_mib", "tp", "expected"),
    [
        # 0.4.8-0.5.2 server_args.py __post_init__: gpu_mem < 20 GiB tier, reserved (2.8 + 1 / 10) x 1024 = 2,969.6;
        # RTX 5080 (nvidia-smi 16,303 MiB): (16,303 - 2,969.6) / 16,303 = 0.81785 -> 0.818
        (16303, 1, 0.818),
        # 4 x RTX 4090 (24,564 MiB, < 35 GiB tier): (2.8 + 4 / 10) x 1024 = 3,276.8; 21,287.2 / 24,564 = 0.86660 -> 0.867
        (24564, 4, 0.867),
        # H100 SXM (81,559 MiB, < 90 GiB): (9.5 + 1 / 2) x 1024 = 10,240; 71,319 / 81,559 = 0.87445 -> 0.874
        (81559, 1, 0.874),
        # 8 x H200 (143,771 MiB, < 160 GiB): (12 + 8 / 2) x 1024 = 16,384; 127,387 / 143,771 = 0.88604 -> 0.886
        (143771, 8, 0.886),
        # B200 (183,359 MiB, the last tier): a flat 32 x 1024 = 32,768; 150,591 / 183,359 = 0.82129 -> 0.821
        (183359, 8, 0.821),
    ],
)
def test_tiered_release_default_fraction(smi_mib: int, tp: int, expected: float) -> None:
    assert sg.tiered_mem_fraction_static(smi_mib * 1024 * 1024, tp, 1) == expected


def test_default_fraction_follows_the_release_era() -> None:
    # 0.4.7's server_args still has the parallel-size table (0.88 at TP 1 on <= 80 GiB); 0.4.8 and 0.5.0rc0-0.5.2
    # the tiers; 0.5.3 moved to _handle_gpu_memory_settings (the 0.5.23 rules capplan models)
    rtx5080 = find_gpu_sku("NVIDIA GeForce RTX 5080")
    spec = _spec("Qwen/Qwen3-0.6B")

    def fraction(version: str | None) -> float:
        profile = engine_profile(Engine.SGLANG, version)
        return profile.defaults(DefaultsRequest(spec, rtx5080, rtx5080.memory_total_bytes, 40960, 1, 1)).gpu_memory_utilization

    assert sg.is_tiered_release("0.4.8") and sg.is_tiered_release("0.5.2rc2") and sg.is_tiered_release("0.4.10.post2")
    assert not sg.is_tiered_release("0.4.7") and not sg.is_tiered_release("0.5.3") and not sg.is_tiered_release(None)
    assert fraction("0.4.7") == 0.88
    assert fraction("0.4.10") == fraction("0.5.0rc0") == 0.818
    # 0.5.3-0.5.9 (no prefill-graph reserve): 512 + 1.5 x 2048 + 2 x 8 + 1 / 8 x 1024 = 3,728; 12,575 / 16,303 -> 0.771;
    # 0.5.10 on adds 42 prefill graph sizes up to 2048 x 8 = 336: 4,064; 12,239 / 16,303 = 0.75072 -> 0.751
    assert fraction("0.5.3") == fraction("0.5.9") == 0.771
    assert fraction("0.5.10") == fraction(None) == 0.751


@pytest.mark.parametrize(
    ("version", "mib", "tp", "cuda", "speculative", "expected"),
    [
        # before 0.4.6 the table alone, whatever the device: TP 8 -> 0.81 on an MI300X (196,592 MiB)
        ("0.4.5", 196592, 8, False, False, 0.81),
        # 0.4.6 / 0.4.6.post1, above 81,920 MiB: (gpu - 13 x 1024) / gpu = 183,280 / 196,592 (unrounded)
        ("0.4.6", 196592, 8, False, False, 183280 / 196592),
        ("0.4.6.post1", 81559, 8, True, False, 0.81),  # an H100 (81,559 MiB <= 81,920): the table
        # 0.4.6.post2-0.4.6.post5: 0.88, above 96 GiB min(0.88 + 49,152 x 0.12 / gpu, (gpu - 18,432) / gpu):
        # MI300X min(0.91000, 0.90624) = 178,160 / 196,592 (sgl-project/sglang#7055 ran 0.4.6.post5 there)
        ("0.4.6.post5", 196592, 8, False, False, 178160 / 196592),
        # H20 (97,871 MiB: above 81,920, not above 98,304): 0.88 at any TP
        ("0.4.6.post2", 97871, 8, True, False, 0.88),
        # 0.4.7: a CUDA device above 180,000 MiB (B200, 183,359) takes 0.79; speculative decoding reserves 20 GiB
        # above 96 GiB (H200 143,771: min(0.88 + 0.04103, 123,291 / 143,771)) and takes x 0.95 below
        ("0.4.7", 183359, 8, True, False, 0.79),
        ("0.4.7", 196592, 8, False, False, 178160 / 196592),
        ("0.4.7", 143771, 8, True, True, 123291 / 143771),
        ("0.4.7", 81559, 1, True, True, 0.88 * 0.95),
        ("0.4.6.post5", 81559, 1, True, True, 0.88),  # no speculative rule before 0.4.7
    ],
)
def test_legacy_default_fraction_by_release(version: str, mib: int, tp: int, cuda: bool, speculative: bool,
                                            expected: float) -> None:  # fmt: skip
    """0.4.x `ServerArgs.__post_init__` read release by release in the wheels (0.4.5, 0.4.6, 0.4.6.post1-post5,
    0.4.7): the parallel-size table, then rules of their own on devices above 80 GiB."""
    got = sg.legacy_mem_fraction_static(tp, 1, mib * 2**20, version, cuda=cuda, speculative=speculative)
    assert got == pytest.approx(expected, abs=1e-12)


def test_tiered_release_reserves_for_dp_attention_and_speculative() -> None:
    # 0.4.7.post1 opened the tiered rule (0.4.7 kept the table); + 4 GiB with DP attention, + 2 GiB with a draft:
    # 8 x H200 (143,771 MiB): (12 + 4 + 4) x 1024 = 20,480 -> 123,291 / 143,771 = 0.85755 -> 0.858; both: 22,528 -> 0.843
    assert sg.is_tiered_release("0.4.7.post1") and not sg.is_tiered_release("0.4.7")
    assert sg.tiered_mem_fraction_static(143771 * 2**20, 8, 1, attention_dp=8) == 0.858
    assert sg.tiered_mem_fraction_static(143771 * 2**20, 8, 1, attention_dp=8, speculative=SpecMethod.EAGLE) == 0.843


@pytest.mark.parametrize(
    ("version", "method", "expected"),
    [
        # 0.4.7.post1-0.5.1: + 2 GiB for any algorithm (the 0.5.1.post3 wheel: no test of the algorithm)
        ("0.5.1", SpecMethod.NGRAM, 0.843),
        # 0.5.2: STANDALONE + 6 GiB, every other algorithm (NGRAM included: the source's `else`) + 2 GiB:
        # 20,480 + 6,144 = 26,624 -> 117,147 / 143,771 = 0.81481 -> 0.815
        ("0.5.2", SpecMethod.DRAFT_MODEL, 0.815),
        ("0.5.2", SpecMethod.NGRAM, 0.843),
        ("0.5.2", SpecMethod.EAGLE3, 0.843),
    ],
)
def test_tiered_speculative_reserve_by_algorithm(version: str, method: SpecMethod, expected: float) -> None:
    """8 x H200 (143,771 MiB) at --attn-dp-size 8: (12 + 4 + 4) GiB = 20,480 MiB before the draft's reserve."""
    got = sg.tiered_mem_fraction_static(143771 * 2**20, 8, 1, attention_dp=8, speculative=method, version=version)
    assert got == expected


@pytest.mark.parametrize(
    ("smi_mib", "version", "method", "expected"),
    [
        # H100 SXM (81,559 MiB), TP 1, 0.5.3-0.5.9 (reserved 13,440, test_older_0_5_release_default_fraction): after the
        # 10 GiB floor, STANDALONE + 6,144 -> 61,975 / 81,559 = 0.75988 -> 0.760; NGRAM + 0 -> 0.835; the EAGLE family
        # and NEXTN + 2,048 -> 66,071 / 81,559 = 0.81010 -> 0.810
        (81559, "0.5.5", SpecMethod.DRAFT_MODEL, 0.760),
        (81559, "0.5.5", SpecMethod.NGRAM, 0.835),
        (81559, "0.5.9", SpecMethod.EAGLE, 0.810),
        (81559, "0.5.3", SpecMethod.MTP, 0.810),
        # 0.5.10-0.5.13.post1: + 4,096 for the EAGLE family; 0.5.10's reserve has the 58 prefill graph sizes of
        # chunked 8,192 (464): 13,904 + 4,096 = 18,000 -> 63,559 / 81,559 = 0.77930 -> 0.779
        (81559, "0.5.10", SpecMethod.EAGLE, 0.779),
        (81559, "0.5.13.post1", SpecMethod.MTP, 0.779),
        # L40S (46,068 MiB, no floor below 60 GiB) on 0.5.12: 7,248 + 4,096 = 11,344 -> 34,724 / 46,068 = 0.75376
        (46068, "0.5.12", SpecMethod.EAGLE3, 0.754),
        # 0.5.14 dropped the term, as 0.5.23 (None) has none: the fractions without a draft
        (81559, "0.5.14", SpecMethod.EAGLE, 0.830),
        (81559, None, SpecMethod.DRAFT_MODEL, 0.830),
    ],
)
def test_speculative_reserve_by_algorithm_0_5_3_to_0_5_13(
    smi_mib: int, version: str | None, method: SpecMethod, expected: float
) -> None:
    """`_handle_gpu_memory_settings` read in the 0.5.3-0.5.19 wheels: the reserve a draft adds, by algorithm."""
    assert sg.mem_fraction_static(smi_mib * 2**20, 1, 1, version=version, speculative=method) == expected
    assert sg.mem_fraction_static(smi_mib * 2**20, 1, 1, version=version) >= expected


def test_defaults_read_the_speculative_method() -> None:
    """The profile's defaults pass the request's method to the release's rule, and an estimate its deployment's."""
    from capacity.engines.registry import engine_profile
    from capacity.estimate import estimate
    from capacity.features.speculative import SpeculativeSpec
    from capacity.spec import DeploymentSpec, GpuSku
    from tests.handmade import dense_spec

    h100 = GpuSku("test-h100", "H100 (test)", "nvidia", 81559 * 2**20, memory_total_mib_smi=81559, architecture="hopper")
    spec = dense_spec(layers=32, heads=32, kv_heads=8, hidden=4096, intermediate=14336)
    profile = engine_profile(Engine.SGLANG, "0.5.9")
    asked = DefaultsRequest(spec, h100, h100.memory_total_bytes, 8192, 1, 1, speculative=SpecMethod.DRAFT_MODEL)
    assert profile.defaults(asked).gpu_memory_utilization == 0.760
    draft = SpeculativeSpec(SpecMethod.EAGLE, num_speculative_tokens=3)
    got = estimate(spec, DeploymentSpec(engine="sglang", engine_version="0.5.9", speculative=draft), gpu=h100)
    assert got.gpu_memory_utilization == 0.810


def test_dp_attention_reserve_0_5_23() -> None:
    # reserve_for_graph_mb with --attn-dp-size 8 on 8 x H100 (81,559 MiB, chunked 8192, decode bs 512 from TP 4, 58
    # prefill sizes): 512 + 12,288 + 1,024 + 1,024 + 512 x 8 x 3 + 512 x 8 x 1.5 (bs > 300) + 464 = 33,744 MiB;
    # 47,815 / 81,559 = 0.58626 -> 0.586 (the oracle test asks SGLang itself)
    assert sg.mem_fraction_static(81559 * 2**20, 8, 1, attention_dp=8) == 0.586
    assert sg.mem_fraction_static(81559 * 2**20, 8, 1) == 0.812


@pytest.mark.parametrize(
    ("smi_mib", "tp", "version", "expected"),
    [
        # L40S (46,068 MiB, the < 60 GiB tier: chunked 4096, decode bs 32): 0.5.5 reserved 512 + 6,144 + 64 + 128 =
        # 6,848; 39,220 / 46,068 = 0.85135 -> 0.851, the fraction sgl-project/sglang#13023's L40S log prints
        # (server_args of 2025-11-11, the 0.5.5 line); 0.5.10 on + 50 prefill sizes up to 4096 x 8 = 400: 0.843
        (46068, 1, "0.5.5", 0.851),
        (46068, 1, "0.5.12", 0.843),
        # RTX 4090 (24,564 MiB, the < 35 GiB tier): 0.5.3 chunked 2048, bs 16: 512 + 3,072 + 32 + 128 = 3,744;
        # 20,820 / 24,564 = 0.84758 -> 0.848; 0.5.5 bs 24: 3,760 -> 0.847; 0.5.10-0.5.19 + 42 x 8 = 336: 4,096 ->
        # 0.833; 0.5.20 on: chunked 4096, bs 48 and 50 prefill sizes: 512 + 6,144 + 96 + 128 + 400 = 7,280 -> 0.704
        (24564, 1, "0.5.3", 0.848),
        (24564, 1, "0.5.5", 0.847),
        (24564, 1, "0.5.19", 0.833),
        (24564, 1, "0.5.20", 0.704),
        # 4 x RTX 4090 on 0.5.8: bs 80 from TP 4: 512 + 3,072 + 160 + 512 = 4,256; 20,308 / 24,564 = 0.82674 -> 0.827
        (24564, 4, "0.5.8", 0.827),
        # H100 SXM (81,559 MiB) on 0.5.5: 512 + 12,288 + 512 + 128 = 13,440 (above the 10 GiB floor);
        # 68,119 / 81,559 = 0.83521 -> 0.835
        (81559, 1, "0.5.5", 0.835),
    ],
)
def test_older_0_5_release_default_fraction(smi_mib: int, tp: int, version: str, expected: float) -> None:
    assert sg.mem_fraction_static(smi_mib * 1024 * 1024, tp, 1, version=version) == expected


def test_release_default_fractions_name_every_older_era() -> None:
    # an RTX 4090 at TP 1 (24,564 MiB): the values of test_older_0_5_release_default_fraction and the 0.4.x rules:
    # before 0.4.7.post1 the table (0.88), 0.4.7.post1-0.5.2 (24,564 - 2,969.6) / 24,564 = 0.8791 -> 0.879, 0.5.3-0.5.4 0.848,
    # 0.5.5-0.5.9 0.847, 0.5.10-0.5.19 0.833; 0.5.23 (no version) 0.704
    rtx4090 = find_gpu_sku("rtx-4090-24gb")
    fractions = sg.release_default_fractions(_spec("Qwen/Qwen3-8B"), rtx4090, rtx4090.memory_total_bytes, 1, 1)
    assert fractions == {"before 0.4.7.post1": 0.88, "0.4.7.post1-0.5.2": 0.879, "0.5.3-0.5.4": 0.848, "0.5.5-0.5.9": 0.847,
                         "0.5.10-0.5.19": 0.833}  # fmt: skip


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        # RTX 4090, TP 1 (24,564 MiB; reserves of test_older_0_5_release_default_fraction, no 10 GiB floor below 60 GiB),
        # EAGLE: 0.4.7 0.88 x 0.95 = 0.836; 0.4.7.post1-0.5.2 2,969.6 + 2,048 -> 19,546.4 / 24,564 = 0.79574 -> 0.796;
        # 0.5.3-0.5.4 3,744 + 2,048 -> 0.76421 and 0.5.5-0.5.9 3,760 + 2,048 -> 0.76356: both 0.764, one era;
        # 0.5.10-0.5.13 4,096 + 4,096 -> 16,372 / 24,564 = 0.66651 -> 0.667; 0.5.14-0.5.19 no reserve: 0.833
        (SpecMethod.EAGLE, {"before 0.4.7.post1": 0.836, "0.4.7.post1-0.5.2": 0.796, "0.5.3-0.5.9": 0.764,
                            "0.5.10-0.5.13": 0.667, "0.5.14-0.5.19": 0.833}),
        # a draft model (STANDALONE): 2 GiB up to 0.5.1 (0.796), 6 GiB from 0.5.2: 2,969.6 + 6,144 -> 15,450.4 /
        # 24,564 = 0.62899 -> 0.629; 0.5.3-0.5.9 9,888 -> 0.59746 and 9,904 -> 0.59681: 0.597; 0.5.10-0.5.13 10,240 ->
        # 14,324 / 24,564 = 0.58313 -> 0.583
        (SpecMethod.DRAFT_MODEL, {"before 0.4.7.post1": 0.836, "0.4.7.post1-0.5.1": 0.796, "0.5.2": 0.629,
                                  "0.5.3-0.5.9": 0.597, "0.5.10-0.5.13": 0.583, "0.5.14-0.5.19": 0.833}),
    ],
)
def test_release_default_fractions_with_speculative_decoding(method: SpecMethod, expected: dict[str, float]) -> None:
    """The eras split where the draft's reserve moved (0.5.2, 0.5.10, 0.5.14) and merge where this deployment's
    fraction is the same."""
    rtx4090 = find_gpu_sku("rtx-4090-24gb")
    got = sg.release_default_fractions(_spec("Qwen/Qwen3-8B"), rtx4090, rtx4090.memory_total_bytes, 1, 1, method)
    assert got == expected


def test_assumption_note_names_the_older_releases_reserve_for_a_draft() -> None:
    """Without --engine-version the note lists the older releases' fractions with the deployment's draft. L40S
    (46,068 MiB), TP 1, EAGLE: 0.4.7.post1-0.5.2 the 90 GiB tier's (9.5 + 0.5) GiB + 2 GiB = 12,288 -> 33,780 / 46,068 =
    0.73326 -> 0.733; 0.5.5 6,848 + 2,048 -> 37,172 / 46,068 = 0.80689 -> 0.807 (0.5.3-0.5.4 rounds to the same);
    0.5.10-0.5.13 7,248 + 4,096 -> 0.754; 0.5.14 on 0.843, as 0.5.23 (not listed: no difference)."""
    l40s = find_gpu_sku("l40s-48gb")
    draft = DeploymentSpec(engine="sglang", speculative=SpeculativeSpec(SpecMethod.EAGLE, num_speculative_tokens=3))
    got = estimate(_spec("Qwen/Qwen3-8B"), draft, gpu=l40s)
    assert got.gpu_memory_utilization == 0.843
    note = next(n for n in got.notes if "older releases default" in n)
    assert "to 0.733 (0.4.7.post1-0.5.2), 0.807 (0.5.3-0.5.9), 0.754 (0.5.10-0.5.13) at 1 rank(s), not 0.843" in note
