"""TensorRT-LLM's serving features (issue 23: sized or refused with a reason): the LoRA (PEFT) cache, weight offload.

Oracles: a public TensorRT-LLM startup log and hand derivations from the engine's source.

* triton-inference-server/tensorrtllm_backend#559 (TensorRT-LLM 0.11, Qwen1.5-7B-Chat: hidden 4,096, 32 heads
  and 32 KV heads of 128, intermediate 11,008, 32 layers, fp16; LoRA rank 8 on attn_q/k/v, attn_dense and the
  three MLP modules): "Using 39976960 bytes for LoRA host cache", "Using 312836096 bytes for LoRA device cache",
  "Max LoRA size is 19988480", "LoRA host Cache can hold 1 max sized LoRAs", "LoRA device Cache can hold 8".
  The same C++ PeftCacheManager serves the PyTorch backend.
* cpp/tensorrt_llm/batch_manager/peftCacheManager.cpp getPageManagerConfig / getMaxNumSlots; runtime/loraModule.cpp
  createLoraModules; tensorrt_llm/_torch/pyexecutor/_util.py create_py_executor_instance (max_loras ->
  num_device_module_layer); llmapi/llm_args.py PeftCacheConfig (device_cache_percent 0.02, host 1 GiB).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from capacity.engines.kinds import Engine
from capacity.estimate import estimate
from capacity.features.lora import LoraSpec, lora_memory
from capacity.features.lora_trtllm import PeftPages
from capacity.spec import DeploymentSpec, SpecError
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from pipelines.cli import app

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def test_page_geometry_matches_a_public_tensorrt_llm_log() -> None:
    """Qwen1.5-7B: the four attention modules are 4,096 + 4,096 = 8,192 wide, the three MLP ones 4,096 + 11,008 =
    15,104; 32 layers; rank 8. The log's byte figures are slots x pageWidth x 2 B before the page rounding."""
    pages = PeftPages((8192,) * 4 + (15104,) * 3, 32, 8)
    assert pages.adapter_elements == 19_988_480  # "Max LoRA size is 19988480"
    host_slots = pages.slots_in(39_976_960, 2)
    device_slots = pages.slots_in(312_836_096, 2)
    assert host_slots * 8192 * 2 == 39_976_960 and device_slots * 8192 * 2 == 312_836_096
    assert pages.adapters_held(host_slots) == 1  # "LoRA host Cache can hold 1 max sized LoRAs"
    assert pages.adapters_held(device_slots) == 8  # "LoRA device Cache can hold 8 max sized LoRAs"


def test_llama_8b_max_loras_by_hand() -> None:
    """Llama-3.1-8B (hidden 4,096, 32 / 8 heads of 128, intermediate 14,336, 32 layers), TP 1, bf16, max_loras 4,
    rank 16, q/k/v/o/gate/up/down. Widths: attn_q 8,192, attn_k/v 5,120, attn_dense 8,192, the three MLP modules
    18,432: pageWidth 5,120, the widest takes ceil(18,432 / 5,120) = 4 slots. A page: 8 x (2 + 1 + 1 + 2 + 4 x 3)
    x 32 layers = 4,608 slots. max_loras 4: 16 x 32 x 7 x 4 x 4 = 57,344 slots -> 13 pages of 4,608 x 5,120 x 2 B.
    Host (no max_cpu_loras): 1 GiB / 10,240 B = 104,857 slots -> 23 pages."""
    got = lora_memory(
        load_model(LLAMA).spec, LoraSpec(max_loras=4, max_lora_rank=16), Engine.TRTLLM, 1, 1, 2, 8192, 256
    )
    assert got.slot_bytes_per_gpu == 13 * 4608 * 5120 * 2 == 613_416_960
    assert got.host_bytes_per_gpu == 23 * 4608 * 5120 * 2
    # one adapter: 16 x (8,192 x 2 + 5,120 x 2 + 18,432 x 3) x 32 elements; 13 pages hold 7 of them
    assert got.slots == 13 * 4608 * 5120 // (16 * 81_920 * 32) == 7
    assert got.not_modelled is None and got.metadata_bytes_per_gpu == 0


