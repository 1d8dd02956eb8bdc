"""The largest batch a deployment runs within TPOT / TTFT targets (`capplan estimate --tpot-ms --ttft-ms`).

Two answers, and the estimate says which it gave (`method`):

- `closed_form`: the means of a closed loop of B requests (`vllm bench serve --max-concurrency B`) in
  closed form (`capacity.serving.closed_loop`, what the grid prints and the fit observes): its decode steps
  and the prefills of the prompts that join them, and the wave of prompts sent together;
- `simulated_p99`: the same loop through the engine's scheduler (`capacity.serving.simulate`), its p99 TPOT
  and TTFT.

Both grow with B, so `capacity.performance.largest_batch_meeting` bisects B in [1, B_max].
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from capacity.estimate import Estimate
from capacity.performance import LatencyTargets, efficiency_for, largest_batch_meeting, perf_inputs
from capacity.serving.closed_loop import closed_loop_speed, wave_share
from capacity.serving.sim import simulate
from capacity.serving.workload import Lengths, Load
from capacity.spec import GpuSku, ModelSpec

MIN_SIMULATED_REQUESTS = 200
REQUESTS_PER_SLOT = 3  # a closed loop of B sends 3 B requests: every slot turns over a few times


class TargetMethod(StrEnum):
    CLOSED_FORM = "closed_form"
    SIMULATED_P99 = "simulated_p99"


@dataclass(frozen=True, slots=True)
class LoopLatencies:
    """A closed loop's latencies, milliseconds: the closed form's means, or a simulated loop's p99."""

    tpot_ms: float
    ttft_ms: float


@dataclass(frozen=True, slots=True)
class WithinTargets:
    """The largest batch within the targets, what stops it growing, and its latencies there."""

    targets: LatencyTargets
    method: TargetMethod
    input_tokens: int
    output_tokens: int
    max_batch: int  # 0: one sequence already misses a target
    b_max: int
    binding: str  # tpot | ttft | memory | max_num_seqs
    tpot_ms: float | None  # at max_batch
    ttft_ms: float | None

    def contract(self) -> dict[str, object]:
        """`capplan estimate --json`'s `latency_targets` object."""
        return {
            "tpot_ms_target": self.targets.tpot_ms,
            "ttft_ms_target": self.targets.ttft_ms,
            "method": self.method.value,
            "input_len": self.input_tokens,
            "output_len": self.output_tokens,
            "max_batch": self.max_batch,
            "b_max": self.b_max,
            "binding": self.binding,
            "tpot_ms": None if self.tpot_ms is None else round(self.tpot_ms, 3),
            "ttft_ms": None if self.ttft_ms is None else round(self.ttft_ms, 3),
        }

    def lines(self) -> list[str]:
        wanted = ", ".join(
            f"{name} <= {value:g} ms"
            for name, value in (("TPOT", self.targets.tpot_ms), ("TTFT", self.targets.ttft_ms))
            if value is not None
        )
        how = "closed loop, means" if self.method is TargetMethod.CLOSED_FORM else "simulated closed loop, p99"
        head = (
            f"8. Latency targets ({how}): {wanted}, requests of {self.input_tokens:,} + {self.output_tokens:,} tokens"
        )
        if self.max_batch == 0:
            return [head, f"   even one sequence misses the {self.binding.upper()} target"]
        stop = (
            f"B = {self.max_batch + 1:,} misses {self.binding.upper()}"
            if self.binding in ("tpot", "ttft")
            else f"B_max = {self.b_max:,} ({self.binding}) stops it first"
        )
        return [
            head,
            f"   largest batch B = {self.max_batch:,} ({stop}); there TPOT {self.tpot_ms or 0:,.2f} ms, "
            f"TTFT {self.ttft_ms or 0:,.1f} ms",
        ]


def batch_within_targets(
    model: ModelSpec,
    est: Estimate,
    gpu: GpuSku,
    targets: LatencyTargets,
    *,
    input_tokens: int,
    output_tokens: int,
    weight_dtype: str = "auto",
    simulated_p99: bool = False,
) -> WithinTargets:
    """The largest B <= B_max meeting `targets` (the estimate must start and the GPU have bandwidth and FLOPS)."""
    inputs = perf_inputs(model, est, gpu, weight_dtype)
    eff = efficiency_for(est.engine, gpu)
    lengths = Lengths(input_tokens, output_tokens)
    chunk = est.pool.max_num_batched_tokens or input_tokens
    share = wave_share(est.engine)

    def closed_form(batch: int) -> LoopLatencies:
        loop = closed_loop_speed(inputs, batch, input_tokens, output_tokens, chunk, eff, share)
        return LoopLatencies(float(loop.tpot_s) * 1e3, (float(loop.ttft_s) + eff.request_overhead_s) * 1e3)

    def simulated(batch: int) -> LoopLatencies:
        requests = max(MIN_SIMULATED_REQUESTS, REQUESTS_PER_SLOT * batch)
        sim = simulate(est, inputs, Load.closed(batch, requests, lengths), eff)
        return LoopLatencies(sim.tpot.p99_ms, sim.ttft.p99_ms)

    b_max = max(1, est.b_max)
    within = largest_batch_meeting(simulated if simulated_p99 else closed_form, b_max, targets)
    if within.binding is not None:
        binding = within.binding.value
    else:
        binding = "max_num_seqs" if est.max_num_seqs is not None and est.b_max >= est.max_num_seqs else "memory"
    return WithinTargets(
        targets=targets,
        method=TargetMethod.SIMULATED_P99 if simulated_p99 else TargetMethod.CLOSED_FORM,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        max_batch=within.batch,
        b_max=est.b_max,
        binding=binding,
        tpot_ms=within.perf.tpot_ms if within.perf is not None else None,
        ttft_ms=within.perf.ttft_ms if within.perf is not None else None,
    )
