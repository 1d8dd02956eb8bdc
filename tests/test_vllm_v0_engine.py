"""The V0 engine vLLM 0.8-0.10 keep beside V1 (`VLLM_USE_V1=0`).

Oracle: the wheels' own source. envs.py reads `VLLM_USE_V1 = bool(int(os.getenv("VLLM_USE_V1", "1")))` in the
0.8.0, 0.9.2 and 0.10.1 wheels (V1 the default, V0 still there; 0.11.0 removed it). `_set_default_args_v0`
(engine/arg_utils.py, the same in 0.8.0, 0.9.2 and 0.10.1): "Chunked prefill not supported for Multimodal or MLA
in V0": `enable_chunked_prefill = False` for them; above 32,768 tokens it turns on unless the model has a sliding
window, speculative decoding, LoRA, prompt adapters or is a pooling model (no ROCm exception any more); max_num_seqs
256. SchedulerConfig: 2,048 tokens with chunked prefill (`_DEFAULT_MAX_NUM_BATCHED_TOKENS`), else
max(max_model_len, 2048), a multimodal model's at least 5,120. The V0 worker, its profiling run (the sampler's
pass part of the forward peak) and its KV accounting are 0.7.3's; the MLA backend is the release's (FlashMLA's
64-token block on Hopper, no absorbed matrices, no 256-B entry padding: 0.8.0's rewrite).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from capacity import engine_constants as ec
from capacity.engines.command_line import read_command
from capacity.engines.protocol import DefaultsRequest
from capacity.engines.registry import engine_profile
from capacity.estimate import estimate
from capacity.hf_config import parse_config
from capacity.overhead import OverheadInputs
from capacity.spec import DeploymentSpec, ModelSpec
from models_registry.sources.gpu_catalog import load_gpu_skus
from tests.test_registry_hostile import _bundled_config

GPUS = {g.id: g for g in load_gpu_skus(Path(__file__).resolve().parent.parent / "models_registry/catalog/gpus.yaml")}
H200, H100, MI300X = GPUS["h200-sxm-141gb"], GPUS["h100-sxm-80gb"], GPUS["mi300x-192gb"]


def _catalog(repo_id: str) -> ModelSpec:
    return parse_config(_bundled_config(repo_id), name=repo_id)


@pytest.mark.parametrize(
    ("text", "v0"),
    [
        ("VLLM_USE_V1=0 vllm serve meta-llama/Llama-3.1-8B-Instruct", True),
        ("env VLLM_USE_V1=0 VLLM_USE_FLASHINFER_SAMPLER=1 vllm serve meta-llama/Llama-3.1-8B-Instruct", True),
        ("VLLM_USE_V1=1 vllm serve meta-llama/Llama-3.1-8B-Instruct", False),
        ("vllm serve meta-llama/Llama-3.1-8B-Instruct", False),
        ("docker run --gpus all -e VLLM_USE_V1=0 vllm/vllm-openai:v0.9.2 --model meta-llama/Llama-3.1-8B-Instruct", True),
        ("VLLM_USE_V1=0 python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct", False),
    ],
)
def test_the_pasted_environment_picks_the_engine(text: str, v0: bool) -> None:
    assert bool(read_command(text).options.get("vllm_v0_engine")) is v0


@pytest.mark.parametrize("version", ["0.8.0", "0.9.2", "0.10.1"])
def test_the_releases_with_a_v0_engine(version: str) -> None:
    profile = engine_profile("vllm", version, v0_engine=True)
    release = profile.release  # type: ignore[attr-defined]
    assert release.engine_generation == "v0" and release.batch_defaults is ec.BatchDefaults.V0
    assert release.overhead_profile == "v0" and not release.cudagraph_memory_in_budget
    assert release.kv_cache_size_tokens_rule is ec.KVCacheSizeRule.BLOCKS and not release.hybrid_kv_cache_manager
    assert not release.mla_absorbed_weights and release.mla_entry_align_bytes == 0
    assert profile.version == version and profile.engine_rules_version == "0.7.3"
    assert engine_profile("vllm", version).release.engine_generation == "v1"  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", ["0.7.3", "0.11.0", "0.33.0"])
def test_no_other_release_has_one_to_pick(version: str) -> None:
    assert engine_profile("vllm", version, v0_engine=True) == engine_profile("vllm", version)


def _defaults(model: ModelSpec, length: int, gpu=H200):  # type: ignore[no-untyped-def]
    request = DefaultsRequest(model, gpu, gpu.memory_total_bytes, length, 8, 1)
    return engine_profile("vllm", "0.8.0", v0_engine=True).defaults(request)


def test_the_v0_default_batch_of_0_8() -> None:
    deepseek = _catalog("deepseek-ai/DeepSeek-R1")
    at_limit = _defaults(deepseek, 163840)
    assert at_limit.max_num_batched_tokens == 163840  # MLA: chunked prefill off, max(max_model_len, 2048)
    assert at_limit.max_num_seqs == 256
    assert at_limit.block_size == 64  # FlashMLA on Hopper (0.8's MLA backend)
    llama = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    assert _defaults(llama, 131072).max_num_batched_tokens == 2048  # long context: chunked prefill on
    assert _defaults(llama, 131072, MI300X).max_num_batched_tokens == 2048  # no ROCm exception from 0.8
    vl = _catalog("Qwen/Qwen2.5-VL-7B-Instruct")
    assert _defaults(vl, 8192).max_num_batched_tokens == 8192
    assert _defaults(vl, 2048).max_num_batched_tokens == 5120  # the multimodal floor
    assert engine_profile("vllm", "0.8.0").defaults(  # V1's: 8,192 on an H200 in 0.8.0 (by its device name)
        DefaultsRequest(deepseek, H200, H200.memory_total_bytes, 163840, 8, 1)
    ).max_num_batched_tokens == 8192


def test_its_profiling_run_is_0_7_3s() -> None:
    """The same inputs give 0.7.3's overhead (V0's sampler: the 0.6.2-0.7.3 rule of its own execute_model), not
    0.8.0 V1's."""
    llama = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    inputs = OverheadInputs(llama, 1, 1, 2048, 256, 2)
    v0 = engine_profile("vllm", "0.8.0", v0_engine=True).overhead(inputs)
    assert v0 == engine_profile("vllm", "0.7.3").overhead(inputs)
    assert v0 != engine_profile("vllm", "0.8.0").overhead(inputs)
    assert any("rule of vLLM 0.6.2" in name for name, _ in v0.buffers)


