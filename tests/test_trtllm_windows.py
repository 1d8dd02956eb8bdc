"""TensorRT-LLM's windowed layers by release, against a public startup log (not capplan's output).

The DGX Spark playbook log of TensorRT-LLM 1.1.0rc3 serving openai/gpt-oss-120b (evaluation/data/
trtllm_public_measurements.yaml, row unresolved-trtllm-1.1.0rc3-gpt-oss-120b-dgx-spark-tp1) prints
"kv size is 73728" bytes a token and a pool of 86,720 tokens from 5.95 GiB: 36 layers x 8 KV heads x 64 x 2 (K, V)
x 2 B = 73,728, i.e. its 18 sliding-window layers kept at the full length (no kv_cache_config.max_attention_window
was given). That stays the default while the V1 manager is: tensorrt_llm/_torch/pyexecutor/resource_manager.py
KVCacheManager.__init__ turns max_attention_window None into [max_seq_len] (one window, one pool), and
KvCacheConfig.use_kv_cache_manager_v2 defaults to False (llmapi/llm_args.py; V2 is the default from 1.4).
_util.py _create_kv_cache_manager fills windows in by itself only for Gemma 4 (is_gemma4_hybrid: per-layer windows
from layer_types), in releases not dated here. So gpt-oss / Gemma 3 rows through 1.3 are sized; without a stated
release, from 1.4, and for Gemma 4 at any release the flag stays.
"""

from __future__ import annotations

import pytest

from capacity.engines import Engine
from capacity.engines.registry import engine_profile
from capacity.estimate import estimate
from capacity.spec import DeploymentSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku

GIB = 1 << 30


def _estimate(version: str | None, budget_bytes: int | None = None):  # type: ignore[no-untyped-def]
    resolved = load_model("openai/gpt-oss-120b")
    deployment = DeploymentSpec(
        engine="trtllm", engine_version=version, max_model_len=8192, kv_cache_memory_bytes=budget_bytes
    )
    return estimate(resolved.spec, deployment, gpu=find_gpu_sku("h100-sxm-80gb"), checkpoint_bytes=None)


def test_gpt_oss_on_1_1_sized_as_the_log_prints() -> None:
    est = _estimate("1.1.0rc3", int(5.95 * GIB))
    assert est.not_modelled is None
    assert est.kv_bytes_per_token_per_gpu == 73_728  # "kv size is 73728"
    # 5.95 GiB is the log's rounding of the budget: the pool it printed (86,720 tokens) within 0.2 %
    assert est.kv_cache_tokens == pytest.approx(86_720, rel=2e-3)


def test_windowed_models_still_flagged_without_a_release_or_from_1_4() -> None:
    for version in (None, "1.4.0", "2.0.0"):
        assert "per attention window" in (_estimate(version, 10 * GIB).not_modelled or ""), version


def test_v1_manager_releases_size_windowed_layers_at_full_length() -> None:
    """1.2 and 1.3 (the catalog's public logs name 1.2.0rc2 and 1.3.0rc7) keep the V1 manager: the same per-token
    bytes as 1.1.0rc3's printed "kv size is 73728", and the same pool from the same budget."""
    reference = _estimate("1.1.0rc3", 10 * GIB)
    for version in ("1.2.0rc2", "1.3.0rc7", "1.3.0"):
        est = _estimate(version, 10 * GIB)
        assert est.not_modelled is None, version
        assert est.kv_bytes_per_token_per_gpu == 73_728, version
        assert est.kv_cache_tokens == reference.kv_cache_tokens, version
        # 10 GiB / 73,728 B a token = 145,635 tokens, in whole blocks of 32: 4,551 x 32
        assert est.kv_cache_tokens == (10 * GIB // (73_728 * 32)) * 32 == 145_632, version


def test_gemma_4_windows_filled_in_by_the_engine_stay_flagged() -> None:
    """_create_kv_cache_manager sets Gemma 4's per-layer windows itself (is_gemma4_hybrid), so its pools are per
    window whatever the user passes: not sized here at any release."""
    spec = load_model("google/gemma-4-E2B").spec
    assert "per attention window" in (engine_profile(Engine.TRTLLM, "1.3.0").unmodelled(spec) or "")
    # before 1.3 there is no Gemma 4 model class at all (PR #12932, April 2026): refused, not sized and flagged
    # (tests/test_engine_coverage.py)
    for version in ("1.0.0", "1.1.0", "1.2.0"):
        assert engine_profile(Engine.TRTLLM, version).unmodelled(spec) is None, version
    assert engine_profile(Engine.TRTLLM, "1.3.0").unmodelled(load_model("google/gemma-3-27b-it").spec) is None


def test_the_release_note_says_what_is_sized() -> None:
    est = _estimate("1.1.0")
    assert any("opt-in through kv_cache_config.max_attention_window" in note for note in est.notes)
    assert engine_profile(Engine.TRTLLM, "1.0.0").unmodelled(load_model("google/gemma-3-27b-it").spec) is None
    # state managers: sized for Nemotron-H on 1.0-1.2 only (tests/test_trtllm_states.py)
    assert engine_profile(Engine.TRTLLM, "1.3.0").unmodelled(load_model("nvidia/Nemotron-H-8B-Base-8K").spec)
