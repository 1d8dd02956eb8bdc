"""vLLM's printed "GPU KV cache size" of models with windowed layers, release by release, derived by hand.

Read in the wheels (vllm/v1/core/kv_cache_utils.py, vllm/v1/kv_cache_interface.py, vllm/config/vllm.py,
vllm/engine/arg_utils.py, vllm/model_executor/models/gemma4_mm.py):
- 0.20.0 `_report_kv_cache_config`: num_blocks // len(kv_cache_groups) x the smallest group block size;
- 0.21.0-0.25.1 `get_kv_cache_capacity`: int(max_concurrency x max_model_len), max_concurrency = num_blocks /
  blocks one request of max_model_len takes, a sliding group cdiv(min(W - 1 + max_num_batched_tokens, L), bs) + 1
  (`SlidingWindowSpec.max_admission_blocks_per_request`);
- 0.26.0 on: the same with `VllmConfig.max_in_flight_tokens` = max_concurrent_batches x max_num_batched_tokens
  (2 batches with async scheduling at PP 1) in place of max_num_batched_tokens;
- 0.22.0 on: a prefix-LM multimodal model (Gemma 4) gets its default max_num_batched_tokens raised to its largest
  item, a 32-frame video of 78 tokens a frame (0.21.0 has no such rule).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from capacity.engines import DefaultsRequest, Engine
from capacity.engines.registry import engine_profile
from capacity.estimate import estimate
from capacity.spec import DeploymentSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku

GIB = 1 << 30

# gpt-oss-20b: 24 layers alternating sliding (window 128) and full, 8 KV heads x 64, bf16 KV:
# a layer's page is 2 x 8 x 64 x 2 B x 16 tokens = 32,768 B; buckets of 12 and 12 layers -> 2 groups of 12,
# 393,216 B a block; a 10 GiB budget holds 10,737,418,240 // 393,216 = 27,306 blocks.
BLOCKS = 27_306
LENGTH = 32_768
FULL_BLOCKS = LENGTH // 16  # 2,048
SLIDING_8192 = -(-(127 + 8192) // 16) + 1  # one batch of H100's default 8,192 tokens in flight: 521
SLIDING_2X8192 = -(-(127 + 2 * 8192) // 16) + 1  # two batches in flight (async scheduling): 1,033


@pytest.mark.parametrize(
    ("version", "printed"),
    [
        ("0.20", BLOCKS // 2 * 16),  # 218,448
        ("0.21", int(BLOCKS / (FULL_BLOCKS + SLIDING_8192) * LENGTH)),  # 348,292
        ("0.25", int(BLOCKS / (FULL_BLOCKS + SLIDING_8192) * LENGTH)),
        ("0.26", int(BLOCKS / (FULL_BLOCKS + SLIDING_2X8192) * LENGTH)),  # 290,413
        ("0.30", int(BLOCKS / (FULL_BLOCKS + SLIDING_2X8192) * LENGTH)),
    ],
)
def test_printed_kv_cache_size_of_gpt_oss_by_release(version: str, printed: int) -> None:
    resolved = load_model("openai/gpt-oss-20b")
    deployment = DeploymentSpec(
        engine="vllm", engine_version=version, max_model_len=LENGTH, kv_cache_memory_bytes=10 * GIB
    )
    est = estimate(resolved.spec, deployment, gpu=find_gpu_sku("h100-sxm-80gb"), checkpoint_bytes=None)
    assert est.kv_cache_tokens == printed


def _batched(model_id: str, gpu_id: str, version: str, *, text_only: bool = False) -> int:
    spec = load_model(model_id).spec
    if text_only:
        spec = replace(spec, vision_tower=None)
    gpu = find_gpu_sku(gpu_id)
    request = DefaultsRequest(spec, gpu, gpu.memory_total_bytes, 32_768, 1, 1)
    return engine_profile(Engine.VLLM, version).defaults(request).max_num_batched_tokens


def test_gemma_4_default_batch_fits_one_video_from_0_22() -> None:
    # L4: the small tier's 2,048 tokens; 0.22 raises it to 32 x (70 + 2 + 6) = 2,496
    assert _batched("google/gemma-4-26B-A4B", "l4-24gb", "0.21") == 2048
    assert _batched("google/gemma-4-26B-A4B", "l4-24gb", "0.22") == 2496
    assert _batched("google/gemma-4-26B-A4B", "l4-24gb", "0.26") == 2496
    # H100's 8,192 already holds the video; a checkpoint without its vision tower is not raised
    assert _batched("google/gemma-4-26B-A4B", "h100-sxm-80gb", "0.22") == 8192
    assert _batched("google/gemma-4-26B-A4B", "l4-24gb", "0.22", text_only=True) == 2048
    assert _batched("meta-llama/Llama-3.1-8B-Instruct", "l4-24gb", "0.22") == 2048