def test_the_estimate_and_its_notes() -> None:
    deepseek = _catalog("deepseek-ai/DeepSeek-R1")
    deployment = DeploymentSpec(engine_version="0.8.0", tp=8, vllm_v0_engine=True)
    v0 = estimate(deepseek, deployment, gpu=H200)
    v1 = estimate(deepseek, replace(deployment, vllm_v0_engine=False), gpu=H200)
    assert v0.engine_version == "0.8.0" and v0.block_size == 64
    assert v0.max_num_batched_tokens == 163840 and v1.max_num_batched_tokens == 8192
    assert v0.activation_peak_bytes_per_gpu > v1.activation_peak_bytes_per_gpu  # the whole 163,840-token pass
    assert any("the V0 engine of vLLM 0.8.0 (VLLM_USE_V1=0)" in note for note in v0.notes)
    gone = estimate(deepseek, replace(deployment, engine_version="0.11.0"), gpu=H200)
    assert any("VLLM_USE_V1=0 picks nothing on vLLM 0.11.0" in note for note in gone.notes)
    assert not any("VLLM_USE_V1" in note for note in estimate(deepseek, replace(deployment, engine_version="0.7.3"), gpu=H200).notes)
    sglang = estimate(deepseek, replace(deployment, engine="sglang", engine_version=None), gpu=H200)
    assert any("VLLM_USE_V1=0 is vLLM's: ignored for sglang" in note for note in sglang.notes)


def test_the_cli_reads_it_from_a_pasted_command() -> None:
    from pipelines.cli import app

    command = "VLLM_USE_V1=0 vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 8"
    result = CliRunner().invoke(
        app, ["estimate", "--from-command", command, "--gpu", "h200-sxm-141gb", "--engine-version", "0.8.0"]
    )
    assert result.exit_code == 0, result.output
    assert "profiling pass: 163,840 tokens" in result.output and "the V0 engine of vLLM 0.8.0" in result.output
    flag = CliRunner().invoke(
        app, ["estimate", "deepseek-ai/DeepSeek-R1", "--tp", "8", "--gpu", "h200-sxm-141gb", "--engine-version", "0.8.0",
              "--vllm-v0-engine", "--json"],
    )  # fmt: skip
    assert flag.exit_code == 0, flag.output
    assert '"max_num_batched_tokens": 163840' in flag.output
