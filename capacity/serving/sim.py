"""A discrete-event simulation of one replica's scheduler, step by step, on capplan's step cost.

The clock advances by scheduler steps. Each step the engine's rules (`capacity.serving.rules`) pick which
requests run and how many new tokens each computes (a decode 1, a prefill chunk up to the token budget),
allocate their KV units from the pool the memory estimate sized (blocks for vLLM and TensorRT-LLM, token
pages for SGLang: `Estimate.pool`, charged per request as `PoolTerms.sequence_units` of its tokens, so a
request grows a block at each block boundary), and evict (vLLM: recompute; SGLang: retract) when a request
cannot grow. A step lasts `capacity.performance.replica_step_seconds` of its new tokens, its sequences and
their mean context: the KV a step reads is the sum of the sequences' contexts (mean x batch, what
`step_bytes` takes), its attention FLOPs the sum of each new token's context (mean per token).

Runs of decode steps where nothing else can happen (no arrival that could be admitted, no completion, no
eviction) are advanced in bulk: the step time over the run is piecewise linear in the context, so the run
is summed in closed form over linear pieces found by bisection, with the same step cost. `bulk=False`
takes every step one at a time (the baseline the bulk path is tested and benchmarked against).

Left out: prefix caching (benchmarks send random prompts), speculative decoding, SGLang's mixed chunk and
decaying new-token ratio (fixed-length requests reserve their whole output), the SWA second pool,
pipeline-parallel micro-batches (a step passes every stage), and windowed layers' reads taken at the mean
context rather than per sequence.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterator

from capacity.estimate import Estimate
from capacity.performance import PerfEfficiency, PerfInputs, replica_step_seconds
from capacity.pool import PoolTerms
from capacity.serving.result import Segment, ServingResult, distribution_s, segment_distribution_s
from capacity.serving.rules import Admission, Eviction, SchedulerRules, StepShape, scheduler_rules
from capacity.serving.workload import Load, LoadKind
from capacity.spec import SpecError

LINEAR_TOLERANCE = 1e-12  # relative: a run of step times is one linear piece when its probes lie on the line


class _Request:
    """One request's progress: tokens whose KV is computed, tokens generated, units held."""

    __slots__ = (
        "computed",
        "enqueued",
        "finished_at",
        "first_token_at",
        "generated",
        "index",
        "last_token_at",
        "output",
        "prompt",
        "scheduled_at",
        "units",
    )

    def __init__(self, index: int, prompt: int, output: int, enqueued: float) -> None:
        self.index = index
        self.prompt = prompt
        self.output = output
        self.enqueued = enqueued
        self.computed = 0  # tokens whose KV is in the cache
        self.generated = 0  # output tokens sampled
        self.units = 0  # KV units held
        self.scheduled_at = -1.0
        self.first_token_at = -1.0
        self.last_token_at = -1.0
        self.finished_at = -1.0

    @property
    def pending(self) -> int:
        """New tokens before the next sample: the prompt (and output so far, after an eviction), or 1."""
        return self.prompt + self.generated - self.computed


