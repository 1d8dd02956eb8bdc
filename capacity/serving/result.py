"""What a simulated benchmark reports, in the units `vllm bench serve` prints them.

Per-request figures (TTFT, TPOT, end-to-end) are summarised as mean, median and p99 with numpy's default
(linear) percentile, as vLLM's benchmark does. ITL is per token: a run's gaps are kept as linear segments
(a run of decode steps whose time grows with the context is one segment), so the percentiles are found by
bisection over the segments instead of expanding a list of every token.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capacity.performance import Performance

# the metrics (as the measurements name them) a closed loop's simulation gives `capplan estimate --concurrency`
# below B_max (`reported_speed`), each with the `Performance` field (and `--json` key) it replaces
SIMULATED_SPEED_FIELDS = {"tpot": "tpot_ms", "output_throughput": "output_tokens_per_second", "ttft": "ttft_ms"}
SIMULATED_SPEED_METRICS = tuple(SIMULATED_SPEED_FIELDS)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Mean, median and p99 of one latency, milliseconds."""

    mean_ms: float
    median_ms: float
    p99_ms: float

    def contract(self) -> dict[str, float]:
        return {
            "mean_ms": round(self.mean_ms, 3),
            "median_ms": round(self.median_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
        }


EMPTY = Distribution(0.0, 0.0, 0.0)


def percentile(sorted_values: list[float], q: float) -> float:
    """numpy.percentile's default (linear interpolation between closest ranks) on a sorted list."""
    if not sorted_values:
        return 0.0
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def distribution_s(values_s: list[float]) -> Distribution:
    """A list of seconds as mean / median / p99 in milliseconds."""
    if not values_s:
        return EMPTY
    ordered = sorted(values_s)
    mean = math.fsum(ordered) / len(ordered)
    return Distribution(mean * 1e3, percentile(ordered, 0.5) * 1e3, percentile(ordered, 0.99) * 1e3)


# A segment of inter-token gaps: `count` values first + slope x j (j = 0..count-1), each seen `weight` times.
Segment = tuple[float, float, int, int]


class _Gaps:
    """The segments split for counting: single values sorted with running weights (bisected), and the
    sloped runs (few: one per linear piece of a bulk run), counted one by one."""

    def __init__(self, segments: list[Segment]) -> None:
        points: dict[float, int] = {}
        self.sloped: list[Segment] = []
        for first, slope, count, weight in segments:
            if slope == 0.0 or count == 1:
                points[first] = points.get(first, 0) + count * weight
            else:
                self.sloped.append((first, slope, count, weight))
        self.values = sorted(points)
        self.cumulative = list(itertools.accumulate(points[v] for v in self.values))

    def at_most(self, value: float) -> int:
        i = bisect.bisect_right(self.values, value)
        total = self.cumulative[i - 1] if i else 0
        for first, slope, count, weight in self.sloped:
            if slope > 0.0:
                inside = 0 if value < first else min(count, math.floor((value - first) / slope) + 1)
            else:
                last = first + slope * (count - 1)
                inside = (
                    count if value >= first else (0 if value < last else count - math.ceil((value - first) / slope))
                )
            total += inside * weight
        return total

    def kth_smallest(self, k: int, low: float, high: float) -> float:
        """The k-th smallest gap (0-based), by bisection on the value."""
        for _ in range(64):
            mid = (low + high) / 2
            if self.at_most(mid) >= k + 1:
                high = mid
            else:
                low = mid
            if high - low <= 1e-12 * max(abs(high), 1e-9):
                break
        return high


def segment_distribution_s(segments: list[Segment]) -> Distribution:
    """Mean, median and p99 (numpy's linear percentile) of the gaps the segments hold, in ms."""
    n = sum(count * weight for _, _, count, weight in segments)
    if n == 0:
        return EMPTY
    total = math.fsum(
        weight * (count * first + slope * count * (count - 1) / 2) for first, slope, count, weight in segments
    )
    ends = [v for first, slope, count, _ in segments for v in (first, first + slope * (count - 1))]
    low, high = min(ends), max(ends)
    gaps = _Gaps(segments)

    def at(q: float) -> float:
        position = q * (n - 1)
        below = math.floor(position)
        a = gaps.kth_smallest(below, low, high)
        if position == below:
            return a
        b = gaps.kth_smallest(below + 1, low, high)
        return a + (b - a) * (position - below)

    return Distribution(total / n * 1e3, at(0.5) * 1e3, at(0.99) * 1e3)


@dataclass(frozen=True, slots=True)
class ServingResult:
    """One simulated benchmark of one replica."""

    engine: str
    load: str
    num_requests: int
    duration_s: float  # first arrival to last completion
    request_throughput: float  # requests per second
    output_tokens_per_second: float
    total_tokens_per_second: float  # input + output
    ttft: Distribution
    tpot: Distribution  # per request: (e2e - TTFT) / (output - 1)
    itl: Distribution  # per token: the gap since the request's previous token
    e2e: Distribution
    mean_queue_ms: float  # arrival at the scheduler to first scheduled
    preemptions: int  # vLLM preemptions (recompute) / SGLang retractions
    peak_running: int  # most sequences holding KV at once
    queued: bool  # some request waited for KV blocks or a running slot (the load is past B_max)
    steps: int  # scheduler steps simulated
    bulk_steps: int  # of them, decode steps advanced in bulk
    source: str  # the scheduler rules followed
    ttft_by_request_s: tuple[float, ...] = ()  # in the order requests were sent

    def speed_contract(self) -> dict[str, object]:
        """The steady-state speed keys of `capplan estimate --json`, from the simulation (means)."""
        return {
            "output_tokens_per_second": round(self.output_tokens_per_second, 1),
            "tpot_ms": round(self.tpot.mean_ms, 3),
            "ttft_ms": round(self.ttft.mean_ms, 3),
            "queued": self.queued,
        }

    def lines(self) -> list[str]:
        """The simulated benchmark as `capplan estimate` prints it."""

        def row(name: str, d: Distribution) -> str:
            return f"   {name:<5} mean {d.mean_ms:,.2f} ms, median {d.median_ms:,.2f} ms, p99 {d.p99_ms:,.2f} ms"

        waited = (
            f"requests queued for KV blocks or a running slot (mean wait {self.mean_queue_ms:,.1f} ms)"
            if self.queued
            else "no request waited for KV blocks or a running slot"
        )
        return [
            f"7. Simulated benchmark ({self.engine} scheduler): {self.load}",
            f"   {self.num_requests:,} requests in {self.duration_s:,.2f} s: {self.request_throughput:,.2f} req/s, "
            f"{self.output_tokens_per_second:,.0f} output tokens/s, {self.total_tokens_per_second:,.0f} total tokens/s",
            row("TTFT", self.ttft),
            row("TPOT", self.tpot),
            row("ITL", self.itl),
            row("E2E", self.e2e),
            f"   {waited}; peak {self.peak_running:,} running; {self.preemptions:,} preemption(s)",
            f"   scheduler: {self.source}; {self.steps:,} steps simulated",
        ]

    def contract(self) -> dict[str, object]:
        """The JSON object `capplan estimate --json` shows under `simulation`."""
        return {
            "load": self.load,
            "engine": self.engine,
            "duration_s": round(self.duration_s, 3),
            "request_throughput": round(self.request_throughput, 3),
            "output_tokens_per_second": round(self.output_tokens_per_second, 1),
            "total_tokens_per_second": round(self.total_tokens_per_second, 1),
            "ttft": self.ttft.contract(),
            "tpot": self.tpot.contract(),
            "itl": self.itl.contract(),
            "e2e": self.e2e.contract(),
            "mean_queue_ms": round(self.mean_queue_ms, 3),
            "preemptions": self.preemptions,
            "peak_running": self.peak_running,
            "queued": self.queued,
        }


def reported_speed(steady: Performance, sim: ServingResult) -> Performance:
    """What `capplan estimate --concurrency` reports where the closed loop at that concurrency was simulated (and
    `--burst` / `--request-rate` without it, their benchmark): the steady state's figures with TPOT, TTFT and output
    tokens/s the simulation's means (`SIMULATED_SPEED_METRICS`).
    A closed loop's TPOT carries the prefills of the requests that join it, which the steady-state formula leaves
    out; its TTFT is where a request waits behind the others' prompts: a benchmark's clients start together, and
    with equal lengths they finish together and send the next prompts together, so each wave of prompts queues
    for the token budget (the steady state's, one prompt beside a running batch, is the wave's first request at
    best). With speculative decoding, which reshapes the steps the simulation schedules as plain decode steps, the
    steady state's figures stay."""
    if steady.speculation is not None:
        return steady
    return replace(
        steady, tpot_ms=sim.tpot.mean_ms, ttft_ms=sim.ttft.mean_ms, output_tokens_per_second=sim.output_tokens_per_second
    )
