"""Declared engine features capplan does not size (a speculative method not stated, a KV connector other than
LMCache and vLLM's offloading): the estimate flags the deployment (`modelled: false`, the feature named) and sizes
it as if the feature were off, never silently."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from capacity.estimate import estimate
from capacity.features.lora import LoraSpec
from capacity.features.speculative import SpecMethod, SpeculativeSpec
from capacity.spec import DeploymentSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from pipelines.cli import app

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _json(*flags: str) -> dict[str, object]:
    result = CliRunner().invoke(app, ["estimate", MODEL, "--gpu", "H100", "--max-model-len", "8192", "--json", *flags])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_plain_deployment_is_modelled() -> None:
    out = _json()
    assert out["modelled"] is True and out["not_modelled"] is None


def test_each_declared_feature_flags_the_row_and_keeps_the_numbers() -> None:
    plain = _json()
    for flags, word in ((["--speculative"], "speculative"),
                        (["--kv-transfer-config", '{"kv_connector": "NixlConnector"}'], "NixlConnector")):  # fmt: skip
        out = _json(*flags)
        assert out["modelled"] is False and word in str(out["not_modelled"]), flags
        assert out["kv_budget_bytes_per_gpu"] == plain["kv_budget_bytes_per_gpu"], flags


def test_model_level_and_deployment_level_reasons_are_joined() -> None:
    resolved = load_model(MODEL)
    est = estimate(resolved.spec, DeploymentSpec(lora=LoraSpec(), speculative=SpeculativeSpec(SpecMethod.UNKNOWN), engine="sglang"),
                   gpu=find_gpu_sku("H100"), checkpoint_bytes=resolved.checkpoint_bytes)  # fmt: skip
    assert est.not_modelled == "speculative decoding of an unstated method (the draft's weights and KV)"  # LoRA is sized
    assert not any(note.startswith("assumed no LoRA") for note in est.notes)
    assert not any(note.startswith("assumed no speculative") for note in est.notes)


def test_a_vllm_estimate_says_it_assumed_no_kv_connector() -> None:
    """A KV connector may hold GPU buffers of its own: the estimate says it assumed none, and one declared is
    sized (LMCache, vLLM's OffloadingConnector: tests/test_feature_offload.py) or flagged (NIXL)."""
    assert any(note.startswith("assumed no KV connector") for note in _json()["notes"])
    declared = _json("--kv-transfer-config", '{"kv_connector": "NixlConnector"}')
    assert not any(note.startswith("assumed no KV connector") for note in declared["notes"])


def test_a_vllm_estimate_on_rocm_says_its_rules_are_cudas() -> None:
    """The public MI300X logs (recipes#273, xbill9/gemma4-dev) sit 3-5 % below capplan's pools and print graph
    estimates several times CUDA's: a ROCm estimate says so; a CUDA one does not."""
    rocm = CliRunner().invoke(app, ["estimate", MODEL, "--gpu", "mi300x-192gb", "--max-model-len", "8192", "--json"])
    assert rocm.exit_code == 0, rocm.output
    assert any(note.startswith("ROCm:") for note in json.loads(rocm.output)["notes"])
    assert not any(note.startswith("ROCm:") for note in _json()["notes"])
