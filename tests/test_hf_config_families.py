"""The shape of `capacity.hf_config`: a family is chosen once from `model_type`, and nothing else
compares family names; modules and functions stay small enough to read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from capacity.hf_config import parse_config
from capacity.hf_config.registry import FAMILIES, select

PACKAGE = Path(__file__).resolve().parents[1] / "capacity" / "hf_config"
MODULES = sorted(PACKAGE.glob("*.py"))


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_each_model_type_chooses_its_family(model_type: str) -> None:
    chosen = select(model_type, None, has_kv_lora_rank=False)
    assert chosen.family is FAMILIES[model_type]
    assert chosen.model_type == model_type


def test_a_wrapper_parses_its_text_model_by_the_inner_rules() -> None:
    chosen = select("mistral3", "qwen3", has_kv_lora_rank=False)
    assert chosen.family is FAMILIES["mistral3"]
    assert chosen.rules is FAMILIES["qwen3"]
    assert select("mistral3", None, has_kv_lora_rank=False).rules is FAMILIES["mistral"]


def test_an_unknown_type_with_kv_lora_rank_is_parsed_as_mla() -> None:
    config = {
        "model_type": "somebody_mla",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "intermediate_size": 512,
        "kv_lora_rank": 64,
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32,
        "v_head_dim": 32,
    }
    spec = parse_config(config)
    assert spec.is_generic and spec.family == "generic"
    assert {layer.kind for layer in spec.layers} == {"mla"}


def _compared_strings(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                for sub in ast.walk(operand):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        out.add(sub.value)
    return out


def test_family_names_are_compared_only_where_the_family_is_chosen() -> None:
    names = set(FAMILIES) | {family.name for family in FAMILIES.values()}
    for module in MODULES:
        if module.name == "registry.py":
            continue
        compared = _compared_strings(ast.parse(module.read_text())) & names
        assert not compared, f"{module.name} compares family names {sorted(compared)}"


def test_modules_and_functions_stay_small() -> None:
    for module in MODULES:
        text = module.read_text()
        assert len(text.splitlines()) <= 600, module.name
        assert "fmt: skip" not in text, module.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                assert length <= 100, f"{module.name}:{node.name} has {length} lines"
