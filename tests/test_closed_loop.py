"""The closed-loop form the grid's speed columns print, held to the serving simulation (issue 21, item 4).

The grid cannot simulate millions of rows, so `capacity.serving.closed_loop` gives a closed loop's TPOT and
output tokens/s in closed form; these tests hold it to `capacity.serving.simulate` (the reference: what
`capplan estimate --concurrency` prints) over loops of three engines, dense and MoE models, short and long
prompts, and check its parts by hand. tests/test_grid.py holds every grid row to the same function.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

import polars as pl
import pytest

from capacity.performance import PerfEfficiency, PerfInputs, prefill_seconds, step_seconds
from capacity.serving.closed_loop import (
    WAVE_SHARE,
    closed_loop_speed,
    grid_lengths,
    wave_share,
    wave_ttft_seconds,
)
from tests.conftest import ROOT
from tools import closed_loop_fit

EFF = PerfEfficiency(memory_bandwidth=1.0, compute=1.0, step_overhead_s=0.001, allreduce_latency_s=0.0, source="test")


def _inputs(attention_flops_per_cached_token: float = 0.0) -> PerfInputs:
    """A round-numbers rank: 1 GB of weights at 1 TB/s (1 ms a step), 1 GFLOP per token at 1 PFLOPS, no KV bytes,
    no communication: a step is 1 ms of weights, or its FLOPs, plus the 1 ms overhead."""
    return PerfInputs(
        dense_weight_bytes=1e9, expert_weight_bytes=0.0, num_experts=0, experts_per_token=0, active_params=5e8,
        full_kv_bytes_per_token=0.0, windowed_kv=(), state_bytes_per_sequence=0.0,
        attention_flops_per_cached_token=attention_flops_per_cached_token, windowed_attention=(), hidden_size=1024,
        layers_on_rank=1, act_bytes=2, tp=1, pp=1, bandwidth_bytes_per_s=1e12, flops_per_s=1e15,
        link_bytes_per_s=float("inf"),
    )  # fmt: skip


def test_grid_lengths_are_the_estimate_s_default_split() -> None:
    """`capplan estimate --context T` generates min(256, T / 2) tokens and prompts the rest."""
    assert grid_lengths(4096) == (3840, 256)
    assert grid_lengths(300) == (150, 150)
    assert grid_lengths(2) == (1, 1)


def test_a_prompt_s_chunks_are_summed_at_its_mean_context_by_hand() -> None:
    """3,000 prompt tokens in chunks of 1,024: three chunks of 1,000 tokens. Each chunk's attention FLOPs grow
    with the context it attends to (500, 1,500 and 2,500 tokens on average); their sum is three chunks at the mean,
    1,500, so the closed form is exact for it. Attention FLOPs of 1e6 per new and cached token: a chunk attends
    1e3 x 1e6 x context FLOPs at 1 PFLOPS, the GEMMs 1e3 x 1e9 FLOPs (1 ms, the weights' 1 ms roofline), and the
    step's 1 ms overhead."""
    p = _inputs(attention_flops_per_cached_token=1e6)
    by_hand = sum(1e-3 + 1e3 * 1e6 * context / 1e15 + 1e-3 for context in (500, 1500, 2500))
    assert prefill_seconds(p, 3000, 1024, eff=EFF) == pytest.approx(by_hand)
    # beside 24 decoding sequences the chunks are 1,000 tokens too (1,024 - 24), each at least their decode step
    assert prefill_seconds(p, 3000, 1024, 24, 100, EFF) == pytest.approx(by_hand)


def test_a_wave_of_prompts_queues_for_the_token_budget_by_hand() -> None:
    """Four prompts of 1,000 tokens sent together, a budget of 2,048: the wave's 4,000 tokens take two steps of
    2,000 (each 2 ms of FLOPs, the weights' 1 ms under it, plus 1 ms overhead: 3 ms); the mean prompt waits
    (2 x 5 / 4 + 1) / 2 = 1.75 steps. One step holds a wave of two: both wait one step."""
    p = _inputs()
    step = float(step_seconds(p, 2000, 2, 500, EFF))
    assert step == pytest.approx(3e-3)
    assert wave_ttft_seconds(p, 4, 1000, 2048, EFF) == pytest.approx(1.75 * step)
    assert wave_ttft_seconds(p, 2, 1000, 2048, EFF) == pytest.approx(step)


def test_the_loop_s_tpot_is_the_rest_of_little_s_end_to_end_by_hand() -> None:
    """B = 4 clients, 1,000 in / 11 out, budget 2,048. The decode step of 4 is 2 ms (1 ms weights + 1 ms overhead);
    a prompt beside 3 decodes goes in one chunk of 1,000 (1 ms FLOPs, 1 ms weights: 2 ms); a cycle is 11 decode
    steps and 4 prefills: 22 + 8 = 30 ms for 44 tokens. TTFT = share x 1.75 steps of 3 ms; TPOT the rest of the
    30 ms over the 10 tokens after the first."""
    p = _inputs()
    closed = closed_loop_speed(p, 4, 1000, 11, 2048, EFF, 0.5)
    assert closed.e2e_s == pytest.approx(30e-3)
    assert closed.output_tokens_per_s == pytest.approx(44 / 30e-3)
    assert closed.ttft_s == pytest.approx(0.5 * 1.75 * 3e-3)
    assert closed.tpot_s == pytest.approx((30e-3 - 0.5 * 1.75 * 3e-3) / 10)
    # two clients: their wave is one step of 2,000 tokens, which every scheduler keeps whole (`waited_share`): both
    # prompts start and finish together and come back together, so TTFT is that step whatever the engine's share
    pair = closed_loop_speed(p, 2, 1000, 11, 2048, EFF, 0.5)
    assert pair.ttft_s == pytest.approx(3e-3)


def test_the_form_reads_the_same_on_columns() -> None:
    """The grid evaluates the form on Polars columns: the same numbers as on Python floats."""
    p = _inputs(attention_flops_per_cached_token=1e6)
    rows = pl.DataFrame({"b": [1.0, 4.0, 64.0], "i": [100, 1000, 7000], "o": [1, 11, 256], "c": [2048, 2048, 512]})
    closed = closed_loop_speed(p, pl.col("b"), pl.col("i"), pl.col("o"), pl.col("c"), EFF, 0.41)
    got = rows.select(tpot=closed.tpot_s, tps=closed.output_tokens_per_s)
    for k, row in enumerate(rows.iter_rows(named=True)):
        one = closed_loop_speed(p, row["b"], row["i"], row["o"], row["c"], EFF, 0.41)
        assert got["tpot"][k] == pytest.approx(float(one.tpot_s))
        assert got["tps"][k] == pytest.approx(float(one.output_tokens_per_s))


def test_the_closed_form_agrees_with_the_simulation() -> None:
    """Three engines' schedulers (vLLM's mixed steps, SGLang's prefill-first batches, TensorRT-LLM's reserved
    requests), a dense and an MoE model, short and long prompts, one to B_max clients: the closed form's TPOT and
    output tokens/s against the simulated loop's, median within 5 %, none beyond 35 % (the full design and its
    spread: `python -m tools.closed_loop_fit`)."""
    found = list(
        closed_loop_fit.cases(
            deployments=(
                ("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb", 1, "vllm"),
                ("Qwen/Qwen3-30B-A3B", "mi300x-192gb", 1, "sglang"),
                ("Qwen/Qwen2.5-7B-Instruct", "l40s-48gb", 1, "trtllm"),
            ),
            lengths=((1024, 128), (4096, 256), (256, 1024)),
            concurrency=(1, 16, 64),
        )
    )
    assert {c.engine for c in found} == {"vllm", "sglang", "trtllm"} and len(found) >= 24
    for engine in ("vllm", "sglang", "trtllm"):
        mine = [c for c in found if c.engine == engine]
        for metric in (0, 2):  # TPOT, output tokens/s
            errors = closed_loop_fit.errors(mine, metric)
            assert statistics.median(errors) <= 0.05, (engine, metric, errors)
            assert max(errors) <= 0.35, (engine, metric, errors)


def test_the_shipped_wave_shares_are_the_design_s_fit() -> None:
    """`WAVE_SHARE` is what `tools/closed_loop_fit.py` fits on its whole design (simulated / wave TTFT, median per
    engine), not a number typed in: refit, it must come out the same to the second decimal."""
    found = list(closed_loop_fit.cases())
    for engine, shipped in WAVE_SHARE.items():
        assert closed_loop_fit.fitted_share([c for c in found if c.engine == engine.value]) == pytest.approx(shipped)
        assert wave_share(engine.value) == shipped


def test_the_tool_prints_the_agreement() -> None:
    """`python -m tools.closed_loop_fit` runs and prints every engine's row (the README's numbers come from it)."""
    out = subprocess.run(
        [sys.executable, "-m", "tools.closed_loop_fit"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    ).stdout
    assert "closed loops simulated" in out
    for engine in ("vllm", "sglang", "trtllm"):
        assert any(line.startswith(engine) for line in out.splitlines()), out