def test_default_cache_is_two_percent_of_the_free_memory() -> None:
    """No max_loras: device_cache_percent 0.02 of what is free, rank 64 (LoraConfig's default). Llama-3.1-8B at TP 1:
    a page is max(8 x 18 x 32, ceil(64 x 18,432 / 5,120)) = 4,608 slots; 60 GiB free -> 0.02 x 60 GiB / 10,240 B."""
    free = 60 << 30
    got = lora_memory(load_model(LLAMA).spec, LoraSpec(), Engine.TRTLLM, 1, 1, 2, 8192, 256, free)
    slots = int(0.02 * free // 10_240)
    assert got.slot_bytes_per_gpu == -(-slots // 4608) * 4608 * 10_240
    assert got.rank == 64


def test_tp_splits_one_side_of_each_module() -> None:
    """TP 2: attn_q 4,096 + 2,048, attn_k/v 4,096 + 512 (pageWidth 4,608), attn_dense 2,048 + 4,096, MLP 4,096 +
    7,168 = 11,264 (3 slots). Page: 8 x (2 + 1 + 1 + 2 + 3 x 3) x 32 = 3,840; max_loras 1 at rank 8:
    8 x 32 x 7 x 1 x 3 = 5,376 slots -> 2 pages."""
    got = lora_memory(load_model(LLAMA).spec, LoraSpec(max_loras=1, max_lora_rank=8), Engine.TRTLLM, 2, 1, 2, 8192, 256)
    assert got.slot_bytes_per_gpu == 2 * 3840 * 4608 * 2


def test_estimate_charges_the_cache_before_the_fraction() -> None:
    """KvCacheCreator measures the memory in use with the PEFT cache alive: the budget loses 0.9 x the cache."""
    resolved = load_model(LLAMA)
    base = DeploymentSpec(engine="trtllm", max_model_len=8192)
    h100 = find_gpu_sku("H100")
    plain = estimate(resolved.spec, base, gpu=h100, checkpoint_bytes=resolved.checkpoint_bytes)
    spec = LoraSpec(max_loras=4, max_lora_rank=16)
    lora = estimate(resolved.spec, replace(base, lora=spec), gpu=h100, checkpoint_bytes=resolved.checkpoint_bytes)
    assert lora.not_modelled is None and lora.lora is not None
    lost = plain.kv_budget_bytes_per_gpu - lora.kv_budget_bytes_per_gpu
    assert abs(lost - 0.9 * 613_416_960) <= 1


@pytest.mark.parametrize(
    ("model", "targets", "message"),
    [
        (LLAMA, ("lm_head",), "no LoRA module for lm_head"),
        ("Qwen/Qwen3-30B-A3B", ("gate_proj",), "MoE expert MLPs"),
        ("deepseek-ai/DeepSeek-V2-Lite-Chat", ("q_proj",), "MLA attention"),
        ("nvidia/Nemotron-H-8B-Base-8K", ("down_proj",), "hybrid state-space"),
    ],
)
def test_what_tensorrt_llm_cannot_size_is_refused(model: str, targets: tuple[str, ...], message: str) -> None:
    spec = LoraSpec(max_loras=1, target_modules=targets)
    with pytest.raises(SpecError, match=message):
        lora_memory(load_model(model).spec, spec, Engine.TRTLLM, 1, 1, 2, 8192, 256)


def test_a_cache_smaller_than_one_adapter_does_not_start() -> None:
    """With 1 MiB free, 2 % holds fewer slots than one rank-64 adapter needs: the engine's TLLM_CHECK."""
    with pytest.raises(SpecError, match="would not start"):
        lora_memory(load_model(LLAMA).spec, LoraSpec(), Engine.TRTLLM, 1, 1, 2, 8192, 256, 1 << 20)


def test_weight_offload_is_refused_for_tensorrt_llm() -> None:
    """--cpu-offload-gb is vLLM's and SGLang's; TensorRT-LLM's host memory holds KV blocks only
    (kv_cache_config.host_cache_size): one line, exit 2, not an estimate sized as if vLLM offloaded."""
    result = CliRunner().invoke(
        app, ["estimate", LLAMA, "--gpu", "H100", "--engine", "trtllm", "--cpu-offload-gb", "4"]
    )
    assert result.exit_code == 2 and "TensorRT-LLM offloads no weights" in result.output
    assert "Traceback" not in result.output


def test_lora_on_tensorrt_llm_from_the_cli_is_sized() -> None:
    """The CLI's --max-loras / --max-lora-rank reach the PEFT cache (lora_config.max_loras / max_lora_rank)."""
    args = ["estimate", LLAMA, "--gpu", "H100", "--engine", "trtllm", "--enable-lora", "--max-loras", "4"]
    result = CliRunner().invoke(app, [*args, "--max-lora-rank", "16", "--json"])
    assert result.exit_code == 0, result.output
    assert "not modelled" not in result.output and "TensorRT-LLM PEFT cache" in result.output
