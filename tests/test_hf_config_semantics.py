"""Semantic validation in `capacity.hf_config`: plausible-looking configs whose numbers disagree with
their own structure are rejected with a reason, instead of publishing wrong capacity figures."""

from __future__ import annotations

from typing import Any

import pytest

from capacity.hf_config import ConfigError, checkpoint_size_band, checkpoint_size_problem, parse_config
from tests.test_registry_hostile import DEEPSEEK, GOOD, _bundled_config

LLAMA = _bundled_config(GOOD)
V3 = _bundled_config(DEEPSEEK)
MIXTRAL = _bundled_config("mistralai/Mixtral-8x7B-Instruct-v0.1")
NO_LENGTH = {k: v for k, v in LLAMA.items() if k != "max_position_embeddings"}


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (V3 | {"n_routed_experts": 0}, "`n_routed_experts` is 0"),
        (V3 | {"num_experts_per_tok": 300}, "`num_experts_per_tok` (300) exceeds `n_routed_experts` (256)"),
        (MIXTRAL | {"num_experts_per_tok": 9}, "num_experts_per_tok"),
        (MIXTRAL | {"num_local_experts": 0}, "num_local_experts"),
        (LLAMA | {"num_experts": 0, "num_experts_per_tok": 2}, "is 0 but `num_experts_per_tok` is 2"),
        (NO_LENGTH | {"seq_length": 1e30}, "`seq_length` = 1e+30 is implausibly large"),
        (NO_LENGTH | {"seq_length": 2**60}, "`seq_length`"),
        (LLAMA | {"model_max_length": -1}, "`model_max_length` must be positive"),
        (LLAMA | {"n_positions": True}, "`n_positions` must be an integer"),
        (LLAMA | {"max_position_embeddings": 4096.5}, "`max_position_embeddings` must be an integer"),
        (LLAMA | {"rope_scaling": {"rope_type": "linear", "factor": float("nan")}}, "`factor`"),
        (LLAMA | {"rope_scaling": {"rope_type": "linear", "factor": 1e300}}, "`factor`"),
        (LLAMA | {"num_hidden_layers": 10**30}, "implausibly large"),
    ],
)
def test_inconsistent_configs_are_rejected(config: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(config, name="acme/broken")
    message = str(raised.value)
    assert words in message and "\n" not in message and message.startswith("acme/broken: "), message


def test_the_real_configs_still_parse() -> None:
    assert parse_config(V3).num_experts == 256
    assert parse_config(LLAMA | {"seq_length": 8192}).context_limit_tokens == 8192  # the smaller length binds


def test_checkpoint_size_band_names_both_numbers() -> None:
    spec = parse_config(LLAMA)
    assert checkpoint_size_problem(spec, 16_060_522_496) is None  # the published bf16 checkpoint
    problem = checkpoint_size_problem(spec, 1)
    assert problem is not None and "total_size 1 bytes" in problem and f"{spec.total_params:,} parameters" in problem
    low, high = checkpoint_size_band(spec)
    assert low < 2 * spec.total_params < high
    assert checkpoint_size_problem(spec, 100 * spec.total_params) is not None


@pytest.mark.parametrize(
    "overrides",
    [
        {"first_k_dense_replace": 61},
        {"first_k_dense_replace": 1000},
        {"moe_layer_freq": 1000, "first_k_dense_replace": 3},
    ],
)
def test_experts_no_layer_holds_are_sized_dense_not_refused(overrides: dict[str, int]) -> None:
    """vLLM's DeepseekV2DecoderLayer takes the MoE block only where `layer_idx >= first_k_dense_replace and
    layer_idx % moe_layer_freq == 0`, and `extract_moe_parameters(None)` sets num_moe_layers 0 (deepseek_v2.py,
    0.33.0): such a config loads as a dense model. Hand count: every layer's MLP is the dense gated MLP
    (3 x hidden x intermediate_size), no routed experts, no router."""
    spec = parse_config(V3 | overrides, name="acme/dense-first")
    assert spec.num_experts == 0 and spec.num_experts_per_token == 0
    assert all(p.experts == 0 and p.router == 0 for p in spec.layer_params)
    assert all(p.mlp == 3 * V3["hidden_size"] * V3["intermediate_size"] for p in spec.layer_params)
    assert any("none of its 61 layers holds them" in note and "sized dense" in note for note in spec.notes)
