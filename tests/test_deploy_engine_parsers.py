"""The engines' own parsers read the command lines recommendations/deploy writes: vLLM 0.33.0's `vllm
serve` parser and SGLang 0.5.23's server parser (in .venv-oracle, via tools/engine_oracle/parse_commands.py)
accept every line and parse each planned setting to the value the plan holds, in the engine's units."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capacity.engines.kinds import Engine
from recommendations.deploy import ServingPlan, engine_command
from tests.conftest import require_oracle_venv, run_in_oracle_venv

TOOL = Path(__file__).resolve().parents[1] / "tools" / "engine_oracle" / "parse_commands.py"
GIB = 1 << 30

pytestmark = pytest.mark.engine_oracle


def _plan(engine: Engine, **overrides: Any) -> ServingPlan:
    fields: dict[str, Any] = {
        "model": "llama-3.1-70b",
        "hf_repo": "meta-llama/Llama-3.1-70B-Instruct",
        "engine": engine,
        "gpu": "h100",
        "tp": 4,
        "pp": 2,
        "max_model_len": 32768,
        "max_num_seqs": 48,
        "weight_dtype": "fp8",
        "kv_cache_dtype": "fp8",
        "gpu_memory_utilization": 0.88,
    }
    return ServingPlan(**(fields | overrides))


# (plan, the parser's destinations and the values they must hold); the names are each engine's own
CASES: list[tuple[ServingPlan, dict[str, Any]]] = [
    (
        _plan(Engine.VLLM),
        {
            "model_tag": "meta-llama/Llama-3.1-70B-Instruct",
            "tensor_parallel_size": 4,
            "pipeline_parallel_size": 2,
            "quantization": "fp8",
            "kv_cache_dtype": "fp8",
            "max_model_len": 32768,
            "max_num_seqs": 48,
            "gpu_memory_utilization": 0.88,
            "port": 8000,
        },
    ),
    (
        _plan(
            Engine.VLLM,
            weight_dtype="bf16",
            kv_cache_dtype="fp8_e5m2",
            gpu_memory_utilization=None,
            kv_cache_memory_bytes=30 * GIB,
        ),
        {"dtype": "bfloat16", "kv_cache_dtype": "fp8_e5m2", "kv_cache_memory_bytes": 30 * GIB},
    ),
    (
        _plan(Engine.SGLANG),
        {
            "model_path": "meta-llama/Llama-3.1-70B-Instruct",
            "tp_size": 4,
            "pp_size": 2,
            "quantization": "fp8",
            "kv_cache_dtype": "fp8_e4m3",
            "context_length": 32768,
            "max_running_requests": 48,
            "mem_fraction_static": 0.88,
            "port": 8000,
        },
    ),
    (
        _plan(Engine.SGLANG, weight_dtype="fp16", kv_cache_dtype="bf16"),
        {"dtype": "float16", "kv_cache_dtype": "bfloat16"},
    ),
]


def _parse(commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the engines' parsers make of `commands` ({"engine", "args"} each)."""
    require_oracle_venv()
    done = run_in_oracle_venv(TOOL, commands, timeout_s=600)
    assert done.returncode == 0, done.stderr[-2000:]
    answers: list[dict[str, Any]] = json.loads(done.stdout)
    return answers


@pytest.fixture(scope="module")
def parsed() -> list[dict[str, Any]]:
    return _parse([{"engine": plan.engine.value, "args": list(engine_command(plan).args)} for plan, _ in CASES])


@pytest.mark.parametrize(
    "case", range(len(CASES)), ids=[f"{p.engine}-{p.weight_dtype}-{p.kv_cache_dtype}" for p, _ in CASES]
)
def test_the_engine_parses_the_planned_settings(parsed: list[dict[str, Any]], case: int) -> None:
    answer = parsed[case]
    assert answer["ok"], answer.get("error")
    _plan_case, expected = CASES[case]
    assert {dest: answer["values"][dest] for dest in expected} == expected


def test_the_parser_refuses_what_it_should() -> None:
    """The oracle can fail: SGLang's parser refuses `--kv-cache-dtype fp8` (its spelling is fp8_e4m3)."""
    (answer,) = _parse([{"engine": "sglang", "args": ["--model-path", "m", "--kv-cache-dtype", "fp8"]}])
    assert answer["ok"] is False
