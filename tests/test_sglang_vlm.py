"""SGLang's lower memory fraction for multimodal checkpoints (`adjust_mem_fraction_for_vlm`) and its running-request
cap, against its source.

Hand derivations from `arg_groups/memory_hook.py` (0.5.23; `ServerArgs.adjust_mem_fraction_for_vlm` in the
0.5.2 and 0.5.10 wheels, the same arithmetic; none in 0.4.6) and `configs/model_config.py` (which
architectures are multimodal, and which are served text-only unless --enable-multimodal); the vision tower's
depth and width as transformers' config classes answer `getattr` (the JSON's values, else the class defaults).
The oracle test runs SGLang's own function on transformers' own config objects for every catalog checkpoint
with a `vision_config`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from capacity.engines import DefaultsRequest, Engine
from capacity.engines import sglang as sg
from capacity.engines.registry import engine_profile
from capacity.estimate import estimate
from capacity.hf_config import parse_config
from capacity.spec import DeploymentSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from tests.conftest import ORACLE_PYTHON, ROOT, require_oracle_venv

CONFIGS = ROOT / "models_registry" / "catalog" / "configs"


def _fraction(model_id: str, version: str | None = None) -> float:
    gpu = find_gpu_sku("h100-sxm-80gb")
    profile = engine_profile(Engine.SGLANG, version)
    request = DefaultsRequest(load_model(model_id).spec, gpu, gpu.memory_total_bytes, 8192, 1, 1)
    return profile.defaults(request).gpu_memory_utilization


def _text_fraction(prefill_graphs: bool = True) -> float:
    """The text model's fraction on an H100 SXM at TP 1 (nvidia-smi's 81,559 MiB: the catalog's); `prefill_graphs`
    False: without the prefill CUDA graphs' reserve, as 0.5.22 on turns them off for a model served multimodal."""
    gpu = find_gpu_sku("h100-sxm-80gb")
    return sg.mem_fraction_static(sg.device_memory_bytes(gpu, gpu.memory_total_bytes), 1, 1, prefill_graphs=prefill_graphs)


@pytest.mark.parametrize(
    ("model_id", "factor"),
    [
        # Gemma 4: vision_config states neither field; Gemma4VisionConfig's defaults 16 layers x 768:
        # c = 16 x 768^2 / (24 x 1024^2) = 0.375 -> 1 - 0.1 x (0.375 - 1) = 1.0625, clamped to 1.05 -> 0.95 x 1.05
        ("google/gemma-4-26B-A4B", 0.95 * 1.05),
        # Llama 3.2 Vision (Mllama): 32 x 1280^2 / (24 x 1024^2) = 2.0833... -> 1 - 0.10833... = 0.891666...
        ("meta-llama/Llama-3.2-11B-Vision", 0.95 * (1 - 0.1 * (32 * 1280**2 / (24 * 1024**2) - 1))),
        # Mistral Small 3.1 (Pixtral tower): 24 x 1024 is ViT-L/14 itself -> 0.95
        ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", 0.95),
        # Qwen3.5's vision config counts `depth`, no num_hidden_layers: SGLang's getattr default 24, hidden 1152:
        # c = 1152^2 / 1024^2 = 1.265625 -> 1 - 0.0265625 = 0.9734375
        ("Qwen/Qwen3.8-27B", 0.95 * 0.9734375),
        # Gemma 3 and Llama 4: ModelConfig turns multimodal off unless --enable-multimodal -> no factor
        ("google/gemma-3-27b-it", 1.0),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 1.0),
        ("meta-llama/Llama-3.1-8B-Instruct", 1.0),  # no vision_config
    ],
)
def test_default_fraction_of_multimodal_checkpoints(model_id: str, factor: float) -> None:
    # served multimodal, outside the architectures validated with breakable prefill graphs (Qwen3.5's is one):
    # no prefill graphs, none reserved for
    kept = factor == 1.0 or model_id == "Qwen/Qwen3.8-27B"
    assert _fraction(model_id) == pytest.approx(_text_fraction(prefill_graphs=kept) * factor, abs=1e-9)


