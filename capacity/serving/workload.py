"""The load a benchmark puts on one replica: when requests arrive and how long they are.

Three shapes, as the public benchmarks run them (`vllm bench serve`, SGLang's `bench_serving`):

- a closed loop at concurrency C (`--max-concurrency C --num-prompts N`): C requests at t = 0, each
  finished request replaced at once until N have been sent;
- an open loop at a request rate (`--request-rate R`): Poisson arrivals, exponential gaps drawn from a
  seeded generator, so a run is reproducible;
- a burst (`--request-rate inf`): all N at t = 0.

Lengths are fixed, drawn uniformly in [L x (1 - r), L x (1 + r)] (vLLM's random dataset and its
`--random-range-ratio`), or given as an explicit list (cycled). Pure: no I/O, no global state.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import StrEnum

from capacity.spec import SpecError


class LoadKind(StrEnum):
    """How requests arrive."""

    CLOSED = "closed"  # at most `concurrency` in flight; a finished request is replaced at once
    POISSON = "poisson"  # open loop: exponential gaps at `request_rate` per second
    BURST = "burst"  # every request at t = 0


@dataclass(frozen=True, slots=True)
class Lengths:
    """Input and output tokens per request: fixed, uniform within a range ratio, or an explicit list."""

    input_tokens: int
    output_tokens: int
    range_ratio: float = 0.0  # vLLM's --random-range-ratio: uniform in [L(1 - r), L(1 + r)]
    explicit: tuple[tuple[int, int], ...] = ()  # (input, output) pairs, cycled; overrides the rest

    def __post_init__(self) -> None:
        if not 0.0 <= self.range_ratio < 1.0:
            raise SpecError(f"range ratio must be in [0, 1), got {self.range_ratio}")
        pairs = self.explicit or ((self.input_tokens, self.output_tokens),)
        if any(i < 1 or o < 1 for i, o in pairs):
            raise SpecError("input and output lengths must be positive")

    def draw(self, count: int, rng: random.Random) -> list[tuple[int, int]]:
        """`count` (input, output) pairs; the uniform draw follows vLLM's RandomDataset bounds."""
        if self.explicit:
            return [self.explicit[i % len(self.explicit)] for i in range(count)]
        if self.range_ratio == 0.0:
            return [(self.input_tokens, self.output_tokens)] * count

        def bounds(length: int) -> tuple[int, int]:
            return max(1, math.floor(length * (1 - self.range_ratio))), math.ceil(length * (1 + self.range_ratio))

        (i_lo, i_hi), (o_lo, o_hi) = bounds(self.input_tokens), bounds(self.output_tokens)
        return [(rng.randint(i_lo, i_hi), rng.randint(o_lo, o_hi)) for _ in range(count)]


@dataclass(frozen=True, slots=True)
class Load:
    """A benchmark run: `num_requests` requests of `lengths`, arriving as `kind` says."""

    kind: LoadKind
    num_requests: int
    lengths: Lengths
    concurrency: int = 0  # CLOSED: requests in flight
    request_rate: float = 0.0  # POISSON: requests per second
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_requests < 1:
            raise SpecError(f"a load needs at least one request, got {self.num_requests}")
        if self.kind is LoadKind.CLOSED and self.concurrency < 1:
            raise SpecError(f"a closed loop needs a concurrency >= 1, got {self.concurrency}")
        if self.kind is LoadKind.POISSON and not self.request_rate > 0:
            raise SpecError(f"an open loop needs a request rate > 0, got {self.request_rate}")

    @classmethod
    def closed(cls, concurrency: int, num_requests: int, lengths: Lengths, seed: int = 0) -> Load:
        return cls(LoadKind.CLOSED, num_requests, lengths, concurrency=concurrency, seed=seed)

    @classmethod
    def poisson(cls, request_rate: float, num_requests: int, lengths: Lengths, seed: int = 0) -> Load:
        return cls(LoadKind.POISSON, num_requests, lengths, request_rate=request_rate, seed=seed)

    @classmethod
    def burst(cls, num_requests: int, lengths: Lengths, seed: int = 0) -> Load:
        return cls(LoadKind.BURST, num_requests, lengths, seed=seed)

    def requests(self) -> tuple[list[tuple[int, int]], list[float]]:
        """(the (input, output) pairs, the open-loop arrival times in seconds). A closed loop's
        arrivals are decided by completions: its list holds t = 0 for the first C only."""
        rng = random.Random(self.seed)
        pairs = self.lengths.draw(self.num_requests, rng)
        if self.kind is LoadKind.POISSON:
            # vLLM's get_request yields a request, then sleeps an exponential gap: the first is at t = 0
            times = [0.0]
            for _ in range(self.num_requests - 1):
                times.append(times[-1] + rng.expovariate(self.request_rate))
            return pairs, times
        if self.kind is LoadKind.CLOSED:
            return pairs, [0.0] * min(self.concurrency, self.num_requests)
        return pairs, [0.0] * self.num_requests

    def describe(self) -> str:
        lengths = self.lengths
        size = f"{lengths.input_tokens} in / {lengths.output_tokens} out"
        if lengths.explicit:
            size = f"{len(lengths.explicit)} given lengths"
        elif lengths.range_ratio:
            size += f" (range ratio {lengths.range_ratio})"
        if self.kind is LoadKind.CLOSED:
            return f"closed loop at concurrency {self.concurrency}, {self.num_requests} requests of {size}"
        if self.kind is LoadKind.POISSON:
            return f"Poisson at {self.request_rate:g} req/s, {self.num_requests} requests of {size}"
        return f"burst of {self.num_requests} requests of {size}"