class UnitCounter:
    """Units a request holding T tokens is charged, `PoolTerms.sequence_units` in Python integers:
    `fixed + per_block x cdiv(T, bs) + sum(n x cdiv(min(held + in_flight, T), bs_j))` (a test holds the two
    equal), with what the simulation asks of it often: a decode's need, and a representative T that grows
    alike (a windowed term stops growing past its cap, the rest depends on T modulo the block)."""

    __slots__ = ("block", "cap", "fixed", "per_block", "windowed")

    def __init__(self, terms: PoolTerms) -> None:
        self.fixed = int(terms.fixed_units)
        self.per_block = int(terms.per_block_groups)
        self.block = max(int(terms.block_size), 1)
        in_flight = int(terms.in_flight_tokens)
        self.windowed = tuple((int(n), int(held) + in_flight, max(int(bs), 1)) for n, held, bs in terms.windowed)
        top = max((cap for _, cap, _ in self.windowed), default=0)
        self.cap = -(-top // self.block) * self.block  # past it, growth depends on T modulo the block only

    def __call__(self, tokens: int) -> int:
        units = self.fixed + self.per_block * -(-tokens // self.block)
        for n, cap, bs in self.windowed:
            units += n * -(-min(cap, tokens) // bs)
        return units

    def decode_need(self, tokens: int) -> int:
        """units(T + 1) - units(T): a block for each group whose last block is full (a windowed group
        only below its cap)."""
        need = self.per_block if tokens % self.block == 0 else 0
        for n, cap, bs in self.windowed:
            if tokens < cap and tokens % bs == 0:
                need += n
        return need

    def growth_key(self, tokens: int) -> int:
        """A token count whose growth over any k tokens equals that of `tokens`."""
        return tokens if tokens < self.cap else self.cap + tokens % self.block


class _Replica:
    """The scheduler's state and its steps; `run` drives it to the last completion."""

    def __init__(
        self,
        rules: SchedulerRules,
        step_s: Callable[[int, int, float, float], float],
        units: UnitCounter,
        load: Load,
        request_overhead_s: float,
        bulk: bool,
    ) -> None:
        self.rules = rules
        self.step_s = step_s
        self.units = units
        self.load = load
        self.overhead_s = request_overhead_s
        self.bulk = bulk
        self.free = rules.capacity_units
        self.now = 0.0
        self.waiting: deque[_Request] = deque()
        self.running: list[_Request] = []
        self.chunked: _Request | None = None  # SGLang: the request whose prefill continues next batch
        self.arrivals: list[tuple[float, int]] = []  # heap of (enqueue time, index)
        self.pairs, times = load.requests()
        self.requests: list[_Request] = []
        for t in times:
            self._arrive(t)
        self.done: list[_Request] = []
        self.itl: list[Segment] = []  # runs of decode steps in bulk: linear pieces of gaps
        self.itl_points: dict[float, int] = {}  # single gaps and how many tokens had them
        self.preemptions = self.peak_running = self.steps = self.bulk_steps = 0
        self.queued = False
        self.reserved_total = 0  # SGLang / TensorRT-LLM: units the holders reserved
        self.fixed_reservations = max(o for _, o in self.pairs) <= rules.reserve_clip_tokens
        self.blocked = False  # the queue's head could not be admitted in the last step (memory or slots)
        self.steady = False  # every running request sampled at the last step's end, nothing else changed

    # -- arrivals and completions ---------------------------------------------------------------------
    def _arrive(self, at: float) -> None:
        index = len(self.requests)
        prompt, output = self.pairs[index]
        request = _Request(index, prompt, output, at + self.overhead_s)
        self.requests.append(request)
        heapq.heappush(self.arrivals, (request.enqueued, index))

    def _admit_arrivals(self) -> None:
        while self.arrivals and self.arrivals[0][0] <= self.now:
            self.waiting.append(self.requests[heapq.heappop(self.arrivals)[1]])

    def _finish(self, request: _Request) -> None:
        request.finished_at = self.now
        self._hold(request, -1)
        self.free += request.units
        request.units = 0
        self.done.append(request)
        closed = self.load.kind is LoadKind.CLOSED
        if closed and len(self.requests) < self.load.num_requests:
            self._arrive(self.now)

    def _evict(self, request: _Request) -> None:
        """Free a running request's KV; it waits at the head of the queue to recompute what it had."""
        self._hold(request, -1)
        self.free += request.units
        request.units = 0
        request.computed = 0
        self.preemptions += 1
        self.waiting.appendleft(request)

    # -- admission ------------------------------------------------------------------------------------
    def _reservation(self, request: _Request) -> int:
        """Units a request holds or has reserved: its tokens plus the output still to come (clipped)."""
        ahead = min(request.output - request.generated, self.rules.reserve_clip_tokens)
        return self.units(request.prompt + request.generated + ahead)

    def _reserved(self, holders: list[_Request]) -> int:
        """Units the holders hold or have reserved (SGLang / TensorRT-LLM admission; vLLM reserves none).
        Where no output exceeds the clip a reservation is units(prompt + output), fixed from admission to
        completion, so the running total kept at admission, completion and eviction is the sum."""
        if self.rules.admission is Admission.PROMPT or not self.waiting:
            return 0
        if self.fixed_reservations:
            return self.reserved_total
        return sum(self._reservation(r) for r in holders)

    def _hold(self, request: _Request, sign: int) -> None:
        """A request starts (+1) or stops (-1) holding its reservation."""
        if self.rules.admission is Admission.PROMPT_AND_OUTPUT:
            self.reserved_total += sign * self._reservation(request)

    def _admissible(self, request: _Request, reserved: int) -> bool:
        """Whether the queue's head may start: vLLM needs its whole prompt free; SGLang and TensorRT-LLM
        its prompt and output beside what the running requests reserved (`_reserved`)."""
        if self.rules.admission is Admission.PROMPT:
            return self.units(request.prompt + request.generated) <= self.free
        return reserved + self._reservation(request) <= self.rules.capacity_units

    def _take(self, request: _Request, tokens: int) -> bool:
        """Allocate the units `tokens` more computed tokens need; False when the pool is short."""
        need = self.units(request.computed + tokens) - request.units
        if need > self.free:
            return False
        self.free -= need
        request.units += need
        return True

    # -- one step -------------------------------------------------------------------------------------
    def _schedule_mixed(self) -> list[tuple[_Request, int]]:
        """vLLM V1: running requests first (decodes and prefill chunks), then waiting ones in the
        leftover budget; the newest running request is preempted when a block cannot be had."""
        budget = self.rules.token_budget
        plan: list[tuple[_Request, int]] = []
        units = self.units
        running = self.running
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            request = running[i]
            computed = request.computed
            tokens = request.prompt + request.generated - computed
            if tokens > budget:
                tokens = budget
            # a decode takes a block when its last one is full (r.units == units(r.computed) while running)
            need = units.decode_need(computed) if tokens == 1 else units(computed + tokens) - request.units
            if need > self.free:
                preempted = True
                if not self._make_room(request, need):
                    break
            self.free -= need
            request.units += need
            plan.append((request, tokens))
            budget -= tokens
            i += 1
        self.blocked = False
        if not preempted:
            plan.extend(self._admissions(self.running, budget))
        return plan

    def _make_room(self, request: _Request, need: int) -> bool:
        """Preempt the newest running requests until `need` units are free; False when the request
        itself was the newest (vLLM: it cannot be scheduled this step)."""
        if self.rules.eviction is Eviction.NEVER or len(self.running) == 1:
            raise SpecError(f"a request of {request.prompt + request.output:,} tokens does not fit the KV pool")
        while need > self.free:
            victim = self.running.pop()
            self._evict(victim)
            if victim is request:
                return False
        return True

    def _admissions(self, holders: list[_Request], budget: int) -> Iterator[tuple[_Request, int]]:
        """FCFS admissions of the queue's head into `holders` (both step shapes), each with its prompt tokens,
        while `budget` tokens remain; a head that cannot be admitted blocks the queue (`blocked`). The caller
        stops taking them where its own limits end the batch."""
        reserved = self._reserved(holders)
        while self.waiting and budget > 0:
            admitted = self._admit_head(holders, reserved, budget)
            if admitted is None:
                self.blocked = True
                return
            request, tokens, reserved = admitted
            budget -= tokens
            yield request, tokens

    def _admit_head(self, holders: list[_Request], reserved: int, budget: int) -> tuple[_Request, int, int] | None:
        """Admit the head of the queue (FCFS, both step shapes) with up to `budget` of its prompt tokens,
        appended to `holders`, where the running cap, the admission reservation and the free units allow:
        the request, its tokens and the reservation with it; None when the queue is blocked."""
        request = self.waiting[0]
        if len(holders) >= self.rules.max_running or not self._admissible(request, reserved):
            return None
        tokens = min(request.pending, budget)
        if not self._take(request, tokens):
            return None
        reserved += self._reservation(request)
        self._hold(request, +1)
        self.waiting.popleft()
        holders.append(request)
        if request.scheduled_at < 0:
            request.scheduled_at = self.now
        return request, tokens, reserved

    def _schedule_prefill_first(self) -> list[tuple[_Request, int]]:
        """SGLang: a prefill batch (the chunked request first, then FCFS admissions within the chunk and
        prefill limits) when one forms; else a decode batch of every running request, retracting
        (fewest output, longest input first) until it fits."""
        plan = self._prefill_batch()
        if plan:
            return plan
        batch = list(self.running)
        while batch and self._decode_need(batch) > self.free:
            if len(batch) == 1:
                raise SpecError(f"a request of {batch[0].prompt + batch[0].output:,} tokens does not fit the KV pool")
            victim = max(batch, key=lambda r: (-r.generated, r.prompt))  # pop() of the length-sorted list
            batch.remove(victim)
            self.running.remove(victim)
            self._evict(victim)
        for request in batch:
            self._take(request, 1)
        return [(r, 1) for r in batch]

    def _decode_need(self, batch: list[_Request]) -> int:
        """Units a decode step of `batch` takes: a block for each request whose last one is full."""
        need = self.units.decode_need
        return sum(need(r.computed) for r in batch)

    def _prefill_batch(self) -> list[tuple[_Request, int]]:
        rem_chunk = self.rules.token_budget
        rem_input = self.rules.max_prefill_tokens
        plan: list[tuple[_Request, int]] = []
        if self.chunked is not None:
            request = self.chunked
            tokens = min(request.pending, rem_chunk)
            self._take(request, tokens)
            plan.append((request, tokens))
            rem_chunk -= tokens
            rem_input -= tokens
            self.chunked = request if tokens < request.pending else None
        self.blocked = False
        if rem_input > 0 and self.chunked is None:
            for request, tokens in self._admissions(self.running + [r for r, _ in plan], rem_chunk):
                plan.append((request, tokens))
                rem_input -= tokens
                if tokens < request.pending:
                    self.chunked = request
                if rem_input <= 0 or self.chunked is not None:
                    break
        # a request whose prefill ends in this batch decodes with the running batch from the next step
        self.running.extend(r for r, n in plan if n == r.pending)
        return plan

    def _step(self) -> bool:
        """One scheduler step; False when nothing could run (the replica idles to the next arrival)."""
        self._admit_arrivals()  # seen by this step's admission: they change nothing past it
        before = len(self.running)
        evicted = self.preemptions
        mixed = self.rules.shape is StepShape.MIXED
        plan = self._schedule_mixed() if mixed else self._schedule_prefill_first()
        if not plan:
            return False
        if self.blocked:
            self.queued = True
        self.peak_running = max(self.peak_running, len(self.running) + (self.chunked is not None))
        duration, decodes = self._duration(plan)
        start = self.now
        self.now += duration
        self.steps += 1
        finished = self._advance(plan, start, duration)
        # steady: the next step is a decode of every running request that nothing this step set in motion
        # can change (a completion frees blocks the admission did not see; an eviction waits at the head)
        steady = not finished and evicted == self.preemptions and self.chunked is None
        if steady and not (decodes and len(plan) == len(self.running) == before):
            now = self.now  # e.g. a prompt admitted whole: it sampled with the others
            steady = all(r.last_token_at == now and r.computed == r.prompt + r.generated - 1 for r in self.running)
        self.steady = steady
        return True

    def _duration(self, plan: list[tuple[_Request, int]]) -> tuple[float, bool]:
        """The step's time, and whether it only decodes (every request one token past its prompt)."""
        tokens = held = 0
        attended = 0.0
        decodes = True
        for request, n in plan:
            computed = request.computed
            tokens += n
            held += computed + n
            if n == 1:
                attended += computed + 1
                decodes = decodes and computed >= request.prompt
            else:
                # each new token attends to the cache up to itself: a chunk of n after c tokens, c + (n + 1) / 2
                attended += n * (computed + (n + 1) / 2)
                decodes = False
        return self.step_s(tokens, len(plan), held / len(plan), attended / tokens), decodes

    def _advance(self, plan: list[tuple[_Request, int]], start: float, duration: float) -> bool:
        """Apply a step: computed tokens, samples at the end of the step, completions."""
        since: dict[float, int] = {}  # gaps by the time of the previous token (most share one)
        finished = False
        for request, tokens in plan:
            request.computed += tokens
            if request.computed < request.prompt + request.generated:
                continue  # a prefill chunk short of the end samples nothing
            request.generated += 1
            if request.first_token_at < 0:
                request.first_token_at = self.now
            else:
                since[request.last_token_at] = since.get(request.last_token_at, 0) + 1
            request.last_token_at = self.now
            if request.generated >= request.output:
                finished = True
        for previous, count in since.items():
            gap = duration if previous == start else self.now - previous
            self.itl_points[gap] = self.itl_points.get(gap, 0) + count
        if finished:
            done = [r for r, _ in plan if r.generated >= r.output and r.finished_at < 0]
            for request in done:
                request.finished_at = self.now  # marked first: the running list is filtered once
            self.running = [r for r in self.running if r.finished_at < 0]
            for request in done:
                self._finish(request)
        return finished

    # -- decode runs in bulk --------------------------------------------------------------------------
    def _bulk_horizon(self) -> int:
        """Decode steps that may run in bulk: before any completion, within the pool, and before an
        arrival that could be admitted."""
        if not (self.bulk and self.steady and self.running) or len(self.running) > self.rules.token_budget:
            return 0
        if self.waiting and not self.blocked:
            return 0
        steps = min(r.output - r.generated for r in self.running) - 1
        if steps < 2:
            return 0
        # running requests by tokens held (r.units == units(r.computed)), grouped where they grow alike
        units = self.units
        contexts: dict[int, int] = {}
        for request in self.running:
            key = units.growth_key(request.computed)
            contexts[key] = contexts.get(key, 0) + 1

        def growth(k: int) -> int:
            return sum(n * (units(c + k) - units(c)) for c, n in contexts.items())

        free = self.free
        if growth(steps) <= free:
            return steps
        if growth(2) > free:  # a pool about to run short (vLLM thrashing): step by step
            return 0
        low, high = 2, 4  # gallop, then bisect: low fits, high does not
        while high < steps and growth(high) <= free:
            low, high = high, 2 * high
        high = min(high, steps)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if growth(mid) <= free else (low, mid)
        return low

    def _bulk(self) -> bool:
        steps = self._bulk_horizon()
        if steps < 2:
            return False
        batch = len(self.running)
        base = sum(r.computed for r in self.running) / batch + 1.0

        def step_time(j: int) -> float:
            return self.step_s(batch, batch, base + j, base + j)

        pieces = _linear_pieces(step_time, 0, steps)
        if self.arrivals and not self.blocked:
            steps = _steps_starting_before(pieces, self.arrivals[0][0] - self.now, steps)
            if steps < 2:
                return False
            pieces = _truncate(pieces, steps)
        total = math.fsum(_piece_sum(p) for p in pieces)
        self.now += total
        self.itl.extend((first, slope, count, batch) for _, count, first, slope in pieces)
        for request in self.running:
            request.computed += steps
            request.generated += steps
            taken = self.units(request.computed) - request.units
            self.free -= taken
            request.units += taken
            request.last_token_at = self.now
        self.steps += steps
        self.bulk_steps += steps
        if self.blocked:
            self.queued = True
        return True

    def run(self) -> None:
        total = self.load.num_requests
        while len(self.done) < total:
            if self._bulk():
                continue
            if self._step():
                continue
            if not self.arrivals:
                head = self.waiting[0] if self.waiting else None
                size = f"{head.prompt + head.output:,} tokens" if head else "a request"
                raise SpecError(f"the scheduler cannot admit {size}: the KV pool is too small")
            self.now = max(self.now, self.arrivals[0][0])
            self.steady = False


# A linear piece of step times: (first step index, steps, time of the first, slope per step).
Piece = tuple[int, int, float, float]


def _linear_pieces(f: Callable[[int], float], j0: int, j1: int) -> list[Piece]:
    """Steps j0..j1-1 as linear pieces of f (piecewise linear in the context: a roofline's max, a window's
    min), split by bisection where probes leave the line."""
    n = j1 - j0
    first = f(j0)
    if n == 1:
        return [(j0, 1, first, 0.0)]
    last = f(j1 - 1)
    slope = (last - first) / (n - 1)
    scale = LINEAR_TOLERANCE * max(abs(first), abs(last))
    probes = {j0 + (n - 1) * k // 4 for k in (1, 2, 3)} - {j0, j1 - 1}
    if all(abs(f(j) - (first + slope * (j - j0))) <= scale for j in probes):
        return [(j0, n, first, slope)]
    mid = (j0 + j1) // 2
    return _linear_pieces(f, j0, mid) + _linear_pieces(f, mid, j1)


def _piece_sum(piece: Piece) -> float:
    _, count, first, slope = piece
    return count * first + slope * count * (count - 1) / 2


def _truncate(pieces: list[Piece], steps: int) -> list[Piece]:
    out: list[Piece] = []
    for start, count, first, slope in pieces:
        if start >= steps:
            break
        out.append((start, min(count, steps - start), first, slope))
    return out


def _steps_starting_before(pieces: list[Piece], horizon_s: float, steps: int) -> int:
    """How many steps of the run start before `horizon_s` (step 0 starts at 0): the run stops where a
    step would start at or after the next arrival."""
    low, high = 1, steps  # step low - 1 starts before the horizon
    while low < high:
        mid = (low + high + 1) // 2
        if math.fsum(_piece_sum(p) for p in _truncate(pieces, mid - 1)) < horizon_s:
            low = mid
        else:
            high = mid - 1
    return low


def simulate(
    est: Estimate,
    inputs: PerfInputs,
    load: Load,
    eff: PerfEfficiency,
    *,
    rules: SchedulerRules | None = None,
    bulk: bool = True,
) -> ServingResult:
    """Run `load` against one replica of the estimate's deployment (`inputs` = `perf_inputs(model, est,
    gpu)`, `eff` = `efficiency_for(engine, gpu)`); `bulk=False` takes every decode step one at a time
    (the same results, slower)."""
    rules = rules or scheduler_rules(est)
    if rules.capacity_units <= 0:
        raise SpecError("the deployment has no KV pool: nothing to simulate")

    def step_s(tokens: int, batch: int, context: float, attended: float) -> float:
        return replica_step_seconds(inputs, tokens, batch, context, eff, attended)

    replica = _Replica(rules, step_s, UnitCounter(est.pool.terms()), load, eff.request_overhead_s, bulk)
    replica.run()
    return _result(replica, rules, load)


def _result(replica: _Replica, rules: SchedulerRules, load: Load) -> ServingResult:
    done = sorted(replica.done, key=lambda r: r.index)
    duration = max(r.finished_at for r in done)
    outputs = sum(r.output for r in done)
    inputs = sum(r.prompt for r in done)
    arrival = [r.enqueued - replica.overhead_s for r in done]
    ttft = [r.first_token_at - a for r, a in zip(done, arrival, strict=True)]
    e2e = [r.finished_at - a for r, a in zip(done, arrival, strict=True)]
    tpot = [(e - t) / (r.output - 1) for r, t, e in zip(done, ttft, e2e, strict=True) if r.output > 1]
    queue = [r.scheduled_at - r.enqueued for r in done]
    return ServingResult(
        engine=rules.engine.value,
        load=load.describe(),
        num_requests=len(done),
        duration_s=duration,
        request_throughput=len(done) / duration,
        output_tokens_per_second=outputs / duration,
        total_tokens_per_second=(inputs + outputs) / duration,
        ttft=distribution_s(ttft),
        tpot=distribution_s(tpot),
        itl=segment_distribution_s(replica.itl + [(gap, 0.0, 1, n) for gap, n in replica.itl_points.items()]),
        e2e=distribution_s(e2e),
        mean_queue_ms=math.fsum(queue) / len(queue) * 1e3,
        preemptions=replica.preemptions,
        peak_running=replica.peak_running,
        queued=replica.queued,
        steps=replica.steps,
        bulk_steps=replica.bulk_steps,
        source=rules.source,
        ttft_by_request_s=tuple(ttft),
    )
