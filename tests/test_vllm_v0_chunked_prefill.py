"""The chunk budget a V0 `vllm serve` profiles with when the user leaves chunked prefill unset.

Oracle: the wheels' own source, read release by release (`engine/arg_utils.py` create_engine_config and
`config.py` SchedulerConfig; 0.4.3, 0.5.0-0.5.5, 0.6.1-0.6.6, 0.7.0, 0.7.3):
- 0.4.3 and 0.5.0-0.5.2 have no long-context rule: chunked prefill stays off, so `max_num_batched_tokens =
  max(max_model_len, 2048)`;
- 0.5.3 adds `use_long_context = max_model_len > 32768`: on a CUDA GPU chunked prefill turns on unless the model
  has a sliding window, speculative decoding, LoRA, prompt adapters or (0.5.3-0.5.5) prefix caching is on;
  0.5.4-0.6.2 also keep it off for `contains_seqlen_agnostic_layers` (Mamba / Jamba);
- 0.6.2 keeps it off for multimodal models (`is_multimodal_model`), whatever the length;
- with it on, SchedulerConfig takes 512 tokens (0.5.0-0.6.4) or 2048 (0.6.5-0.7.3, "a balance between ITL and
  TTFT"); 0.6.5-0.7.3 also keep it off on ROCm (`not current_platform.is_rocm()`);
- SchedulerConfig raises a multimodal model's budget to `_MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS`: 4,096 in
  0.6.1-0.6.2, 5,120 from 0.6.3 (absent in 0.5.5).
V1 releases (0.8 on) do not read this rule; their V0 engine does (tests/test_vllm_v0_engine.py).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from capacity.engines.protocol import DefaultsRequest
from capacity.engines.registry import engine_profile
from capacity.estimate import estimate
from capacity.features.prefix_caching import PrefixCaching
from capacity.hf_config import parse_config
from capacity.kv.kinds import KVKind
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec
from models_registry.sources.gpu_catalog import load_gpu_skus
from tests.handmade import dense_spec
from tests.test_registry_hostile import _bundled_config

GPUS = {g.id: g for g in load_gpu_skus(Path(__file__).resolve().parent.parent / "models_registry/catalog/gpus.yaml")}
H100, MI300X = GPUS["h100-sxm-80gb"], GPUS["mi300x-192gb"]
LONG = 131072  # Llama 3.1's limit: a long-context length (> 32,768)


def _catalog(repo_id: str) -> ModelSpec:
    return parse_config(_bundled_config(repo_id), name=repo_id)


def _batched(version: str, model: ModelSpec, length: int, gpu: GpuSku = H100, **features: object) -> int:
    request = DefaultsRequest(model, gpu, gpu.memory_total_bytes, length, 1, 1, **features)  # type: ignore[arg-type]
    return engine_profile("vllm", version).defaults(request).max_num_batched_tokens


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.4.3", LONG),  # no long-context rule yet
        ("0.5.2", LONG),
        ("0.5.3", 512),  # the rule, SchedulerConfig's 512-token chunk
        ("0.6.4", 512),
        ("0.6.5", 2048),  # the 2,048-token chunk
        ("0.7.3", 2048),
    ],
)
def test_a_long_context_dense_model_by_release(version: str, expected: int) -> None:
    llama = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    assert _batched(version, llama, LONG) == expected
    assert _batched(version, llama, 32768) == 32768  # not above 32,768: off, max(max_model_len, 2048)
    assert _batched(version, llama, 1024) == 2048


@pytest.mark.parametrize(
    ("feature", "version", "expected"),
    [
        ({"lora": True}, "0.7.3", LONG),
        ({"speculative": True}, "0.6.1", LONG),
        ({"prefix_caching": True}, "0.5.3", LONG),  # 0.5.3-0.5.5 only
        ({"prefix_caching": True}, "0.6.1", 512),
    ],
)
def test_features_that_keep_chunked_prefill_off(feature: dict[str, bool], version: str, expected: int) -> None:
    assert _batched(version, _catalog("meta-llama/Llama-3.1-8B-Instruct"), LONG, **feature) == expected


def test_rocm_keeps_it_off_from_0_6_5() -> None:
    llama = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    assert _batched("0.6.4", llama, LONG, MI300X) == 512
    assert _batched("0.6.6", llama, LONG, MI300X) == LONG


def test_multimodal_models_from_0_6_2() -> None:
    vl = _catalog("Qwen/Qwen2.5-VL-7B-Instruct")
    assert vl.vision_tower is not None and vl.context_limit_tokens > 32768
    limit = vl.context_limit_tokens
    assert _batched("0.5.5", vl, limit) == 512  # chunked, no multimodal floor yet
    assert _batched("0.6.1", vl, limit) == 4096  # chunked, raised to the floor
    assert _batched("0.6.2", vl, limit) == limit
    assert _batched("0.7.3", vl, limit) == limit
    assert _batched("0.6.2", vl, 2048) == 4096  # a short length: max(2048, 2048), then the floor
    assert _batched("0.6.3", vl, 2048) == 5120


def test_seqlen_agnostic_layers_from_0_5_4_to_0_6_2() -> None:
    jamba = _catalog("ai21labs/AI21-Jamba-1.5-Mini")
    assert jamba.has_state_layers
    assert _batched("0.5.3", jamba, LONG) == 512
    assert _batched("0.5.4", jamba, LONG) == LONG
    assert _batched("0.6.2", jamba, LONG) == LONG
    assert _batched("0.6.3", jamba, LONG) == 512


def test_a_sliding_window_keeps_it_off() -> None:
    windowed = dense_spec(layers=4, kv_heads=8, context=65536, kinds=[(KVKind.SLIDING, 4096)] * 4)
    full = dense_spec(layers=4, kv_heads=8, context=65536)
    assert _batched("0.7.3", windowed, 65536) == 65536
    assert _batched("0.7.3", full, 65536) == 2048


def test_v1_releases_do_not_read_it() -> None:
    # V1's own default (0.8.0 arg_utils._set_default_args_v1): 8,192 where the device name holds "h100"
    assert _batched("0.8.0", _catalog("Qwen/Qwen2.5-VL-7B-Instruct"), 65536) == 8192


def test_the_estimate_profiles_with_the_default_the_engine_picks() -> None:
    """End to end: prefix caching on 0.5.3 keeps chunked prefill off, so the profiling pass runs the whole
    131,072-token batch, exactly as the same deployment with that budget given."""
    llama = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    base = DeploymentSpec(engine_version="0.5.3", max_model_len=LONG)
    cached = replace(base, prefix_caching=PrefixCaching(enabled=True))
    chunked, off = estimate(llama, base, gpu=H100), estimate(llama, cached, gpu=H100)
    given = estimate(llama, replace(base, max_num_batched_tokens=LONG), gpu=H100)
    assert off.activation_peak_bytes_per_gpu == given.activation_peak_bytes_per_gpu
    assert off.activation_peak_bytes_per_gpu > chunked.activation_peak_bytes_per_gpu
    assert chunked.activation_peak_bytes_per_gpu == estimate(
        llama, replace(base, max_num_batched_tokens=512), gpu=H100
    ).activation_peak_bytes_per_gpu
    assert json.dumps(off.contract())  # the contract still serializes
