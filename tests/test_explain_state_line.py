"""The state line of `capplan estimate`'s derivation shows the numbers it uses: a reader recomputes the
per-GPU state bytes by hand from the printed terms (conv elements, the kept share of the conv window, TP,
element sizes, recurrent elements, layers), and gets the printed total, the figure the pool is built on.
The terms are checked against the engines' shapes by hand: vLLM's `MambaStateShapeCalculator` keeps
`conv_kernel - 1` columns of the conv window (mamba_utils.py), SGLang the same; the state of a gated
delta net is (Hv, Dv, Dk) per sequence."""

from __future__ import annotations

import re

import pytest

from capacity.estimate import estimate
from capacity.explain import derivation
from capacity.hf_config import parse_config
from capacity.numeric import cdiv
from capacity.spec import DeploymentSpec, GpuSku
from tests.test_registry_hostile import _bundled_config

H100 = GpuSku(id="test-h100", name="H100", vendor="nvidia", memory_total_bytes=80 * 2**30, architecture="hopper")
NUM = r"([\d,]+)"
TERM = re.compile(
    rf"^\s+(\d+) x \(conv {NUM}(?: x (\d+)/(\d+) = {NUM})? / TP (\d+) = {NUM} x (\d+) B \+ recurrent {NUM} / TP (\d+) = "
    rf"{NUM} x (\d+) B = {NUM} B\) = {NUM} B$"
)
TOTAL = re.compile(rf"plus a constant per-sequence state of {NUM} B per GPU")


def _n(text: str) -> int:
    return int(text.replace(",", ""))


def _recomputed(lines: list[str]) -> tuple[int, int]:
    """(the printed per-GPU state, the sum recomputed from the printed terms alone)."""
    printed = next(_n(m.group(1)) for line in lines if (m := TOTAL.search(line)))
    total = 0
    for line in lines:
        m = TERM.match(line)
        if not m:
            continue
        layers, conv, kept_num, kept_den, conv_kept, tp, conv_tp, conv_b = m.group(1, 2, 3, 4, 5, 6, 7, 8)
        recurrent, tp2, rec_tp, rec_b, per_layer, line_total = m.group(9, 10, 11, 12, 13, 14)
        stored = _n(conv) if kept_num is None else _n(conv) // int(kept_den) * int(kept_num)
        if conv_kept is not None:
            assert _n(conv_kept) == stored
        assert _n(conv_tp) == cdiv(stored, int(tp)) and _n(rec_tp) == cdiv(_n(recurrent), int(tp2))
        layer_bytes = cdiv(stored, int(tp)) * int(conv_b) + cdiv(_n(recurrent), int(tp2)) * int(rec_b)
        assert _n(per_layer) == layer_bytes
        assert _n(line_total) == int(layers) * layer_bytes
        total += int(layers) * layer_bytes
    return printed, total


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_qwen3_next_state_line_recomputes_by_hand(engine: str, tp: int) -> None:
    model = parse_config(_bundled_config("Qwen/Qwen3-Next-80B-A3B-Instruct"))
    est = estimate(model, DeploymentSpec(engine=engine, tp=tp), gpu=H100)
    lines = derivation(est, model)
    printed, recomputed = _recomputed(lines)
    assert printed == recomputed == est.state_bytes_per_sequence_per_gpu > 0
    # no "x 0 elements x 2 B = 0 B" row for the state layers
    assert not any("state:" in line and "0 elements" in line for line in lines)


def test_qwen3_next_terms_by_hand_from_the_config() -> None:
    """Qwen3-Next's gated delta net (config.json): conv channels 2 Hk Dk + Hv Dv = 2 x 16 x 128 + 32 x 128
    = 8,192 over a window of 4 (vLLM keeps 3 columns); state Hv x Dv x Dk = 32 x 128 x 128 = 524,288; bf16.
    At TP 4 with vLLM: (8,192 x 3 / 4 x 2 B) + (524,288 / 4 x 2 B) = 12,288 + 262,144 = 274,432 B a layer,
    36 of the 48 layers: 9,879,552 B (the figure the issue found derived nowhere)."""
    cfg = _bundled_config("Qwen/Qwen3-Next-80B-A3B-Instruct")
    channels = 2 * cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
    channels += cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"]
    kernel = cfg["linear_conv_kernel_dim"]
    state = cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"] * cfg["linear_key_head_dim"]
    per_layer = channels * (kernel - 1) // 4 * 2 + state // 4 * 2
    assert per_layer == 274_432
    model = parse_config(cfg)
    est = estimate(model, DeploymentSpec(tp=4), gpu=H100)
    assert est.state_bytes_per_sequence_per_gpu == 36 * per_layer == 9_879_552
    line = next(line for line in derivation(est, model) if TERM.match(line))
    assert line.strip().startswith("36 x (conv 32,768 x 3/4 = 24,576 / TP 4 = 6,144 x 2 B")


def test_state_line_for_mamba_models() -> None:
    for repo in ("nvidia/Nemotron-H-8B-Base-8K", "ai21labs/AI21-Jamba-1.5-Mini"):
        model = parse_config(_bundled_config(repo))
        for tp in (1, 2):
            est = estimate(model, DeploymentSpec(tp=tp), gpu=H100)
            printed, recomputed = _recomputed(derivation(est, model))
            assert printed == recomputed == est.state_bytes_per_sequence_per_gpu > 0, repo
