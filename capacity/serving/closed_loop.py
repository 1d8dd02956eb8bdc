"""A closed loop's speed in closed form: what `simulate` reports for `Load.closed`, without stepping it.

The grid prices millions of context rows, so it cannot run the scheduler simulation per row; this form
gives the same three figures from the step cost of `capacity.performance` and holds them to the
simulation (tests/test_closed_loop.py; `python -m tools.closed_loop_fit` measures the agreement and fits
the one factor below). It reads the same on Python floats, Polars expressions and SQL expressions.

For `concurrency` clients each sending requests of `input_tokens` + `output_tokens` back to back:

- throughput: a generation of every running request is its output tokens' decode steps plus each
  request's prefill beside the others (`performance.serving_tokens_per_second`);
- end to end: Little's law on the loop, `concurrency x output_tokens / throughput` per request;
- TTFT: the clients start together and, with equal lengths, finish together, so each wave of prompts
  queues for the token budget: the wave's `concurrency x input_tokens` prompt tokens take
  `ceil(wave / budget)` steps, and the k-th prompt has its first token after about `k / concurrency` of
  them (`wave_ttft_seconds`). How much of that wave the engine's scheduler keeps is the engine's
  `WAVE_SHARE`: an SGLang or TensorRT-LLM loop (whole requests reserved at admission) stays in waves, while
  vLLM's loop, which admits a request on its prompt alone and mixes prompts into decode steps, spreads
  its arrivals over the cycle and waits for a fraction of the wave; a wave of one step stays whole in any
  scheduler (`waited_share`);
- TPOT: the rest of the end to end over the other output tokens, `(e2e - TTFT) / (output - 1)`, which is
  the simulation's own definition of a request's TPOT.
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity.engines import Engine
from capacity.numeric import Num, as_float, at_least, cdiv, choose, minimum
from capacity.performance import (
    PerfEfficiency,
    PerfInputs,
    pipeline_seconds,
    prefill_seconds,
    serving_tokens_per_second,
    step_seconds,
    tpot_seconds,
)

# The share of a full wave's queue a request's TTFT takes in the engine's closed loop, fitted to the
# serving simulation (`python -m tools.closed_loop_fit`: the median of simulated / wave TTFT over its
# design of deployments and loads; README-perf-measurements.md, "The grid's speed columns").
WAVE_SHARE = {Engine.VLLM: 0.39, Engine.SGLANG: 0.96, Engine.TRTLLM: 0.85}
GRID_OUTPUT_TOKENS = 256  # the grid's requests: min(256, T / 2) output tokens, the rest prompt (as `estimate`)


def wave_share(engine: str) -> float:
    """`WAVE_SHARE` of an engine name (vLLM's for an engine without a scheduler of its own)."""
    try:
        return WAVE_SHARE[Engine(str(engine).lower())]
    except (ValueError, KeyError):
        return WAVE_SHARE[Engine.VLLM]


@dataclass(frozen=True, slots=True)
class ClosedLoopSpeed:
    """A closed loop's means: seconds per output token after the first, seconds to the first token (the
    engine's, without the request overhead before it), output tokens per second of the replica."""

    tpot_s: Num
    ttft_s: Num
    output_tokens_per_s: Num
    e2e_s: Num


def grid_lengths(context_tokens: Num) -> tuple[Num, Num]:
    """(input, output) tokens of the grid's requests of `context_tokens`: min(256, T // 2) generated, the rest
    prompt, as `capplan estimate --context T` takes them."""
    output = at_least(minimum(context_tokens // 2, GRID_OUTPUT_TOKENS), 1)
    return at_least(context_tokens - output, 1), output


def wave_steps(concurrency: Num, input_tokens: Num, chunk_tokens: Num) -> Num:
    """Steps a wave of `concurrency` prompts of `input_tokens` takes at `chunk_tokens` a step: ceil(B x I / chunk)."""
    return at_least(cdiv(concurrency * input_tokens, chunk_tokens), 1)


def wave_ttft_seconds(p: PerfInputs, concurrency: Num, input_tokens: Num, chunk_tokens: Num, eff: PerfEfficiency) -> Num:
    """The mean wait for the first token of `concurrency` prompts of `input_tokens` sent together, prefilled in
    steps of `chunk_tokens`: the wave takes n = ceil(B x I / chunk) steps of its tokens split evenly; the k-th
    prompt is done after ceil(k n / B) of them, about (n (B + 1) / B + 1) / 2 on average (1 when the wave is one
    step, (n + 1) / 2 for many short prompts)."""
    wave = concurrency * input_tokens
    steps = wave_steps(concurrency, input_tokens, chunk_tokens)
    per_step = wave / steps
    step = pipeline_seconds(p, step_seconds(p, per_step, per_step / input_tokens, input_tokens / 2, eff), per_step)
    return wave_mean_steps(steps, concurrency) * step


def waited_share(share: Num, steps: Num) -> Num:
    """The share of the wave's mean wait a request's TTFT is: the engine's `WAVE_SHARE`, except that a wave of one
    step is every prompt's first step in any scheduler (all its prompts start and finish together, so they come
    back together: the loop keeps its waves)."""
    return choose(steps > 1, share, 1.0)


def wave_mean_steps(steps: Num, concurrency: Num) -> Num:
    """The steps of a wave of `steps` the mean prompt of `concurrency` waits for: the k-th is done after about
    k / B of them, (n (B + 1) / B + 1) / 2 on average, and never more than n."""
    return minimum((steps * (concurrency + 1) / concurrency + 1) / 2, steps)


@dataclass(frozen=True, slots=True)
class ClosedLoopParts:
    """The step costs a closed loop is made of (seconds): a decode step of the whole batch, one prompt's prefill
    beside the others, and the wave's mean wait (`wave_ttft_seconds`). The grid computes them as columns once and
    `from_parts` reads them, so no part is computed twice per row."""

    decode_s: Num
    prefill_s: Num
    wave_s: Num
    wave_steps: Num  # the wave's steps (`wave_steps`)


def closed_loop_parts(
    p: PerfInputs, concurrency: Num, input_tokens: Num, output_tokens: Num, chunk_tokens: Num, eff: PerfEfficiency
) -> ClosedLoopParts:
    """The loop's step costs at the mean context of a request (prompt + half the output)."""
    context = input_tokens + output_tokens / 2
    return ClosedLoopParts(
        decode_s=tpot_seconds(p, concurrency, context, eff),
        prefill_s=prefill_seconds(p, input_tokens, chunk_tokens, concurrency - 1, context, eff),
        wave_s=wave_ttft_seconds(p, concurrency, input_tokens, chunk_tokens, eff),
        wave_steps=wave_steps(concurrency, input_tokens, chunk_tokens),
    )


def from_parts(parts: ClosedLoopParts, concurrency: Num, output_tokens: Num, pp: Num, share: Num) -> ClosedLoopSpeed:
    """The loop's figures from its parts (module docstring): the cycle of o decode steps (PP keeps PP batches
    moving, as `serving_tokens_per_second` counts them) and B prefills, Little's law, the engine's share of the
    wave, and TPOT as the rest of the end to end."""
    decode_tokens_per_s = concurrency * pp / parts.decode_s
    throughput = serving_tokens_per_second(decode_tokens_per_s, concurrency, output_tokens, parts.prefill_s)
    cycle_s = concurrency * output_tokens / throughput  # Little's law: a request's end to end
    ttft = minimum(waited_share(share, parts.wave_steps) * parts.wave_s, cycle_s)
    tpot = choose(output_tokens > 1, (cycle_s - ttft) / at_least(output_tokens - 1, 1), parts.decode_s)
    return ClosedLoopSpeed(tpot_s=tpot, ttft_s=ttft, output_tokens_per_s=throughput, e2e_s=cycle_s)


def closed_loop_speed(
    p: PerfInputs,
    concurrency: Num,
    input_tokens: Num,
    output_tokens: Num,
    chunk_tokens: Num,
    eff: PerfEfficiency,
    share: Num,
) -> ClosedLoopSpeed:
    """The closed loop's TPOT, TTFT and output tokens/s (module docstring); `share` is the engine's `WAVE_SHARE`.
    `chunk_tokens` is the engine's token budget per step (max_num_batched_tokens / chunked_prefill_size)."""
    batch = as_float(concurrency)
    parts = closed_loop_parts(p, batch, input_tokens, output_tokens, chunk_tokens, eff)
    return from_parts(parts, batch, output_tokens, p.pp, share)
