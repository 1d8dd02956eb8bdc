"""vLLM 0.33.0's own model classes as the oracle for the weights one tensor-parallel rank holds
(`capacity.weights.estimate_weights`, modeled from the config: what TP splits and what every rank keeps whole).

vLLM builds each model in the engine-oracle venv on the meta device as rank 0 of a TP group of N
(`tools/engine_oracle/vllm_weight_shards.py`): column-, row- and QKV-parallel projections, QKVParallelLinear's
copies of KV heads past TP = heads, ReplicatedLinear (MLA's q_a / kv_a down-projections), per-head q/k norms,
row-parallel and fused-MoE biases, vocab-parallel embeddings and FusedMoE's TP split of every expert are the
release's own module code. The configs are the registry's test configs with their quantization block removed
(bf16 throughout), so the comparison is of parameters placed, not of a quantizer's scales; three quantized
checkpoints (`QUANTIZED`) then check the formats: which parts a compressed-tensors ignore list keeps 16-bit, packed
INT4 with its group scales and, when asymmetric, zero points, MXFP4 (float 4-bit in groups of 32, an 8-bit scale
a group), as vLLM's quantization methods allocate them.

Bytes are compared as well as parameters: the parameters vLLM keeps in fp32 whatever the checkpoint (the noaux_tc
score-correction bias; GLM-4.5's and MiniMax-M2's whole gate) are `LayerParams.fp32_router`. Left out (not among the
cases): the biases of copied KV heads (gpt-oss past TP 8: 64 parameters a layer).

Without the oracle venv the test is skipped with the reason; under CI (CI=true) it fails.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from capacity.engines.registry import engine_profile
from capacity.hf_config import parse_config
from capacity.weights import estimate_weights
from tests.conftest import ROOT, compressed_tensors_int4, require_oracle_venv, run_in_oracle_venv

pytestmark = pytest.mark.engine_oracle

RUNNER = ROOT / "tools" / "engine_oracle" / "vllm_weight_shards.py"
MARKER = "@@weight-shards-oracle@@ "
CONFIGS = ROOT / "tests" / "configs"
# config -> TP sizes: MLA with and without q_lora_rank, MoE with few KV heads and per-head norms, dense GQA past its
# KV heads, biased attention and experts with sinks, MoE with KV heads = TP and past them, fp32 routers (GLM-4.5,
# MiniMax-M2; Kimi-K2's bias), per-head norms on a dense model, q/k/v biases, Falcon's parallel attention, Phi-3's
# fused projections
CASES: dict[str, tuple[int, ...]] = {
    "deepseek_v3-deepseek-r1": (1, 8),
    "deepseek_v2-deepseek-v2-lite": (4, 16),
    "qwen3_moe-qwen3-30b-a3b": (4, 8),
    "llama-llama-3.1-8b": (2, 16),
    "gpt_oss-gpt-oss-20b": (8,),
    "mixtral-mixtral-8x7b-v0.1": (8, 16),
    "glm4_moe-glm-4.5": (8,),
    "minimax_m2-minimax-m2": (8,),
    "kimi_k2-kimi-k2-instruct": (8,),
    "qwen3-qwen3-8b": (8,),
    "qwen2-qwen2.5-7b": (4,),
    "falcon-falcon-40b": (8,),
    "phi3-phi-3-mini-4k-instruct": (4,),
    "mistral-mistral-7b-v0.1": (16,),
    "deepseek_v2-deepseek-v2": (8,),
    "gpt_oss-gpt-oss-120b": (8,),
}



# Quantized checkpoints, their quantization kept: which parts an ignore list keeps 16-bit (vLLM's `re:` / exact-name
# matching), packed INT4 with and without zero points, group scales split with their rows. Kimi-K2-Thinking is the
# catalog's config (routed experts INT4 group 32; attention, shared experts and the dense MLP 16-bit)
QUANTIZED: dict[str, tuple[dict[str, Any], int]] = {
    "kimi-k2-thinking": (
        json.loads((ROOT / "models_registry/catalog/configs/moonshotai/Kimi-K2-Thinking/config.json").read_text()),
        8,
    ),
    "qwen3-8b-int4-asymmetric-g128": (
        {
            **json.loads((CONFIGS / "qwen3-qwen3-8b.json").read_text()),
            "quantization_config": compressed_tensors_int4(128, False, ["lm_head"]),
        },
        2,
    ),
    "qwen3-30b-a3b-mxfp4-attention-16-bit": (
        {
            **json.loads((CONFIGS / "qwen3_moe-qwen3-30b-a3b.json").read_text()),
            "quantization_config": {
                "quant_method": "compressed-tensors",
                "format": "mxfp4-pack-quantized",
                "config_groups": {
                    "group_0": {
                        "targets": ["Linear"],
                        "weights": {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32},
                    }
                },
                "ignore": ["lm_head", "re:.*mlp.gate$", "re:.*self_attn.*"],
            },
        },
        4,
    ),
    "qwen3-30b-a3b-int4-g32": (
        {
            **json.loads((CONFIGS / "qwen3_moe-qwen3-30b-a3b.json").read_text()),
            "quantization_config": compressed_tensors_int4(32, True, ["lm_head", "re:.*mlp.gate$"]),
        },
        4,
    ),
}


def _qwen3_moe_with(quantization: dict[str, Any]) -> dict[str, Any]:
    return {**json.loads((CONFIGS / "qwen3_moe-qwen3-30b-a3b.json").read_text()), "quantization_config": quantization}


# compressed-tensors WNA16 experts at a TP size whose shards cut a group of scales, which vLLM refuses to create
# (`CompressedTensorsWNA16MoEMethod.create_weights` raises), beside one it builds (Qwen3-30B-A3B's 768-wide experts:
# 96 a rank at TP 8). The zero-point rule needs channel-wise scales, which only the Marlin kernel runs; the runner
# stubs the kernel choice with Triton's (tests/test_start_refusals.py holds it by hand)
WNA16_LAYOUTS: dict[str, tuple[dict[str, Any], int]] = {
    "qwen3-30b-a3b-int4-g128-tp8": (_qwen3_moe_with(compressed_tensors_int4(128, True, ["lm_head", "re:.*mlp.gate$"])), 8),
    "qwen3-30b-a3b-int4-g32-tp8": (_qwen3_moe_with(compressed_tensors_int4(32, True, ["lm_head", "re:.*mlp.gate$"])), 8),
}


@cache
def _config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    config.pop("quantization_config", None)
    config["torch_dtype"] = "bfloat16"
    return config


@pytest.fixture(scope="module")
def vllm_ranks() -> dict[str, dict[str, Any]]:
    require_oracle_venv()
    cases = {f"{name}@{tp}": {"config": _config(name), "tp": tp} for name, tps in CASES.items() for tp in tps}
    cases |= {f"{name}@{tp}": {"config": config, "tp": tp} for name, (config, tp) in QUANTIZED.items()}
    cases |= {name: {"config": config, "tp": tp} for name, (config, tp) in WNA16_LAYOUTS.items()}
    done = run_in_oracle_venv(RUNNER, {"cases": cases}, timeout_s=900)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(MARKER)), None)
    assert line is not None, done.stderr[-3000:]
    reply = json.loads(line[len(MARKER) :])
    assert reply["vllm_version"] == "0.33.0"
    ranks: dict[str, dict[str, Any]] = reply["ranks"]
    return ranks


@pytest.mark.parametrize(("name", "tp"), [(name, tp) for name, tps in CASES.items() for tp in tps])
def test_a_ranks_weights_are_what_vllm_places_on_it(name: str, tp: int, vllm_ranks: dict[str, dict[str, int]]) -> None:
    ours = estimate_weights(parse_config(_config(name)), "bfloat16", tp=tp).per_gpu_bytes
    theirs = vllm_ranks[f"{name}@{tp}"]
    assert ours == theirs["bytes"], (name, tp, ours, theirs)


@pytest.mark.parametrize("name", QUANTIZED)
def test_a_quantized_checkpoints_rank_holds_what_vllm_allocates(name: str, vllm_ranks: dict[str, dict[str, int]]) -> None:
    """The served format `auto` on the checkpoint's own quantization. vLLM's packed layers also record each
    weight's unpacked shape (`weight_shape`: 2 values a linear module, 2 an expert and projection, tens of KB a
    model), which capplan does not count: compared without them, and they stay that small."""
    config, tp = QUANTIZED[name]
    ours = estimate_weights(parse_config(config), "auto", tp=tp).per_gpu_bytes
    theirs = vllm_ranks[f"{name}@{tp}"]
    assert 0 <= theirs["shape_record_bytes"] < theirs["bytes"] // 10_000
    assert ours == theirs["bytes"] - theirs["shape_record_bytes"], (name, tp, ours, theirs)


@pytest.mark.parametrize("name", WNA16_LAYOUTS)
def test_wna16_experts_are_refused_where_vllm_refuses_to_create_them(
    name: str, vllm_ranks: dict[str, dict[str, Any]]
) -> None:
    """capplan's `weights_refusal` says what vLLM 0.33's own `create_weights` raises, word for word, and nothing where
    it builds the layers (their bytes then agree as the other quantized checkpoints' do)."""
    config, tp = WNA16_LAYOUTS[name]
    spec = parse_config(config)
    served = estimate_weights(spec, "auto", tp=tp)
    ours = engine_profile("vllm", "0.33.0").weights_refusal(spec, served.format_name, tp)
    theirs = vllm_ranks[name]
    assert ours == theirs.get("refused"), (name, ours, theirs)
    if ours is None:
        assert served.per_gpu_bytes == theirs["bytes"] - theirs["shape_record_bytes"]