def test_a_multimodal_model_s_reserve_has_no_prefill_graphs_from_0_5_22() -> None:
    """By hand from memory_hook.py (0.5.23) on an H100 SXM (81,559 MiB) at TP 1: reserved_mem = 512 + 1.5 x 8,192
    (chunked_prefill_size) + 1 x 1 / 8 x 1,024 + 2 x 256 (decode graphs) = 13,440 MiB, plus 8 MiB for each of the
    58 prefill graph sizes up to 8,192 (4..32 by 4, 48..256 by 16, 288..512 by 32, 576..1,024 by 64, 1,280..4,096 by
    256, 4,608..8,192 by 512) = 464 MiB for a text model: round((81,559 - 13,904) / 81,559, 3) = 0.83; a model served
    multimodal has the prefill graphs turned off (cuda_graph_hook.py, "multimodal model"; 0.5.22 on): round((81,559
    - 13,440) / 81,559, 3) = 0.835, times its VLM factor (Mistral Small 3.1: 0.95). Every release since prefill graphs
    were reserved for (0.5.10) turned them off for a multimodal model; from 0.5.19 not for the architectures SGLang
    validated with breakable graphs (Qwen3.5's), and 0.5.10-0.5.13 also turned them off with LoRA or PP > 1."""
    assert len(sg.prefill_cuda_graph_sizes(8192)) == 58
    assert _text_fraction() == 0.83
    mistral = "mistralai/Mistral-Small-3.1-24B-Instruct-2503"
    for version in (None, "0.5.22", "0.5.21", "0.5.12"):
        assert _fraction(mistral, version) == pytest.approx(0.835 * 0.95, abs=1e-12), version
    qwen = "Qwen/Qwen3.8-27B"  # Qwen3_5ForConditionalGeneration: on the list from 0.5.19
    assert _fraction(qwen, "0.5.19") / _fraction(qwen, "0.5.18") == pytest.approx(0.83 / 0.835, abs=1e-12)
    gpu = find_gpu_sku("h100-sxm-80gb")
    text = load_model("meta-llama/Llama-3.1-8B-Instruct").spec

    def fraction(version: str, **asked: object) -> float:
        request = DefaultsRequest(text, gpu, gpu.memory_total_bytes, 8192, 1, 1, **asked)  # type: ignore[arg-type]
        return engine_profile(Engine.SGLANG, version).defaults(request).gpu_memory_utilization

    assert (fraction("0.5.12"), fraction("0.5.12", lora=True), fraction("0.5.14", lora=True)) == (0.83, 0.835, 0.83)


def test_no_vlm_factor_before_0_5() -> None:
    # the 0.4.6 wheel's server_args.py has no adjust_mem_fraction_for_vlm: the legacy table stands
    assert _fraction("google/gemma-4-26B-A4B", "0.4.6") == sg.legacy_mem_fraction_static(1, 1)
    gpu = find_gpu_sku("h100-sxm-80gb")
    tiered = sg.tiered_mem_fraction_static(sg.device_memory_bytes(gpu, gpu.memory_total_bytes), 1, 1)
    assert _fraction("google/gemma-4-26B-A4B", "0.5.2") == pytest.approx(tiered * 0.95 * 1.05)


def test_multimodal_checkpoints_are_not_flagged() -> None:
    profile = engine_profile(Engine.SGLANG)
    for model_id in ("google/gemma-4-26B-A4B", "google/gemma-3-27b-it", "meta-llama/Llama-3.2-11B-Vision"):
        assert profile.unmodelled(load_model(model_id).spec) is None


_ORACLE_SCRIPT = r"""
import json, sys, types
from transformers import AutoConfig
from sglang.srt.arg_groups.memory_hook import adjust_mem_fraction_for_vlm
out = {}
for path in json.load(sys.stdin):
    try:
        cfg = AutoConfig.from_pretrained(path)
    except Exception as exc:  # a config this transformers cannot load (reported, not compared)
        out[path] = "unloadable: " + type(exc).__name__
        continue
    out[path] = adjust_mem_fraction_for_vlm(1.0, types.SimpleNamespace(hf_config=cfg), False, None)
print("@@ORACLE@@" + json.dumps(out))
"""


@pytest.mark.engine_oracle
def test_vision_tower_read_as_sglang_reads_it() -> None:
    """capplan's factor from the parsed `vision_tower` against SGLang's function on transformers' config."""
    require_oracle_venv()
    dirs = sorted(str(p.parent) for p in CONFIGS.rglob("config.json") if "vision_config" in json.loads(p.read_text()))
    command = [str(ORACLE_PYTHON), "-c", _ORACLE_SCRIPT]
    done = subprocess.run(command, input=json.dumps(dirs), capture_output=True, text=True, timeout=300, check=False)
    marker = [line for line in done.stdout.splitlines() if line.startswith("@@ORACLE@@")]
    assert marker, done.stderr[-1000:]
    theirs = json.loads(marker[0][len("@@ORACLE@@") :])
    compared = 0
    for path, factor in theirs.items():
        if isinstance(factor, str):
            continue
        tower = parse_config(json.loads((Path(path) / "config.json").read_text())).vision_tower
        assert tower is not None, path
        assert sg.vlm_mem_fraction_factor(tower.num_layers, tower.hidden_size) == pytest.approx(factor), path
        compared += 1
    assert compared >= 5, theirs


def test_running_request_cap_bounds_b_max_of_a_text_model() -> None:
    """`resolve_max_num_reqs` without --max-running-requests: int(tokens / context_len x 512) within [2048, 4096],
    at most tokens // 2; B_max at 128 tokens is the smaller of that and what the pool holds."""
    resolved = load_model("meta-llama/Llama-3.1-8B-Instruct")
    gpu = find_gpu_sku("h100-sxm-80gb")
    est = estimate(resolved.spec, DeploymentSpec(engine="sglang"), gpu=gpu, context_tokens=128)
    tokens, context_len = est.kv_cache_tokens, est.max_model_len  # max_total_num_tokens, the model's 131,072
    cap = min(max(min(int(tokens / context_len * 512), 4096), 2048), tokens // 2)
    assert est.max_num_seqs == cap
    assert est.b_max == min(tokens // 128, cap) == cap  # the pool holds more 128-token requests than the cap
