"""The `vllm` engine profile reproduces what vLLM's CPU build really allocated (tests/fixtures/vllm_cpu,
recorded by tools/record_vllm_cpu.py): num_blocks, "KV cache size" tokens and max concurrency, exactly,
given the same KV memory, block size and batched tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capacity.estimate import estimate
from capacity.hf_config import parse_config
from capacity.spec import DeploymentSpec

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "vllm_cpu").glob("*.json"))


def test_fixture_set_covers_the_families() -> None:
    families = {json.loads(path.read_text())["family"] for path in FIXTURES}
    assert len(FIXTURES) >= 10
    assert {"llama", "qwen2", "mistral", "gemma2", "gemma3_text", "deepseek_v3", "gpt_oss", "phi3"} <= families


#: The recorded engine settings that are deployment fields of the same name (`kv_cache_dtype` is the deployment's
#: `kv_dtype`; `dtype` is the model's).
SETTINGS_AS_DEPLOYED = (
    "kv_cache_memory_bytes",
    "block_size",
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_seqs",
)


def fixture_deployment(fixture: dict[str, Any], *, async_scheduling: bool | None) -> DeploymentSpec:
    """The recorded run's settings as a deployment (`async_scheduling` None: the GPU default)."""
    settings = fixture["settings"]
    return DeploymentSpec(
        engine="vllm",
        engine_version=fixture["vllm_version"],
        kv_dtype=settings["kv_cache_dtype"],
        async_scheduling=async_scheduling,
        **{name: settings[name] for name in SETTINGS_AS_DEPLOYED},
    )


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_vllm_profile_reproduces_fixture(path: Path) -> None:
    fixture: dict[str, Any] = json.loads(path.read_text())
    settings, result = fixture["settings"], fixture["result"]
    model = parse_config(fixture["config"])
    # the CPU build has no async scheduling: one batch in flight
    deployment = fixture_deployment(fixture, async_scheduling=False)
    got = estimate(model, deployment, context_tokens=settings["max_model_len"])
    assert got.num_blocks == result["num_blocks"]
    assert got.kv_cache_tokens == result["kv_cache_size_tokens"]
    assert got.pool.capacity_units / got.pool.sequence_units(settings["max_model_len"]) == pytest.approx(
        result["max_concurrency_exact"], rel=1e-12
    )
    assert len(got.pool.groups) == result["num_kv_cache_groups"]
