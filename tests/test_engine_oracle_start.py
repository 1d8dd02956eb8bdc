"""vLLM 0.33.0's own start checks as the oracle for capplan's refusals (`EngineProfile.start_refusal`).

vLLM runs in the engine-oracle venv as a subprocess (`tools/engine_oracle/start_checks_oracle.py`, as
tests/test_engine_oracle.py does): for every bundled catalog model, vLLM's `_get_and_verify_max_len` (its
own derived length: the config's length keys, rope scaling, `model_max_length`) must accept a
max_model_len of capplan's `context_limit_tokens` and refuse one token more, with the sentence capplan
reports; `Fp8Config.get_min_capability()` must be the minimum capplan uses for 0.33.

Without the oracle venv the test is skipped with the reason; under CI (CI=true) it fails.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from capacity import engine_constants as ec
from capacity.estimate import estimate
from capacity.hf_config import parse_config
from capacity.hf_config.overrides import OverrideRule
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec
from models_registry.sources.bundled import read_catalog_entries
from tests.conftest import ROOT, require_oracle_venv, run_in_oracle_venv

pytestmark = pytest.mark.engine_oracle

RUNNER = ROOT / "tools" / "engine_oracle" / "start_checks_oracle.py"
MARKER = "@@start-oracle@@ "
ENGINE_SENTENCE = re.compile(
    r"^(?P<head>User-specified max_model_len \(\d+\) is greater than the derived max_model_len) "
    r"\(\w+=(?P<derived>[\d.]+) or model_max_length="
)
H100 = GpuSku(id="test-h100", name="H100", vendor="nvidia", memory_total_bytes=80 * 2**30, architecture="hopper")


def _catalog() -> list[tuple[str, dict[str, Any], ModelSpec]]:
    entries, _errors = read_catalog_entries(ROOT / "models_registry" / "catalog")
    out = []
    for entry in entries:
        config = json.loads(entry.config_path.read_text())
        try:
            out.append((entry.repo_id, config, parse_config(config, name=entry.repo_id)))
        except ValueError:
            continue  # refused by the parser with a reason (the registry reports those)
    return out


# `--hf-overrides` as fleets pass them, each with the limit vLLM 0.33 derives, by hand from config/model.py: a
# YaRN entry leaves the length keys as they are (0.30+), so the model cards' YaRN recipes (Qwen3: factor 4 over
# 32,768; Qwen3.5-style nested configs under text_config) move the limit only with a length key beside them
OVERRIDE_CASES: dict[str, tuple[str, dict[str, Any], int]] = {
    "qwen3-8b-yarn-4": (
        "Qwen/Qwen3-8B",
        {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
        40960,
    ),
    "qwen3-8b-yarn-4-and-length": (
        "Qwen/Qwen3-8B",
        {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
         "max_position_embeddings": 131072},
        131072,
    ),
    "qwen3.8-27b-text-config-yarn-4": (
        "Qwen/Qwen3.8-27B",
        {"text_config": {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 262144}}},
        262144,
    ),
    "qwen3.8-27b-text-config-length": (
        "Qwen/Qwen3.8-27B", {"text_config": {"max_position_embeddings": 1048576}}, 1048576,
    ),
    "llama31-8b-shorter": ("meta-llama/Llama-3.1-8B-Instruct", {"max_position_embeddings": 32768}, 32768),
    "qwen3-vl-text-config-length": (
        "Qwen/Qwen3-VL-30B-A3B-Instruct", {"text_config": {"max_position_embeddings": 131072}}, 131072,
    ),
}  # fmt: skip


def _overridden(config: dict[str, Any], overrides: dict[str, Any]) -> ModelSpec:
    return parse_config(OverrideRule.VLLM.applied(config, overrides), name="overridden")


@pytest.fixture(scope="module")
def oracle() -> tuple[dict[str, Any], list[tuple[str, dict[str, Any], ModelSpec]]]:
    require_oracle_venv()
    catalog = _catalog()
    cases = [
        {"name": name, "config": config, "lengths": [spec.context_limit_tokens, spec.context_limit_tokens + 1]}
        for name, config, spec in catalog
    ]
    configs = {name: config for name, config, _spec in catalog}
    for case, (model, overrides, _limit) in OVERRIDE_CASES.items():
        limit = _overridden(configs[model], overrides).context_limit_tokens
        cases.append({"name": case, "config": configs[model], "lengths": [limit, limit + 1], "hf_overrides": overrides})
    done = run_in_oracle_venv(RUNNER, cases, timeout_s=600)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(MARKER)), None)
    assert line is not None, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(line[len(MARKER) :])
    return result, catalog


def test_vllm_fp8_minimum_capability(oracle: tuple[dict[str, Any], list[Any]]) -> None:
    result, _catalog_models = oracle
    assert result["vllm_fp8_min_capability"] == ec.vllm_fp8_min_capability("0.33.0")


def test_vllm_refuses_exactly_one_token_past_capplans_limit(oracle: tuple[dict[str, Any], list[Any]]) -> None:
    result, catalog = oracle
    checked = 0
    for name, _config, spec in catalog:
        if name in OVERRIDE_CASES:
            continue
        got = result["models"][name]
        if "error" in got:  # the venv's transformers cannot build the config (reported, not compared)
            continue
        limit = spec.context_limit_tokens
        assert got["vllm"][str(limit)] is None, (name, limit, got)
        refusal = got["vllm"][str(limit + 1)]
        assert refusal is not None, (name, limit)
        # capplan's refusal at that length: the engine's sentence, up to the config key vLLM names
        ours = estimate(spec, DeploymentSpec(max_model_len=limit + 1), gpu=H100, model_name=name)
        assert not ours.starts and not ours.fits, name
        engine = ENGINE_SENTENCE.match(refusal)
        assert engine is not None, refusal
        assert float(engine.group("derived")) == limit, (name, refusal)  # vLLM's derived length is capplan's limit
        assert f"vllm refuses it: {engine.group('head')} ({limit})" in ours.reason, (ours.reason, refusal)
        assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in refusal and "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in ours.reason
        at_limit = estimate(spec, DeploymentSpec(max_model_len=limit), gpu=H100, model_name=name)
        assert "refuses" not in at_limit.reason, name
        checked += 1
    assert checked >= 60, checked


def test_hf_overrides_move_the_limit_as_vllm_does(oracle: tuple[dict[str, Any], list[Any]]) -> None:
    """vLLM's own `--hf-overrides` steps, then its length check: the overridden config's limit is capplan's
    (`OverrideRule.VLLM` then the parser), accepted there and refused one token past it."""
    result, catalog = oracle
    configs = {name: config for name, config, _spec in catalog}
    for case, (model, overrides, by_hand) in OVERRIDE_CASES.items():
        got = result["models"][case]
        assert "error" not in got, (case, got)
        limit = _overridden(configs[model], overrides).context_limit_tokens
        assert limit == by_hand, case
        assert got["vllm"][str(limit)] is None, (case, limit, got)
        refusal = got["vllm"][str(limit + 1)]
        engine = ENGINE_SENTENCE.match(refusal or "")
        assert engine is not None and float(engine.group("derived")) == limit, (case, refusal)
