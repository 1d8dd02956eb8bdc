"""Hold the grid's closed-form speed to the serving simulation, and fit its one factor.

    python -m tools.closed_loop_fit [--rows]

`capacity.serving.closed_loop.closed_loop_speed` is what the grid's speed columns print (a closed loop of
B_max requests at each context); `capacity.serving.simulate` is what `capplan estimate --concurrency` prints.
Over a design of deployments (dense and MoE models, NVIDIA and AMD GPUs, TP 1-4, the three engines) and
closed loops (concurrency 1 to B_max, prompts of 256-8,000 tokens, 128-2,048 generated), this simulates each
loop with fixed lengths and `3 x concurrency` requests (at least 200), fits each engine's `WAVE_SHARE` as the
median of simulated / wave TTFT (the engine's TTFT without its request overhead), and prints how far the
closed form is from the simulation per engine and metric (median and 90th percentile of |closed / simulated -
1|, and the largest). Nothing here reads a measurement: the simulation is the reference.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capacity.estimate import estimate
from capacity.performance import efficiency_for, perf_inputs
from capacity.serving import Lengths, Load, simulate
from capacity.serving.closed_loop import ClosedLoopParts, closed_loop_parts, from_parts, wave_share
from capacity.spec import DeploymentSpec
from models_registry.resolve import spec_and_checkpoint
from models_registry.sources.gpu_catalog import find_gpu_sku

DEPLOYMENTS = (
    ("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb", 1, "vllm"),
    ("meta-llama/Llama-3.1-8B-Instruct", "a100-sxm-80gb", 1, "sglang"),
    ("meta-llama/Llama-3.1-8B-Instruct", "l40s-48gb", 1, "vllm"),
    ("meta-llama/Llama-3.1-70B-Instruct", "h100-sxm-80gb", 4, "vllm"),
    ("Qwen/Qwen3-30B-A3B", "h100-sxm-80gb", 1, "vllm"),
    ("Qwen/Qwen3-30B-A3B", "mi300x-192gb", 1, "sglang"),
    ("Qwen/Qwen3-32B", "h200-sxm-141gb", 2, "sglang"),
    ("Qwen/Qwen2.5-7B-Instruct", "l40s-48gb", 1, "trtllm"),
    ("Qwen/Qwen2.5-7B-Instruct", "h100-sxm-80gb", 1, "trtllm"),
)
LENGTHS = ((1024, 128), (1024, 1024), (4096, 256), (256, 1024), (8000, 1000), (2048, 2048))
CONCURRENCY = (1, 4, 16, 64, 256)  # 256 stands for B_max where the pool holds fewer
MIN_REQUESTS = 200


@dataclass(frozen=True, slots=True)
class Case:
    """One closed loop: its deployment, load, the simulation's means and the closed form's parts."""

    name: str
    engine: str
    concurrency: int
    input_tokens: int
    output_tokens: int
    sim_tpot_s: float
    sim_ttft_s: float  # without the engine's request overhead
    sim_tokens_per_s: float
    parts: ClosedLoopParts  # the closed form's step costs (floats), which `from_parts` combines at any share
    pp: int


def cases(
    deployments: Sequence[tuple[str, str, int, str]] = DEPLOYMENTS,
    lengths: Sequence[tuple[int, int]] = LENGTHS,
    concurrency: Sequence[int] = CONCURRENCY,
) -> Iterator[Case]:
    """The design's closed loops (model, GPU, TP, engine x (input, output) x concurrency; the last concurrency
    stands for B_max where the pool holds fewer), simulated, with the closed form's parts."""
    for model_id, gpu_id, tp, engine in deployments:
        model, checkpoint = spec_and_checkpoint(model_id)
        gpu = find_gpu_sku(gpu_id)
        for input_tokens, output_tokens in lengths:
            for asked in concurrency:
                est = estimate(model, DeploymentSpec(tp=tp, engine=engine), gpu=gpu, checkpoint_bytes=checkpoint,
                               context_tokens=input_tokens + output_tokens, concurrency=asked)  # fmt: skip
                batch = min(asked, est.b_max)
                if batch < 1 or (batch < asked and asked != concurrency[-1]):
                    continue  # past B_max only once, at B_max itself
                inputs, eff = perf_inputs(model, est, gpu), efficiency_for(engine, gpu)
                requests = max(MIN_REQUESTS, 3 * batch)
                sim = simulate(est, inputs, Load.closed(batch, requests, Lengths(input_tokens, output_tokens)), eff)
                chunk = est.pool.max_num_batched_tokens or input_tokens
                parts = closed_loop_parts(inputs, batch, input_tokens, output_tokens, chunk, eff)
                yield Case(
                    name=f"{model_id.split('/')[-1]} {gpu_id} TP{tp} {engine} B={batch} {input_tokens}/{output_tokens}",
                    engine=engine,
                    concurrency=batch,
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    sim_tpot_s=sim.tpot.mean_ms / 1e3,
                    sim_ttft_s=sim.ttft.mean_ms / 1e3 - eff.request_overhead_s,
                    sim_tokens_per_s=sim.output_tokens_per_second,
                    parts=ClosedLoopParts(*(float(x) for x in (parts.decode_s, parts.prefill_s, parts.wave_s, parts.wave_steps))),
                    pp=inputs.pp,
                )


