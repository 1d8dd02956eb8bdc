"""Issue 25 (second round), properties of the config path: arbitrary JSON-ish trees (recursive
Hypothesis strategies, nesting up to 1,200 levels) and random numbers of every type in the numeric
fields, fed to `parse_config` and to `capplan registry ingest --dir` (real SQLite registry, real
files): nothing is ever raised but the project's one-line ConfigError / StageError, the CLI never
prints a traceback, and an accepted config never carries a value the reader should have refused.

Bounded for the default run (about 250 examples in all, no deadline: 2 shared cores)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from capacity.hf_config import ConfigError, parse_config
from pipelines.cli import app
from tests.test_registry_hostile import GOOD, _bundled_config

LLAMA = _bundled_config(GOOD)
FP8 = LLAMA | {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}

anything_numeric = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-2, max_value=5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=1, max_value=5000).map(float),  # integral floats: 16.0
    st.booleans(),
    st.none(),
    st.text(max_size=6),
)
scalars = st.one_of(anything_numeric, st.text(max_size=12))
trees = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=40,
)


Deep = tuple[Any, int, bool]  # a tree, how many levels it is wrapped in, in objects or lists
deep = st.tuples(
    trees, st.one_of(st.integers(min_value=0, max_value=40), st.integers(min_value=0, max_value=1200)), st.booleans()
)


def _nest(item: Deep) -> Any:
    """The wrapped tree as Python objects (built without recursion)."""
    tree, depth, as_dict = item
    for _ in range(depth):
        tree = {"a": tree} if as_dict else [tree]
    return tree


def _text(item: Deep) -> str:
    """The wrapped tree as JSON text (json.dumps recurses: it would fail past ~990 levels)."""
    tree, depth, as_dict = item
    head, tail = ('{"a": ', "}") if as_dict else ("[", "]")
    return head * depth + json.dumps(tree, allow_nan=True) + tail * depth


READ_KEYS = ("rope_scaling", "quantization_config", "layer_types", "text_config", "sliding_window",
             "num_hidden_layers", "hidden_size", "architectures", "torch_dtype", "head_dim")  # fmt: skip


def _parse(config: Any) -> str:
    """'accepted' or 'rejected'; anything but a one-line ConfigError fails the property."""
    try:
        parse_config(config, name="prop/model")
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc), exc
        return "rejected"
    return "accepted"


@settings(max_examples=120, deadline=None)
@given(deep, st.sampled_from(READ_KEYS))
@example((1, 1200, True), "rope_scaling")
@example(([{"a": 1}], 900, False), "num_hidden_layers")
def test_arbitrary_trees_reach_the_parser_as_config_errors_only(item: Deep, key: str) -> None:
    tree = _nest(item)
    _parse(tree if isinstance(tree, dict) else {"x": tree})
    _parse(LLAMA | {key: tree})
    _parse({"model_type": "llava", "text_config": LLAMA | {key: tree}})


NUMERIC = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
           "intermediate_size", "vocab_size", "max_position_embeddings", "sliding_window")  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(NUMERIC), anything_numeric)
def test_random_numbers_in_numeric_fields(key: str, value: Any) -> None:
    config = LLAMA | {"model_type": "mistral", key: value}
    if _parse(config) == "accepted" and value is not None and key != "sliding_window":
        assert isinstance(value, int) and not isinstance(value, bool) and value > 0, (key, value)


@settings(max_examples=80, deadline=None)
@given(st.one_of(anything_numeric, st.lists(anything_numeric, max_size=4), trees))
def test_random_weight_block_sizes(block: Any) -> None:
    config = FP8 | {"quantization_config": {"quant_method": "fp8", "weight_block_size": block}}
    if _parse(config) == "accepted" and block is not None:
        assert isinstance(block, list) and len(block) == 2, block
        assert all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block), block
    assert not math.isnan(0.0)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(deep, st.sampled_from(READ_KEYS)), min_size=1, max_size=3))
@example([((1, 1200, True), "rope_scaling"), (([1], 900, False), "x")])
def test_registry_ingest_dir_never_shows_a_traceback(
    sqlite_url: str, tmp_path_factory: pytest.TempPathFactory, items: list[tuple[Deep, str]]
) -> None:
    root = tmp_path_factory.mktemp("props")
    for i, (item, key) in enumerate(items):
        folder = root / f"m{i}"
        folder.mkdir()
        text = json.dumps(LLAMA)[:-1] + f", {json.dumps(key)}: {_text(item)}}}" if i % 2 == 0 else _text(item)
        (folder / "config.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    (root / "good").mkdir()
    (root / "good" / "config.json").write_text(json.dumps(LLAMA), encoding="utf-8")
    result = CliRunner().invoke(app, ["registry", "ingest", "--dir", str(root)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and result.exception is None, result.output
    counts = next(line.split() for line in result.output.splitlines() if line.startswith("models "))
    seen, added, updated, unchanged, failed = (int(n) for n in counts[1:])
    assert seen == len(items) + 1 == added + updated + unchanged + failed
