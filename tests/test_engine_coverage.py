"""Every windowed, state or multimodal model of the catalog, on TensorRT-LLM and SGLang at the releases the grid
names, is sized or refused with the engine's reason: none is sized and flagged "not modelled".

The releases (capacity/engine_constants.py): SGLang 0.5.23, the wheel the SGLang rules were read from; TensorRT-LLM
1.2, the newest line whose Mamba state slots are read (MambaCacheManager, through 1.2) and whose V1 KV cache manager
keeps windowed layers at the full length (use_kv_cache_manager_v2 False by default through 1.3).

Which architectures a TensorRT-LLM release cannot run, from the engine's own tree and release notes (not from
capplan): a model class is a `@register_auto_model("<Architecture>")` under tensorrt_llm/_torch/models/.
- JambaForCausalLM: no modeling_jamba.py in any stored version of tensorrt_llm/_torch/models/ (NVIDIA/TensorRT-LLM).
- GraniteMoeHybridForCausalLM (granite-4.0-h): no modeling file and no @register_auto_model of it in any version.
- Gemma4ForConditionalGeneration: added by PR #12932 (merged April 2026, "Add Gemma4 multimodal model support");
  the v1.3.0rc9 release notes (24 March 2026) list no Gemma 4, the 1.3.0rc13 supported-models page lists it.
- Qwen3_5*: "Add initial Qwen3.5 text model support for the PyTorch backend with BF16/FP8 (#12242)", v1.3.0rc9
  notes; issue #12321 (18 March 2026) could not serve Qwen3.5 on 1.3.0rc8.
- Qwen3NextForCausalLM: PR #7892 (October 2025), "Qwen3 Next starts to be supported in TRTLLM 1.2.0rc0.post1".
SGLang 0.5.23: python/sglang/srt/models/ has no Jamba class (and configs/hybrid_arch.py no Jamba config).
"""

from __future__ import annotations

import json

import pytest

from capacity.engines import Engine
from capacity.engines.protocol import StartRequest
from capacity.engines.registry import engine_profile
from capacity.estimate import estimate
from capacity.grid import GridOptions
from capacity.hf_config import parse_config
from capacity.spec import DeploymentSpec, ModelSpec
from models_registry.resolve import load_model
from models_registry.sources.bundled import read_catalog_entries
from models_registry.sources.gpu_catalog import find_gpu_sku
from tests.conftest import ROOT

# (engine, repo id) left flagged "not modelled" at the grid's releases, each with why; empty is the goal
ALLOWED_FLAGGED: dict[tuple[Engine, str], str] = {}


def _catalog() -> list[tuple[str, ModelSpec]]:
    entries, _errors = read_catalog_entries(ROOT / "models_registry" / "catalog")
    out = []
    for entry in entries:
        try:
            out.append((entry.repo_id, parse_config(json.loads(entry.config_path.read_text()), name=entry.repo_id)))
        except ValueError:
            continue  # refused by the parser with a reason (the registry reports those)
    return out


def _windowed_state_or_multimodal(spec: ModelSpec) -> bool:
    return any(layer.cache.windowed for layer in spec.layers) or spec.has_state_layers or spec.vision_tower is not None


def test_the_grid_names_a_release_for_every_engine() -> None:
    options = GridOptions()
    assert options.engine_version(Engine.SGLANG.value) == "0.5.23"
    assert options.engine_version(Engine.TRTLLM.value) == "1.2"
    assert options.engine_version(Engine.VLLM.value) is None  # the profile's VLLM_DEFAULT_VERSION
    other = GridOptions(sglang_version="0.5.10", trtllm_version="1.1.0")
    assert (other.engine_version("sglang"), other.engine_version("trtllm")) == ("0.5.10", "1.1.0")
    with pytest.raises(ValueError, match="TensorRT-LLM release 'latest' is not a version"):
        GridOptions(trtllm_version="latest")


def test_catalog_models_are_sized_or_refused_at_the_grids_releases() -> None:
    options = GridOptions()
    gpu = find_gpu_sku("h100-sxm-80gb")
    covered, flagged = set(), {}
    for repo_id, spec in _catalog():
        if not _windowed_state_or_multimodal(spec):
            continue
        for engine in (Engine.TRTLLM, Engine.SGLANG):
            profile = engine_profile(engine, options.engine_version(engine.value))
            refusal = profile.start_refusal(StartRequest(spec, gpu, "bf16", min(spec.context_limit_tokens, 4096)))
            reason = profile.unmodelled(spec)
            assert not (refusal and reason), (engine, repo_id)  # a refused model is not also sized
            if reason:
                flagged[(engine, repo_id)] = reason
            covered.add(repo_id)
    assert len(covered) >= 20  # the catalog's windowed / state / multimodal models were all looked at
    assert set(flagged) == set(ALLOWED_FLAGGED), flagged


