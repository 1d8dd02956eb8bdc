"""vLLM's MLA rules of the older releases, each derived by hand from the wheel's source (`pip download --no-deps
vllm==X`; file:line of the wheel as unpacked) and the model's config.json, against capplan.

- 0.7.2 / 0.7.3 `vllm/worker/cache_engine.py` get_cache_block_size (0.7.3 lines 140-166): `key_cache_entry =
  num_heads * head_size`, `align_to_256bytes(key_cache_entry, model_config.dtype)` when `_align_cache` (lines
  132-137: MLA, CUDA, VLLM_CUDA_MEM_ALIGN_KV_CACHE, envs.py line 582-583 default "1"), no value cache for MLA, then
  `num_layers * block_size * entry * dtype_size(cache dtype)`. `vllm/utils.py` align_to_256bytes (line 799): round
  up to 256 // dtype_size elements. 0.7.1 and 0.8.0 compute the same without the padding.
- MLA block size: 0.7.3 `platforms/cuda.py` line 142-143 sets 16 and `get_attn_backend_cls` returns the Triton MLA
  backend for MLA (line 159-161; `attention/backends` holds no FlashMLA). 0.8.0 check_and_update_config forces 64
  (line 158) where `attention/ops/flashmla.py` is_flashmla_supported: capability 9 only (line 28-29). 0.10.1 forces
  CUTLASS_MLA's 128 on capability 10.0 (lines 154, 176); 0.15.0 FlashInfer MLA's 64 there when qk_nope_head_dim is
  128 (lines 196, 237); 0.17.0 still forces; 0.18.0 picks the block from the backend (`platforms/interface.py`
  update_block_size_for_backend, line 427; FLASH_ATTN_MLA on SM90 takes MultipleOf(16), so 16).
- 0.7.3 `attention/backends/mla/utils.py` MLACommonImpl.process_weights_after_loading (lines 297-387): W_QR (line
  323-327, model dtype), W_UK / W_UV views of the dequantized kv_b_proj (line 297, 350), W_Q_UK = einsum(W_Q, W_UK)
  (line 357) and W_UV_O = einsum(W_UV, W_O) (line 374), requantized to fp8 (`scaled_quantize`, lines 361, 378) for
  fp8 weights, else cast to the model dtype.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from capacity.engines.vllm.profile import VllmProfile
from capacity.engines.vllm.weights import mla_absorbed_weight_bytes
from capacity.estimate import estimate
from capacity.grid import GridModel, GridOptions, build_capacity_grid
from capacity.kv.kinds import RecurrentState
from capacity.spec import DeploymentSpec, LayerKVSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from tests.handmade import mla_spec

GIB = 1 << 30


def _estimate(model_id: str, gpu: str, **deployment: object):  # type: ignore[no-untyped-def]
    resolved = load_model(model_id)
    return estimate(
        resolved.spec,
        DeploymentSpec(**deployment),  # type: ignore[arg-type]
        gpu=find_gpu_sku(gpu),
        checkpoint_bytes=resolved.checkpoint_bytes,
    )


# --- the V0 MLA cache entry ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "kv_dtype", "entry_bytes"),
    [
        # DeepSeek-V3: kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements, bf16 model: 256 // 2 = 128-element steps
        ("0.7.3", "auto", 640 * 2),  # round_up(576, 128) = 640 elements x 2 B = 1,280 B
        ("0.7.2", "auto", 640 * 2),
        ("0.7.1", "auto", 576 * 2),  # 0.7.1: no _align_cache, 1,152 B
        ("0.8.0", "auto", 576 * 2),  # 0.8.0 cache_engine: the padding is gone (and V1 is the default)
        # fp8 cache: the step is still the model dtype's (align_to_256bytes(..., model_config.dtype)), 640 x 1 B
        ("0.7.3", "fp8", 640),
    ],
)
def test_v0_mla_entry_is_padded_to_256_bytes(version: str, kv_dtype: str, entry_bytes: int) -> None:
    est = _estimate(
        "deepseek-ai/DeepSeek-V3", "h200-sxm-141gb", tp=8, engine_version=version, kv_dtype=kv_dtype, max_model_len=4096
    )
    # one block = 61 MLA layers x block_size tokens x the entry
    assert est.pool.unit_bytes == 61 * est.block_size * entry_bytes
    assert est.num_blocks == est.kv_budget_bytes_per_gpu // est.pool.unit_bytes


def test_a_public_v0_log_prints_the_padded_entry() -> None:
    # The DeepSeek-R1 log of the memory holdout (8x H200, V0): "# cuda blocks: 18418" of a 21.43 GiB pool with
    # blocks of 16 tokens is 21.43 GiB / (18,418 x 16) = 78,081 B a token: 61 x 1,280 = 78,080 B, not 61 x 1,152
    # = 70,272 B (the pool is printed to 0.01 GiB: +-0.02 %). capplan's page for the same model and release:
    implied_bytes = 21.43 * GIB / (18418 * 16)
    assert abs(implied_bytes - 61 * 1280) / (61 * 1280) < 0.0005
    est = _estimate("deepseek-ai/DeepSeek-R1", "h200-sxm-141gb", tp=8, engine_version="0.7.3", max_model_len=4096)
    assert est.pool.unit_bytes == 16 * 61 * 1280
    # the explanation says why a block outweighs 16 x the bytes per token it prints (61 x 1,152 B)
    assert any("pads each MLA cache entry" in note for note in est.notes)
    unpadded = _estimate("deepseek-ai/DeepSeek-R1", "h200-sxm-141gb", tp=8, engine_version="0.7.1", max_model_len=4096)
    assert not any("pads each MLA cache entry" in note for note in unpadded.notes)


# --- the MLA block size by release ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "gpu", "kv_dtype", "block"),
    [
        ("0.7.3", "h100-sxm-80gb", "auto", 16),  # Triton MLA only: the platform's 16
        ("0.7.3", "b200-180gb", "auto", 16),
        ("0.8.0", "h100-sxm-80gb", "auto", 64),  # FlashMLA on SM90
        ("0.8.0", "h200-sxm-141gb", "fp8", 64),
        ("0.8.0", "a100-sxm-80gb", "auto", 16),  # is_flashmla_supported: "only supported on Hopper devices"
        ("0.8.0", "b200-180gb", "auto", 16),  # ... nor on SM100, and no CUTLASS default yet
        ("0.10.0", "b200-180gb", "auto", 16),  # 0.10.0: CUTLASS_MLA only when VLLM_ATTENTION_BACKEND names it
        ("0.10.1", "b200-180gb", "auto", 128),  # CUTLASS_MLA by default on capability 10.0
        ("0.14.0", "b200-180gb", "auto", 128),
        ("0.14.0", "l40s-48gb", "auto", 16),  # Ada: neither
        ("0.15.0", "b200-180gb", "auto", 64),  # FlashInfer MLA (DeepSeek-V3 qk_nope_head_dim 128): 64
        ("0.17.0", "h100-sxm-80gb", "auto", 64),
        ("0.18.0", "h100-sxm-80gb", "auto", 16),  # backend priority: FLASH_ATTN_MLA, MultipleOf(16)
        ("0.18.0", "b200-180gb", "auto", 32),  # FLASHINFER_MLA [32, 64], 16 unsupported -> 32
    ],
)
def test_mla_block_size_by_release(version: str, gpu: str, kv_dtype: str, block: int) -> None:
    est = _estimate("deepseek-ai/DeepSeek-V3", gpu, tp=8, engine_version=version, kv_dtype=kv_dtype, max_model_len=4096)
    assert est.block_size == block


# --- V0 MLA's absorbed weights -------------------------------------------------------------------------------------


def test_absorbed_fp8_weights_of_deepseek_r1_at_tp8() -> None:
    # DeepSeek-R1 (fp8 block-quantized, bf16 model dtype): q_lora_rank Q = 1536, kv_lora_rank L = 512, 128 heads
    # -> n = 16 per GPU at TP 8, qk_nope 128, v 128, rope 64, hidden 7168, 61 MLA layers. Per layer and GPU:
    #   W_QR     Q x n x rope x 2 B                      = 1536 x 16 x 64 x 2   =  3,145,728
    #   W_Q_UK   Q x (n L), fp8                         = 1536 x 8192          = 12,582,912
    #   W_UV_O   (n L) x hidden, fp8                    = 8192 x 7168          = 58,720,256
    #   kv_b_proj dequantized (W_UK / W_UV views)       = 512 x 16 x 256 x 2   =  4,194,304
    per_layer = 3_145_728 + 12_582_912 + 58_720_256 + 4_194_304
    assert per_layer == 78_643_200
    spec = load_model("deepseek-ai/DeepSeek-R1").spec
    release = VllmProfile.for_version("0.7.3").release
    assert mla_absorbed_weight_bytes(spec, 8, 1, "fp8", release) == 61 * per_layer  # 4.47 GiB
    # PP 2: vLLM's split puts 31 layers on the first stage (get_pp_indices), the most loaded rank
    assert mla_absorbed_weight_bytes(spec, 8, 2, "fp8", release) == 31 * per_layer
    before, after = (VllmProfile.for_version(v).release for v in ("0.7.0", "0.8.0"))
    assert mla_absorbed_weight_bytes(spec, 8, 1, "fp8", before) == 0  # no V0 MLA before 0.7.1
    assert mla_absorbed_weight_bytes(spec, 8, 1, "fp8", after) == 0  # 0.8.0 rewrote MLA without these copies


def test_absorbed_bf16_weights_without_q_lora() -> None:
    # DeepSeek-V2-Lite-Chat (bf16, no q_lora_rank: q reads hidden 2048), 16 heads, L 512, rope 64, 27 layers, TP 1:
    #   W_QR   2048 x 16 x 64 x 2 = 4,194,304; W_Q_UK 2048 x 8192 x 2 = 33,554,432; W_UV_O 8192 x 2048 x 2 = 33,554,432;
    #   kv_b_proj unquantized: W_UK / W_UV are views of its weight, nothing more
    per_layer = 4_194_304 + 33_554_432 + 33_554_432
    spec = load_model("deepseek-ai/DeepSeek-V2-Lite-Chat").spec
    release = VllmProfile.for_version("0.7.3").release
    assert mla_absorbed_weight_bytes(spec, 1, 1, "bfloat16", release) == 27 * per_layer


def test_the_estimate_carries_the_absorbed_weights_and_says_so() -> None:
    old, new = (
        _estimate("deepseek-ai/DeepSeek-R1", "h200-sxm-141gb", tp=8, engine_version=v, max_model_len=4096)
        for v in ("0.7.3", "0.8.0")
    )
    assert old.weights_bytes_per_gpu - new.weights_bytes_per_gpu == 61 * 78_643_200
    assert any("absorbed MLA matrices" in note for note in old.notes)
    assert not any("absorbed MLA matrices" in note for note in new.notes)


# --- the grid agrees with the scalar estimate on these releases ------------------------------------------------------


@pytest.mark.parametrize("version", ["0.7.3", "0.8.0"])
def test_grid_matches_estimate_for_v0_mla(version: str) -> None:
    resolved = load_model("deepseek-ai/DeepSeek-V2-Lite-Chat")
    model = GridModel("deepseek-ai/DeepSeek-V2-Lite-Chat", resolved.spec, resolved.checkpoint_bytes)
    gpus = [find_gpu_sku("h100-sxm-80gb"), find_gpu_sku("a100-sxm-80gb")]
    options = GridOptions(engines=("vllm",), vllm_version=version, weight_dtypes=("bf16",), kv_dtypes=("auto",))
    grid = build_capacity_grid([model], gpus, options).collect()
    assert grid.height > 0
    by_gpu = {g.id: g for g in gpus}
    rows = grid.filter((grid["tp"] == 1) & (grid["dp"] == 1))  # the TP layout (DP x EP rows: test_grid.py)
    assert set(rows["gpu"]) == set(by_gpu)
    for row in rows.iter_rows(named=True):
        deployment = DeploymentSpec(
            tp=row["tp"], pp=row["pp"], engine="vllm", engine_version=version, max_model_len=row["max_model_len"]
        )
        contract = estimate(
            resolved.spec,
            deployment,
            gpu=by_gpu[row["gpu"]],
            model_name=model.repo_id,
            checkpoint_bytes=resolved.checkpoint_bytes,
            context_tokens=row["context"],
        ).contract()
        for column in ("num_blocks", "block_size", "weights_bytes_per_gpu", "kv_budget_bytes_per_gpu"):
            assert row[column] == contract[column], (column, row["gpu"], row["context"])


# --- CUDA graphs outside the budget before 0.21: a flag, never a refusal ------------------------------------------


@pytest.mark.parametrize(
    ("version", "utilization", "enforce_eager", "flagged"),
    [
        # L40S, 47,813,723,423 B: at 0.99 the engine keeps total - ceil(total x 0.99) = 478,137,234 B (0.45 GiB)
        # outside the budget. Graphs by 0.21's rule (capture sizes 1, 2, 4, 8..248 by 8, 256..512 by 16: 51
        # PIECEWISE, 35 FULL up to max_num_seqs 256): int(0.24 GiB) + 86 x int(5.2 MiB) = 257,698,037 +
        # 86 x 5,452,595 = 726,621,207 B > 478,137,234 B
        ("0.11.0", 0.99, None, True),
        ("0.11.0", 0.95, None, False),  # 2,390,686,172 B outside: room for them
        ("0.11.0", 0.99, True, False),  # --enforce-eager: no graphs captured
        ("0.21.0", 0.99, None, False),  # 0.21 deducts the estimate from the budget: nothing is left to flag
    ],
)
def test_graphs_captured_outside_the_budget_are_flagged_not_refused(
    version: str, utilization: float, enforce_eager: bool | None, flagged: bool
) -> None:
    est = _estimate(
        "Qwen/Qwen3-8B",
        "l40s-48gb",
        engine_version=version,
        gpu_memory_utilization=utilization,
        max_model_len=8192,
        enforce_eager=enforce_eager,
    )
    notes = [note for note in est.notes if "capturing CUDA graphs" in note]
    assert bool(notes) == flagged
    if flagged:
        assert "about 0.68 GiB" in notes[0] and "0.45 GiB left outside the budget" in notes[0]
    assert est.starts  # a check must not refuse what the engine may run


@pytest.mark.parametrize(
    ("version", "block"),
    [
        # model_executor/models/config.py HybridAttentionMambaModelConfig: attn_block_size =
        # kernel_block_alignment_size x cdiv(mamba_page, alignment x attn_page_1_token); the state page here
        # (1,024 elements, at most 4 KiB) is under one 16-token MLA page (16 x 1,152 B), so the block is the alignment
        ("0.11.0", 16),  # 0.11.0: 16 x cdiv(...) = 16 (FlashMLA unsupported on an A100: nothing forces 64)
        ("0.12.0", 64),  # 0.12.0-0.19.x: kernel_block_alignment_size 64 for MLA, whatever the GPU
        ("0.19.0", 64),
        ("0.20.0", 16),  # 0.20.0: Platform._align_hybrid_block_size, the backend's kernel block (TRITON_MLA: 16)
    ],
)
def test_mla_hybrid_block_alignment_by_release(version: str, block: int) -> None:
    base = mla_spec(layers=8)
    layers = tuple(
        LayerKVSpec(
            i, base.layers[i].cache if i % 2 else RecurrentState(conv_state_elements=0, recurrent_state_elements=1024)
        )
        for i in range(8)
    )
    spec = replace(base, layers=layers)
    est = estimate(
        spec,
        DeploymentSpec(engine_version=version, max_model_len=4096),
        gpu=find_gpu_sku("a100-sxm-80gb"),
    )
    assert est.pool.block_size == block
