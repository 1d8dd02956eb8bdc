"""Multimodal checkpoints: vision towers counted, vLLM 0.33's encoder budget and profiling pass, text-only.

Oracles: transformers' own Qwen2.5-VL / Qwen3-VL models built on the meta device (parameter counts), and
vLLM 0.33's `compute_mm_encoder_budget` / `MultiModalBudget._get_max_items` run in the engine-oracle venv
(tools/engine_oracle/vllm_multimodal.py). The largest image's token count is derived by hand from
`Qwen2VLProcessingInfo.get_image_size_with_most_features` (vLLM 0.33 qwen2_vl.py: max_pixels // unit^2
when that count factors with an aspect ratio <= 200), since that module needs torchvision to import.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from capacity.engines.vllm.multimodal import (
    encoder_budget_tokens,
    encoder_profile,
    item_tokens,
    most_features_tokens,
    parse_mm_limits,
    profiled_items,
    qwen3_video_resize,
)
from capacity.estimate import estimate
from capacity.hf_config import parse_config
from capacity.spec import DeploymentSpec
from tests.conftest import require_oracle_venv, run_in_oracle_venv

RUNNER = Path(__file__).resolve().parents[1] / "tools" / "engine_oracle" / "vllm_multimodal.py"
GIB = 1 << 30

TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 256,
}
QWEN25_VL = {
    "model_type": "qwen2_5_vl",
    **TEXT,
    "vision_config": {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_heads": 2,
        "out_hidden_size": 64,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
    },
}
QWEN3_VL = {
    "model_type": "qwen3_vl",
    "text_config": {"model_type": "qwen3_vl_text", **TEXT, "head_dim": 16},
    "vision_config": {
        "depth": 3,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_heads": 2,
        "out_hidden_size": 64,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [0, 2],
    },
}
BUDGET_CASES = [
    {"batched": b, "item": item, "limit": limit, "max_model_len": mml, "seqs": seqs}
    for b, item, limit, mml, seqs in [
        (2048, 16384, 999, 65536, 256),
        (8192, 256, 999, 4096, 256),
        (16384, 1024, 2, 32768, 4),
        (8192, 576, 1, 8192, 1),
        (2048, 32768, 999, 16384, 128),
        (65536, 3000, 999, 131072, 2),
    ]
]


# frames, height, width of Qwen3-VL's video resize (temporal 2, 32 px units, 4,096 / 25,165,824 px bounds)
RESIZE_FRAMES = [(2, 4096, 4096), (3, 4096, 4096), (40, 4096, 4096), (24_576, 4096, 4096), (2, 64, 96), (7, 2048, 4096)]
RESIZE_CASES = [[n, h, w, 2, 32, 4096, 25_165_824] for n, h, w in RESIZE_FRAMES]


@pytest.fixture(scope="module")
def oracle() -> dict[str, Any]:
    require_oracle_venv()
    request = {"budgets": BUDGET_CASES, "params": [QWEN25_VL, QWEN3_VL], "resizes": RESIZE_CASES}
    done = run_in_oracle_venv(RUNNER, request, timeout_s=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.engine_oracle
@pytest.mark.slow
def test_vl_parameter_counts_match_transformers(oracle: dict[str, Any]) -> None:
    for config, theirs in zip((QWEN25_VL, QWEN3_VL), oracle["params"], strict=True):
        spec = parse_config(config)
        assert spec.vision is not None and spec.vision.params == spec.extra_params > 0
        assert spec.total_params == theirs


@pytest.mark.engine_oracle
@pytest.mark.slow
def test_encoder_budget_and_items_match_vllm(oracle: dict[str, Any]) -> None:
    for case, (budget, items) in zip(BUDGET_CASES, oracle["budgets"], strict=True):
        assert encoder_budget_tokens(case["batched"], case["item"]) == budget
        assert (
            profiled_items(case["item"], case["max_model_len"], case["seqs"], case["batched"], case["limit"]) == items
        )


def test_largest_image_tokens_by_hand() -> None:
    # Qwen2.5-VL: 12,845,056 px // 28^2 = 16,384 = 128 x 128; Qwen3-VL: 16,777,216 // 32^2 = 16,384
    assert most_features_tokens(12_845_056, 28) == 16_384
    assert most_features_tokens(16_777_216, 32) == 16_384
    # a prime count has only (1, p): ratio p > 200, so vLLM steps down to the next count that factors
    assert most_features_tokens(401 * 28 * 28, 28) == 400


def test_qwen25_video_grows_with_max_model_len_qwen3_does_not() -> None:
    q25, q3 = parse_config(QWEN25_VL).vision, parse_config(QWEN3_VL).vision
    assert q25 is not None and q3 is not None
    # qwen2_vl.py: frames grow while ceil(n / 2) groups x 16,384 <= max_model_len, at most 14 frames
    assert item_tokens(q25, 8192)["video"] == 16_384
    assert item_tokens(q25, 65_536)["video"] == 4 * 16_384
    assert item_tokens(q25, 1_000_000)["video"] == 7 * 16_384
    # 0.15+ qwen3_vl.py: 2 frames at 25,165,824 / 2 px -> 12,288 tokens, below the image's 16,384
    assert item_tokens(q3, 1_000_000, "0.33.0") == {"image": 16_384, "video": 12_288}
    assert item_tokens(q3, 1_000_000, "0.20.0") == {"image": 16_384, "video": 12_288}
    # 0.11.0 qwen3_vl.py: 24,576 frames of the 4,096 px square under the 25,165,824 px video budget:
    # beta = sqrt(24,576 x 4,096^2 / 25,165,824) = 128, so each frame is one 32 px unit: 12,288 groups of
    # 1 token, counted x 12.5
    assert item_tokens(q3, 65_536, "0.11.0") == {"image": 16_384, "video": 153_600}
    # 0.13.0: the same grown video, its 12,288 tokens no longer counted x 12.5
    assert item_tokens(q3, 65_536, "0.13.0") == {"image": 16_384, "video": 12_288}


def test_encoder_pass_by_hand() -> None:
    tower = parse_config(QWEN3_VL).vision
    assert tower is not None
    enc = encoder_profile(tower, tp=1, act_bytes=2, max_model_len=32768, max_num_seqs=256, max_num_batched_tokens=2048)
    # one image of 16,384 tokens (budget max(2048, 16384) holds one); 4 patches per token
    patches = 16_384 * 4
    assert (enc.modality, enc.items) == ("image", 1)
    # outputs: main + 2 deepstack levels of the text hidden (64) per token
    assert enc.outputs_bytes == 16_384 * 64 * 3 * 2
    # input (3 x 2 x 16^2 values) + 4 hidden-sized tensors + the larger of qkv+proj (4h) and fc1 + act (2I)
    assert enc.forward_bytes == patches * (3 * 2 * 256 + 4 * 32 + max(4 * 32, 2 * 48)) * 2


def test_text_only_drops_encoder_pass_and_tower_weights() -> None:
    spec = parse_config({**QWEN25_VL, "max_position_embeddings": 32768})
    deployment = DeploymentSpec(gpu_memory_bytes=8 * GIB, max_model_len=32768)
    served = estimate(spec, deployment)
    text_only = estimate(spec, DeploymentSpec(gpu_memory_bytes=8 * GIB, max_model_len=32768, mm_text_only=True))
    names = " ".join(name for name, _ in served.activation_buffers)
    assert "vision encoder pass" in names and "encoder cache" in names
    assert not any("encoder" in name for name, _ in text_only.activation_buffers)
    assert served.activation_peak_bytes_per_gpu > text_only.activation_peak_bytes_per_gpu
    assert served.weights_bytes_per_gpu - text_only.weights_bytes_per_gpu == spec.extra_params * 2
    assert any("not loaded" in note for note in text_only.notes)


def test_unsized_tower_is_flagged_not_silent() -> None:
    gemma = json.loads(
        (
            Path(__file__).resolve().parents[1] / "models_registry/catalog/configs/google/gemma-3-12b-it/config.json"
        ).read_text()
    )
    spec = parse_config(gemma)
    assert spec.multimodal and spec.vision is None
    est = estimate(spec, DeploymentSpec(gpu_memory_bytes=80 * GIB, max_model_len=8192))
    assert any("MULTIMODAL, NOT SIZED" in note for note in est.notes)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"image": 0, "video": 0}', {"image": 0, "video": 0}),
        ('{"image": {"count": 2, "width": 512}, "video": 0}', {"image": 2, "video": 0}),
        ("image=1,video=0", {"image": 1, "video": 0}),
    ],
)
def test_limit_mm_per_prompt_spellings(text: str, expected: dict[str, int]) -> None:
    assert parse_mm_limits(text) == expected


@pytest.mark.parametrize("text", ['{"image":', "[0]", "image", '{"image": "x"}', '{"image": true}', "image=-1"])
def test_limit_mm_per_prompt_refused(text: str) -> None:
    with pytest.raises(ValueError, match="limit-mm-per-prompt"):
        parse_mm_limits(text)


def test_one_modality_at_zero_profiles_the_other() -> None:
    tower = parse_config(QWEN25_VL).vision
    assert tower is not None
    both = encoder_profile(tower, 1, 2, 65_536, 256, 2048)
    video_only = encoder_profile(tower, 1, 2, 65_536, 256, 2048, {"image": 0})
    image_only = encoder_profile(tower, 1, 2, 65_536, 256, 2048, {"video": 0})
    assert both is not None and video_only is not None and image_only is not None
    assert (both.modality, both.item_tokens) == ("video", 4 * 16_384) == (video_only.modality, video_only.item_tokens)
    assert (image_only.modality, image_only.item_tokens) == ("image", 16_384)
    assert encoder_profile(tower, 1, 2, 65_536, 256, 2048, {"image": 0, "video": 0}) is None


def _cli_json(tmp_path: Path, *args: str) -> dict[str, Any]:
    from typer.testing import CliRunner

    from pipelines.cli import app

    model = tmp_path / "qwen25-vl"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({**QWEN25_VL, "max_position_embeddings": 32768}))
    argv = [a.replace("MODEL", str(model)) for a in args]
    result = CliRunner().invoke(app, ["estimate", "--gpu-memory-gib", "16", "--json", *argv])
    assert result.exit_code == 0, result.output
    contract: dict[str, Any] = json.loads(result.stdout)
    return contract


def test_text_only_from_the_option_and_from_a_pasted_command_agree(tmp_path: Path) -> None:
    served = _cli_json(tmp_path, "MODEL")
    option = _cli_json(tmp_path, "MODEL", "--limit-mm-per-prompt", '{"image":0,"video":0}')
    switch = _cli_json(tmp_path, "MODEL", "--language-model-only")
    pasted = _cli_json(tmp_path, "--from-command", 'vllm serve MODEL --limit-mm-per-prompt \'{"image":0,"video":0}\'')
    assert option == switch == pasted != served
    assert served["weights_bytes_per_gpu"] > option["weights_bytes_per_gpu"]


def test_unreadable_limits_are_one_line_usage_errors(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pipelines.cli import app

    for value in ('{"image":', "image=lots"):
        result = CliRunner().invoke(app, ["estimate", "x", "--gpu-memory-gib", "16", "--limit-mm-per-prompt", value])
        assert result.exit_code == 2
        assert "limit-mm-per-prompt" in result.output and "Traceback" not in result.output


@pytest.mark.engine_oracle
@pytest.mark.slow
def test_qwen3_video_resize_matches_transformers(oracle: dict[str, Any]) -> None:
    tower = parse_config({**QWEN3_VL, "vision_config": {**QWEN3_VL["vision_config"], "patch_size": 16}}).vision
    assert tower is not None and tower.unit_pixels == 32
    tower = replace(tower, video_max_pixels=25_165_824)
    for (n, h, w), theirs in zip(RESIZE_FRAMES, oracle["resizes"], strict=True):
        assert list(qwen3_video_resize(n, h, w, tower)) == theirs


def test_qwen25_vl_7b_tower_against_a_public_freeze_log() -> None:
    # a public SFT script that freezes the tower prints: total 8,292,166,656, visual 676,550,144,
    # trainable after the freeze 7,615,616,512 (and the Hub lists numParameters 8,292,166,656)
    from models_registry.resolve import load_model

    spec = load_model("Qwen/Qwen2.5-VL-7B-Instruct").spec
    assert spec.vision is not None
    assert (spec.total_params, spec.extra_params) == (8_292_166_656, 676_550_144)
