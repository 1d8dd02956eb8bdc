"""Property tests of the config path (bytes -> JSON -> lint -> `capacity.hf_config.parse_config`
-> checks -> registry ingest): whatever the input, a config is accepted or rejected with a
one-line reason; nothing else is ever raised, and an ingest keeps rows in = stored + rejected.

Bounded for the default run (a few hundred examples in all, no deadline).
"""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capacity.hf_config import ConfigError, parse_config
from models_registry import db
from models_registry.ingest import run_ingest
from models_registry.normalize import spec_from_snapshot
from models_registry.sources.common import ConfigSnapshot, StageError
from tests.test_registry_hostile import GOOD, _bundled_config

LLAMA = _bundled_config(GOOD)
DEEPSEEK = _bundled_config("deepseek-ai/DeepSeek-V3")
MIXTRAL = _bundled_config("mistralai/Mixtral-8x7B-Instruct-v0.1")
BASES = (LLAMA, DEEPSEEK, MIXTRAL)
INT_FIELDS = sorted({k for base in BASES for k, v in base.items() if isinstance(v, int) and not isinstance(v, bool)})
LENGTH_KEYS = ("max_position_embeddings", "seq_length", "n_positions", "max_seq_len", "model_max_length")
# fields whose value shapes the plan: when a config with a mutated one is accepted, it held a count
STRUCTURE = {
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
    "intermediate_size", "moe_intermediate_size", "n_routed_experts", "num_local_experts", "num_experts_per_tok",
    "kv_lora_rank", "qk_rope_head_dim", "head_dim", *LENGTH_KEYS,
}

numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-2, max_value=70_000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 10**30, 1e30, 0.5, True, False, None]),
)
scalars = st.one_of(numbers, st.text(max_size=20), st.none(), st.booleans())
json_trees = st.recursive(
    scalars, lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)


def _outcome(snapshot: ConfigSnapshot) -> str:
    """'accepted' or 'rejected'; anything else raised fails the property."""
    try:
        spec_from_snapshot(snapshot)
    except StageError as exc:
        reason = str(exc)
        assert reason and "\n" not in reason and len(reason) <= 300, reason
        assert snapshot.repo_id in reason, reason
        return "rejected"
    return "accepted"


def _snapshot(raw: bytes, checkpoint: int | None = None) -> ConfigSnapshot:
    return ConfigSnapshot(repo_id="prop/model", config_bytes=raw, source="local", checkpoint_bytes=checkpoint)


def _dumps(config: Any) -> bytes:
    return json.dumps(config, allow_nan=True).encode("utf-8", "surrogatepass")


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes(raw: bytes) -> None:
    _outcome(_snapshot(raw))


@settings(max_examples=150, deadline=None)
@given(json_trees)
def test_random_json_trees(tree: Any) -> None:
    _outcome(_snapshot(_dumps(tree)))
    if isinstance(tree, dict):  # the same tree as a config's text_config and as extra top-level keys
        _outcome(_snapshot(_dumps({"model_type": "llava", "text_config": tree})))
        _outcome(_snapshot(_dumps(LLAMA | tree)))


KNOWN_KEYS = sorted({k for base in BASES for k in base} | {"text_config", "quantization_config", "layer_types"})


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(BASES), st.dictionaries(st.sampled_from(KNOWN_KEYS), json_trees, min_size=1, max_size=3))
def test_random_values_for_known_keys(base: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Any JSON value under a key the parser reads (rope_scaling, quantization_config, layer_types...)."""
    _outcome(_snapshot(_dumps(base | overrides)))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(BASES), st.sampled_from(INT_FIELDS + list(LENGTH_KEYS)), numbers, st.booleans())
def test_random_numbers_in_integer_fields(base: dict[str, Any], key: str, value: Any, nested: bool) -> None:
    config = base | {key: value}
    if nested:
        config = {"model_type": "mistral3", "text_config": config}
    outcome = _outcome(_snapshot(_dumps(config)))
    if outcome == "accepted" and key in STRUCTURE and key in base and value is not None:  # None: absent
        assert isinstance(value, int) and not isinstance(value, bool) and value >= 0, (key, value)
    with contextlib.suppress(ConfigError):  # the parser alone, on values JSON cannot carry (inf, nan): ConfigError only
        parse_config(config, name="prop/model")


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(BASES), st.one_of(st.integers(min_value=-(2**64), max_value=2**64), st.just(1)))
def test_random_checkpoint_sizes(base: dict[str, Any], checkpoint: int) -> None:
    outcome = _outcome(_snapshot(_dumps(base), checkpoint))
    if checkpoint <= 1 or checkpoint > 10**13:
        assert outcome == "rejected", checkpoint


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(json_trees, st.sampled_from(BASES)), min_size=1, max_size=5))
def test_ingest_counts_reconcile(sqlite_url: str, configs: list[Any]) -> None:
    """Whatever the mix, the ingest finishes; models seen = stored (added/unchanged) + rejected."""
    snapshots = [
        ConfigSnapshot(repo_id=f"prop/model-{i}", config_bytes=_dumps(c), source="local") for i, c in enumerate(configs)
    ]
    with db.session_scope(sqlite_url) as session:
        report = run_ingest(session, source_kind="dir", source="hypothesis", models=snapshots)
    counts = report.models
    assert counts.seen == len(snapshots) == counts.added + counts.updated + counts.unchanged + counts.failed
    assert len(report.errors) == counts.failed
    assert report.status in ("succeeded", "partial")


def test_the_bases_are_accepted() -> None:
    """The properties start from configs the parser accepts, so mutations test real rejections."""
    for base in BASES:
        assert _outcome(_snapshot(_dumps(base))) == "accepted"
    assert not math.isnan(0.0)


pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")


yaml_trees = st.recursive(
    st.one_of(scalars, st.dates()),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=25,
)
GPU_KEYS = ("id", "name", "vendor", "memory_total_mib_smi", "memory_marketing_gb", "aliases", "price_date", "gpus_per_node")
MODEL_KEYS = ("repo_id", "config", "safetensors_index", "published_parameters", "gated", "revision", "family")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            yaml_trees,
            st.fixed_dictionaries({}, optional={k: yaml_trees for k in GPU_KEYS + MODEL_KEYS}),
        ),
        max_size=4,
    )
)
def test_random_catalog_entries(tmp_path_factory: pytest.TempPathFactory, entries: list[Any]) -> None:
    """models.yaml and gpus.yaml with random entries: each entry is read or rejected, never raised."""
    import yaml

    from models_registry.sources.bundled import read_catalog
    from models_registry.sources.gpu_catalog import read_gpu_catalog

    root = tmp_path_factory.mktemp("catalog")
    for name, key in (("models.yaml", "models"), ("gpus.yaml", "gpus")):
        (root / name).write_text(yaml.safe_dump({"schema_version": 1, key: entries}), encoding="utf-8")
    snapshots, errors = read_catalog(root)
    assert len(snapshots) + len(errors) == len(entries)  # rows in = read + rejected
    assert all(e.reason and "\n" not in e.reason for e in errors)
    records, gpu_errors = read_gpu_catalog(root / "gpus.yaml")
    assert len(records) + len(gpu_errors) == len(entries)
    assert all(e.reason and "\n" not in e.reason for e in gpu_errors)