def fitted_share(found: list[Case]) -> float:
    """The median of simulated / wave TTFT over loops whose wave takes more than one step (`waited_share`)."""
    ratios = [c.sim_ttft_s / c.parts.wave_s for c in found if c.parts.wave_steps > 1 and c.parts.wave_s > 0]
    return round(statistics.median(ratios), 2) if ratios else 1.0


def closed_with_share(case: Case, share: float) -> tuple[float, float, float]:
    """The closed form's (TPOT, TTFT, tokens/s) of the loop at `share` (`from_parts`)."""
    closed = from_parts(case.parts, case.concurrency, case.output_tokens, case.pp, share)
    return float(closed.tpot_s), float(closed.ttft_s), float(closed.output_tokens_per_s)


def errors(found: Sequence[Case], metric: int) -> list[float]:
    """|closed / simulated - 1| of each loop at the shipped share; `metric` 0 TPOT, 1 TTFT, 2 output tokens/s."""
    out = []
    for case in found:
        closed = closed_with_share(case, wave_share(case.engine))[metric]
        simulated = (case.sim_tpot_s, case.sim_ttft_s, case.sim_tokens_per_s)[metric]
        if simulated > 0:
            out.append(abs(closed / simulated - 1))
    return out


def _spread(errors: list[float]) -> str:
    ordered = sorted(errors)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(ordered):6.1%} {p90:6.1%} {ordered[-1]:6.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", action="store_true", help="print every loop")
    args = parser.parse_args()
    found = list(cases())
    print(f"{len(found)} closed loops simulated")
    print(f"{'engine':8} {'n':>4} {'share':>6} {'shipped':>8}   |closed / simulated - 1|: median, p90, max")
    for engine in sorted({c.engine for c in found}):
        mine = [c for c in found if c.engine == engine]
        share, shipped = fitted_share(mine), wave_share(engine)
        closed = [closed_with_share(c, shipped) for c in mine]
        print(f"{engine:8} {len(mine):4} {share:6.2f} {shipped:8.2f}")
        for k, metric in enumerate(("TPOT", "TTFT", "output tokens/s")):
            print(f"{'':28} {metric:16} {_spread(errors(mine, k))}")
        if args.rows:
            for c, x in zip(mine, closed, strict=True):
                print(f"   {c.name:60} TPOT {x[0] * 1e3:8.2f} / {c.sim_tpot_s * 1e3:8.2f} ms  TTFT {x[1] * 1e3:8.1f} / "
                      f"{c.sim_ttft_s * 1e3:8.1f} ms  tok/s {x[2]:8.0f} / {c.sim_tokens_per_s:8.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
