"""Simulated requests per second of the serving simulation (`capacity.serving.simulate`), one core.

One deployment (Llama-3.1-8B-Instruct on one H100 SXM, each engine's defaults) under benchmark loads of
1,000 requests: a closed loop at concurrency 64, a burst of all 1,000, and Poisson arrivals at 8 req/s,
1,000 prompt + 1,000 output tokens (the Poisson load with vLLM's range ratio 0.5). Prints for each the
wall time, simulated requests/s and scheduler steps/s, with `--naive` the same run taking every step one
at a time (the baseline: no decode run advanced in bulk) and the speed-up, then the process's peak RSS.

    .venv/bin/python -m benchmarks.serving [--naive] [--engine vllm|sglang|trtllm] [--model REPO_ID]
"""

from __future__ import annotations

import argparse
import resource
import time

from benchmarks.estimate import cores
from capacity.estimate import estimate
from capacity.performance import efficiency_for, perf_inputs
from capacity.serving import Lengths, Load, ServingResult, simulate
from capacity.spec import DeploymentSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
GPU = "h100-sxm-80gb"
LOADS = {
    "closed C=64": Load.closed(64, 1000, Lengths(1000, 1000)),
    "burst 1000": Load.burst(1000, Lengths(1000, 1000)),
    "poisson 8/s": Load.poisson(8.0, 1000, Lengths(1000, 1000, range_ratio=0.5), seed=0),
}


def timed(run: object) -> tuple[ServingResult, float]:
    start = time.perf_counter()
    result = run()  # type: ignore[operator]
    return result, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--naive", action="store_true", help="also run the step-at-a-time baseline")
    parser.add_argument("--engine", default="vllm", choices=("vllm", "sglang", "trtllm"))
    parser.add_argument("--model", default=MODEL, help=f"catalog model (default {MODEL})")
    args = parser.parse_args(argv)
    print(cores())
    model = load_model(args.model)
    gpu = find_gpu_sku(GPU)
    est = estimate(model.spec, DeploymentSpec(engine=args.engine), gpu=gpu, checkpoint_bytes=model.checkpoint_bytes)
    inputs = perf_inputs(model.spec, est, gpu)
    eff = efficiency_for(est.engine, gpu)
    print(
        f"{args.model} on {GPU}, {args.engine}: {est.kv_cache_tokens:,} KV tokens, B_max at 2,000 = {est.b_max_at(2000)}"
    )
    header = f"{'load':<13} {'wall s':>7} {'req/s':>8} {'steps':>7} {'steps/s':>9} {'bulk %':>6} {'out tok/s':>9}"
    print(header + ("  naive s  naive req/s  speed-up" if args.naive else ""))
    for name, load in LOADS.items():
        result, seconds = timed(lambda load=load: simulate(est, inputs, load, eff))
        line = (
            f"{name:<13} {seconds:>7.3f} {load.num_requests / seconds:>8.0f} {result.steps:>7,} "
            f"{result.steps / seconds:>9,.0f} {100 * result.bulk_steps / result.steps:>6.1f} "
            f"{result.output_tokens_per_second:>9,.0f}"
        )
        if args.naive:
            naive, naive_s = timed(lambda load=load: simulate(est, inputs, load, eff, bulk=False))
            assert naive.steps == result.steps and naive.preemptions == result.preemptions
            line += f"  {naive_s:>7.3f}  {load.num_requests / naive_s:>11.0f}  {naive_s / seconds:>7.1f}x"
        print(line)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak_mib:,.0f} MiB")


if __name__ == "__main__":
    main()
