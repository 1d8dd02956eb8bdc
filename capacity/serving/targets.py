"""The largest batch a deployment runs within TPOT / TTFT targets (`capplan estimate --tpot-ms --ttft-ms`).

Two answers, and the estimate says which it gave (`method`):

- `steady_state`: B sequences decoding at the mean context of a request, prompts prefilled beside them
  (`capacity.performance.performance`): the roofline's TPOT and TTFT at B;
- `simulated_p99`: a closed loop of B requests at once (`vllm bench serve --max-concurrency B`) through
  the engine's scheduler (`capacity.serving.simulate`), its p99 TPOT and TTFT.

Both grow with B, so `capacity.performance.largest_batch_meeting` bisects B in [1, B_max].
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from capacity.estimate import Estimate
from capacity.performance import (
    BatchWithin,
    LatencyTargets,
    Performance,
    efficiency_for,
    largest_batch_meeting,
    perf_inputs,
    speed_at,
)
from capacity.serving.sim import simulate
from capacity.serving.workload import Lengths, Load
from capacity.spec import GpuSku, ModelSpec

MIN_SIMULATED_REQUESTS = 200
REQUESTS_PER_SLOT = 3  # a closed loop of B sends 3 B requests: every slot turns over a few times


class TargetMethod(StrEnum):
    STEADY_STATE = "steady_state"
    SIMULATED_P99 = "simulated_p99"


@dataclass(frozen=True, slots=True)
class P99:
    """A simulated closed loop's p99 latencies, milliseconds."""

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
        how = "steady state" if self.method is TargetMethod.STEADY_STATE else "simulated closed loop, p99"
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
    simulated: bool = False,
) -> WithinTargets:
    """The largest B <= B_max meeting `targets` (the estimate must start and the GPU have bandwidth and FLOPS)."""
    inputs = perf_inputs(model, est, gpu, weight_dtype)
    eff = efficiency_for(est.engine, gpu)
    lengths = Lengths(input_tokens, output_tokens)
    steady = speed_at(
        model, est, gpu, input_tokens=input_tokens, output_tokens=output_tokens, weight_dtype=weight_dtype, eff=eff
    )

    def closed_loop(batch: int) -> P99:
        requests = max(MIN_SIMULATED_REQUESTS, REQUESTS_PER_SLOT * batch)
        sim = simulate(est, inputs, Load.closed(batch, requests, lengths), eff)
        return P99(sim.tpot.p99_ms, sim.ttft.p99_ms)

    b_max = max(1, est.b_max)
    within: BatchWithin[P99] | BatchWithin[Performance] = (
        largest_batch_meeting(closed_loop, b_max, targets)
        if simulated
        else largest_batch_meeting(steady, b_max, targets)
    )
    if within.binding is not None:
        binding = within.binding.value
    else:
        binding = "max_num_seqs" if est.max_num_seqs is not None and est.b_max >= est.max_num_seqs else "memory"
    return WithinTargets(
        targets=targets,
        method=TargetMethod.SIMULATED_P99 if simulated else TargetMethod.STEADY_STATE,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        max_batch=within.batch,
        b_max=est.b_max,
        binding=binding,
        tpot_ms=within.perf.tpot_ms if within.perf is not None else None,
        ttft_ms=within.perf.ttft_ms if within.perf is not None else None,
    )
