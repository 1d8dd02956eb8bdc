"""The derivation's KV budget line does the arithmetic it prints, for each engine's way of forming the budget
(vLLM and SGLang: usable memory less weights and overhead; TensorRT-LLM: its free_gpu_memory_fraction of what
is free after them, `KvCacheCreator`), and a given budget says so instead of printing a sum that is not it."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from pipelines.cli import app

NUMBER = r"([\d,]+\.\d+) GiB"


def _section_2(*args: str) -> list[str]:
    result = CliRunner().invoke(app, ["estimate", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", *args])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index("2. Memory budget per GPU")
    return lines[start : lines.index("3. KV pool")]


def _gib(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(NUMBER, text)]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_usable_less_the_rest(engine: str) -> None:
    (line,) = [x for x in _section_2("--engine", engine) if "KV budget =" in x]
    usable, weights, overhead, budget = _gib(line)
    assert usable - weights - overhead == pytest.approx(budget, abs=0.015)


def test_tensorrt_llm_takes_its_fraction_of_what_is_free() -> None:
    lines = _section_2("--engine", "trtllm")
    (line,) = [x for x in lines if "KV budget =" in x]
    fraction = float(re.search(r"\) x ([\d.]+) =", line).group(1))  # type: ignore[union-attr]
    total, weights, overhead, budget = _gib(line)
    assert (total - weights - overhead) * fraction == pytest.approx(budget, abs=0.015)
    assert not any(x.strip().startswith("usable") for x in lines)  # no total x fraction that the sum would not use


def test_a_given_budget_is_said_to_be_given() -> None:
    (line,) = [x for x in _section_2("--kv-cache-memory-gib", "20") if "KV budget =" in x]
    assert "given" in line and _gib(line) == [20.0]


def test_pipeline_stages_sized_apart_show_each_budget_and_the_one_that_binds() -> None:
    """vLLM at PP 2: the most loaded stage's arithmetic, each stage's own budget, and the budget of the stage whose
    blocks every rank keeps, which the pool's num_blocks line then divides."""
    result = CliRunner().invoke(
        app,
        ["estimate", "deepseek-ai/DeepSeek-V2-Lite-Chat", "--gpu", "l4-24gb", "--tp", "2", "--pp", "2",
         "--engine", "vllm", "--engine-version", "0.9.2", "--max-model-len", "1024"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    (most,) = [x for x in lines if "with the most loaded stage's weights and overhead" in x]
    usable, weights, overhead, most_loaded = _gib(most)
    assert usable - weights - overhead == pytest.approx(most_loaded, abs=0.015)
    (by_stage,) = [x for x in lines if "by pipeline stage" in x]
    first, last = _gib(by_stage)
    assert first > last >= most_loaded - 0.015  # the sampler's peak only on the last stage
    (budget,) = [x for x in lines if "KV budget = stage" in x]
    stage = int(re.search(r"stage (\d+)'s", budget).group(1))  # type: ignore[union-attr]
    assert _gib(budget) == [(first, last)[stage]]
    exact = int(re.search(r"\(([\d,]+) B\)", budget).group(1).replace(",", ""))  # type: ignore[union-attr]
    (blocks,) = [x for x in lines if "num_blocks = floor(" in x]
    assert f"{exact:,} B" in blocks
