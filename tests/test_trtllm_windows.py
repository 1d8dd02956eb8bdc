"""TensorRT-LLM's windowed layers by release, against a public startup log (not capplan's output).

The DGX Spark playbook log of TensorRT-LLM 1.1.0rc3 serving openai/gpt-oss-120b (evaluation/data/
trtllm_public_measurements.yaml, row unresolved-trtllm-1.1.0rc3-gpt-oss-120b-dgx-spark-tp1) prints
"kv size is 73728" bytes a token and a pool of 86,720 tokens from 5.95 GiB: 36 layers x 8 KV heads x 64 x 2 (K, V)
x 2 B = 73,728, i.e. its 18 sliding-window layers kept at the full length (no kv_cache_config.max_attention_window
was given). Through 1.1 that is the engine's default, so the row is sized, not flagged; without a stated release
(later ones fill windows in for some models) the flag stays.
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


def test_windowed_models_still_flagged_without_a_release_or_after_1_1() -> None:
    for version in (None, "1.2.0rc2", "1.4.0"):
        assert "per attention window" in (_estimate(version, 10 * GIB).not_modelled or ""), version


def test_the_release_note_says_what_is_sized() -> None:
    est = _estimate("1.1.0")
    assert any("opt-in through kv_cache_config.max_attention_window" in note for note in est.notes)
    assert engine_profile(Engine.TRTLLM, "1.0.0").unmodelled(load_model("google/gemma-3-27b-it").spec) is None
    # state managers stay unmodelled whatever the release
    assert engine_profile(Engine.TRTLLM, "1.1.0").unmodelled(load_model("nvidia/Nemotron-H-8B-Base-8K").spec)
