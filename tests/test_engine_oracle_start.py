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
from pathlib import Path
from typing import Any

import pytest

from capacity import engine_constants as ec
from capacity.estimate import estimate
from capacity.hf_config import parse_config
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec
from models_registry.sources.bundled import read_catalog_entries
from tests.conftest import require_oracle_venv, run_in_oracle_venv

pytestmark = pytest.mark.engine_oracle

ROOT = Path(__file__).resolve().parent.parent
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


@pytest.fixture(scope="module")
def oracle() -> tuple[dict[str, Any], list[tuple[str, dict[str, Any], ModelSpec]]]:
    require_oracle_venv()
    catalog = _catalog()
    cases = [
        {"name": name, "config": config, "lengths": [spec.context_limit_tokens, spec.context_limit_tokens + 1]}
        for name, config, spec in catalog
    ]
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