@pytest.mark.parametrize(
    ("repo_id", "architecture", "first"),
    [
        ("ai21labs/AI21-Jamba-1.5-Mini", "JambaForCausalLM", "in no release read"),
        ("google/gemma-4-E2B", "Gemma4ForConditionalGeneration", "first in 1.3"),
        ("Qwen/Qwen3.8-27B", "Qwen3_5ForConditionalGeneration", "first in 1.3"),
    ],
)
def test_trtllm_1_2_does_not_start_an_architecture_it_has_no_class_for(
    repo_id: str, architecture: str, first: str
) -> None:
    spec = load_model(repo_id).spec
    deployment = DeploymentSpec(engine="trtllm", engine_version="1.2", max_model_len=4096, max_num_seqs=8)
    est = estimate(spec, deployment, gpu=find_gpu_sku("h100-sxm-80gb"), checkpoint_bytes=None)
    assert not est.starts and not est.fits and est.not_modelled is None
    assert est.reason.startswith(
        f"DOES NOT START: trtllm refuses it: TensorRT-LLM 1.2 has no implementation of {architecture} ({first}"
    )
    assert est.reason.endswith("it does not serve this model")


def test_granite_4_h_has_no_class_in_any_release() -> None:
    from tests.test_granite_hybrid import GRANITE_4_H

    spec = parse_config(GRANITE_4_H)
    for version in (None, "1.2", "1.3.0rc9"):
        refusal = engine_profile(Engine.TRTLLM, version).start_refusal(StartRequest(spec, None, "bf16", 4096))
        assert "has no implementation of GraniteMoeHybridForCausalLM (in no release read" in (refusal or ""), version


def test_a_release_with_the_class_is_not_refused() -> None:
    gemma4, qwen3_next = load_model("google/gemma-4-E2B").spec, load_model("Qwen/Qwen3-Next-80B-A3B-Instruct").spec
    h100 = find_gpu_sku("h100-sxm-80gb")
    assert engine_profile(Engine.TRTLLM, "1.3.0").start_refusal(StartRequest(gemma4, h100, "bf16", 4096)) is None
    assert engine_profile(Engine.TRTLLM, "1.2.0rc2").start_refusal(StartRequest(qwen3_next, h100, "bf16", 4096)) is None
    assert engine_profile(Engine.TRTLLM, "1.1.0").start_refusal(StartRequest(qwen3_next, h100, "bf16", 4096))
    # no release stated: unknown, so only the architecture no release has (Jamba) is refused
    unstated = engine_profile(Engine.TRTLLM)
    assert unstated.start_refusal(StartRequest(gemma4, h100, "bf16", 4096)) is None
    jamba = load_model("ai21labs/AI21-Jamba-1.5-Mini").spec
    assert "TensorRT-LLM has no implementation of JambaForCausalLM" in (
        unstated.start_refusal(StartRequest(jamba, h100, "bf16", 4096)) or ""
    )


def test_the_nightly_takes_the_releases_from_its_config_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    from pipelines.assets.capacity import GridConfig, grid_options

    monkeypatch.delenv("CAPPLAN_SGLANG_RELEASE", raising=False)
    monkeypatch.setenv("CAPPLAN_TRTLLM_RELEASE", "1.1.0")
    options = grid_options(GridConfig())
    assert (options.engine_version("sglang"), options.engine_version("trtllm")) == ("0.5.23", "1.1.0")
    options = grid_options(GridConfig(trtllm_release="1.2.0rc2", sglang_release="0.5.20"))
    assert (options.engine_version("sglang"), options.engine_version("trtllm")) == ("0.5.20", "1.2.0rc2")
    monkeypatch.setenv("CAPPLAN_TRTLLM_RELEASE", "newest")
    with pytest.raises(dg.Failure, match="TensorRT-LLM release 'newest' is not a version"):
        grid_options(GridConfig())


def test_trtllm_multimodal_rows_say_the_encoders_profiling_peak_is_not_sized() -> None:
    """PR #7539 (September 2025, "Add multimodal data to dummy requests during memory profiling"): KvCacheCreator's
    estimation run carries a dummy image where the model's input processor builds one, so the measured peak holds the
    encoder's activations; this profile's overhead is the text-only one, so the estimate says so, loudly."""
    spec = load_model("Qwen/Qwen2.5-VL-7B-Instruct").spec
    h100 = find_gpu_sku("h100-sxm-80gb")
    served = estimate(spec, DeploymentSpec(engine="trtllm", engine_version="1.2", max_model_len=8192), gpu=h100)
    assert any(note.startswith("MULTIMODAL, NOT SIZED: TensorRT-LLM's memory-profiling run") for note in served.notes)
    text = estimate(
        spec, DeploymentSpec(engine="trtllm", engine_version="1.2", max_model_len=8192, mm_text_only=True), gpu=h100
    )
    assert not any(note.startswith("MULTIMODAL, NOT SIZED") for note in text.notes)
    assert any(note.startswith("served text-only") for note in text.notes)
