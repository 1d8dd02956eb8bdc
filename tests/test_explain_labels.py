"""The derivation `capplan estimate` prints says what the engine holds: MLA latents (replicated, no
heads, pooled as `mla`), and for hybrid models how each kind of group charges a request."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from models_registry import db
from pipelines.cli import app


@pytest.fixture
def derivation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    monkeypatch.setenv(db.URL_ENV, f"sqlite:///{tmp_path / 'absent.db'}")  # the bundled catalog only
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(app, ["estimate", *args])
        assert result.exit_code == 0, result.output
        return result.stdout

    return run


def test_mla_is_a_replicated_latent_not_one_kv_head(derivation: Callable[..., str]) -> None:
    text = derivation("deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", "8", "--kv-dtype", "fp8")
    assert "MLA latent (no heads) replicated on every rank" in text
    assert "KV head(s) per rank" not in text
    assert "groups [mlax61]" in text and "fullx61" not in text
    assert "windowed layers keep blocks" not in text, "DeepSeek-V3 has no windowed layers"


def _breakdown(text: str, heading: str) -> tuple[int, list[int]]:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(heading))
    total = int(re.search(r"takes ([\d,]+) blocks", lines[at]).group(1).replace(",", ""))  # type: ignore[union-attr]
    terms = []
    for line in lines[at + 1 :]:
        if not line.startswith("     "):
            break
        terms.append(int(line.rsplit("= ", 1)[1].replace(",", "")))
    return total, terms


def test_hybrid_models_show_each_groups_charge(derivation: Callable[..., str]) -> None:
    gemma = derivation("google/gemma-2-9b-it", "--gpu", "H100", "--context", "8192")
    total, terms = _breakdown(gemma, "one sequence takes")
    assert total == sum(terms) == 1025 and terms == [512, 512, 1]
    assert "1 windowed group(s): 1 x cdiv(min(4,095 + 16,384 in flight, 8,192), 16)" in gemma
    assert "+1 per sliding group" in gemma
    start_total, start_terms = _breakdown(gemma, "one request of max_model_len takes")
    assert start_total == sum(start_terms)

    jamba = derivation("ai21labs/AI21-Jamba-1.5-Mini", "--gpu", "H100", "--tp", "2", "--context", "8192")
    total, terms = _breakdown(jamba, "one sequence takes")
    assert total == sum(terms) and len(terms) == 2 and "state group(s) x" in jamba

    llama = derivation("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--max-model-len", "8192")
    assert _breakdown(llama, "one sequence takes") == (512, []), "one rule: no breakdown"
    assert "8 KV head(s) per rank" in llama and "MLA" not in llama
