"""Fit the performance model's efficiency factors on measurements; score them out of sample.

Pure (numpy, no I/O). Each measured metric of a benchmark row becomes an `Observation` whose
prediction is a closed form of the efficiency factors, because every step time of
`capacity.performance` is `max(weight bytes / (e_mem x bandwidth), GEMM flops / (e_compute x peak))
+ max(KV bytes / (e_mem x bandwidth), attention flops / (e_compute x peak)) + comm + o`: the bytes and
FLOPs terms are computed once per row (at efficiency 1), and a fit only rescales them.

The factors (`Params`): achievable memory bandwidth and compute per GPU vendor class, and a per-step
engine overhead per engine: few, shared across models and GPUs. `fit` minimises the mean absolute
log error of all observations (a robust, scale-free loss) by coordinate search;
`leave_one_group_out` refits without each source group (a benchmark campaign, a thread) and predicts
that group, which is the accuracy a new user's fleet can expect.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from capacity.performance import PerfEfficiency

METRICS = ("tpot", "ttft", "output_throughput", "batch_latency")
_ALLREDUCE_LATENCY_S = PerfEfficiency().allreduce_latency_s  # before fitting


@dataclass(frozen=True, slots=True)
class StepTerms:
    """One engine step at efficiency 1: memory seconds, compute seconds, communication seconds."""

    memory_s: float
    compute_s: float
    comm_s: float
    # the same step taken apart by operation (evaluation/step_cost_candidate.py fits a form over them):
    weight_s: float = 0.0  # of memory_s: the weights (the experts the step touches)
    kv_s: float = 0.0  # of memory_s: the KV cache and state the decoding sequences read
    gemm_s: float = 0.0  # of compute_s: 2 x active parameters x tokens
    attention_s: float = 0.0  # of compute_s: QK^T and AV (the prefill's quadratic term)
    comm_bytes_s: float = 0.0  # of comm_s: the ring all-reduces' bytes over the link
    comm_calls: float = 0.0  # all-reduces in the step (2 per layer at TP > 1)
    sequences: float = 0.0  # sequences in the step (decoding, plus the one prefilling)
    tokens: float = 0.0  # new tokens in the step


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured number and how the model predicts it from the efficiency factors.

    prediction = decode_steps x pp x step(decode) + prefill_repeats x pp x sum over chunks of step(chunk),
    or for throughput: tokens / that time (pipeline hops are left out: a few microseconds)."""

    row_id: str
    group: str
    metric: str  # one of METRICS
    measured: float
    vendor: str  # nvidia | amd: the efficiency class
    engine: str
    decode: StepTerms | None  # the steady-state decode step (TPOT)
    decode_steps: float  # decode steps in the predicted time (TPOT: 1; a request: its output tokens)
    prefill: tuple[StepTerms, ...] = ()  # the prefill chunks in the predicted time
    prefill_repeats: float = 1.0  # prompts prefilled in the predicted time (throughput: a wave of B)
    # a closed loop's wave of prompts sent together (`capacity.serving.closed_loop`): its steps, and how many times
    # they count (the share of the wave a request waits for; negative where a TPOT is the rest of the end to end)
    wave: tuple[StepTerms, ...] = ()
    wave_repeats: float = 0.0
    pp: int = 1
    tokens: float = 0.0  # throughput: tokens produced in the predicted time (0: a latency metric)
    requests: float = 0.0  # per-request fixed latencies in the predicted time (TTFT: 1)
    tags: tuple[str, ...] = field(default_factory=tuple)  # features: moe, tp>1, fp8, ...


@dataclass(frozen=True, slots=True)
class Params:
    memory_bandwidth: dict[str, float]  # per vendor class
    compute: dict[str, float]
    step_overhead_s: dict[str, float]  # per engine
    # per engine: what a request waits before its first prefill step (HTTP, tokenization, scheduling)
    request_overhead_s: dict[str, float] = field(default_factory=dict)
    # one value ("*"): the latency of one tensor-parallel all-reduce beyond its bytes over the link
    allreduce_latency_s: dict[str, float] = field(default_factory=lambda: {"*": _ALLREDUCE_LATENCY_S})

    def efficiency(self, vendor: str, engine: str, source: str) -> PerfEfficiency:
        return PerfEfficiency(
            memory_bandwidth=self.memory_bandwidth.get(vendor, 0.8),
            compute=self.compute.get(vendor, 0.6),
            step_overhead_s=self.step_overhead_s.get(engine, 0.0015),
            allreduce_latency_s=self.allreduce_latency_s.get("*", _ALLREDUCE_LATENCY_S),
            request_overhead_s=self.request_overhead_s.get(engine, 0.0),
            source=source,
        )


def default_params(observations: Iterable[Observation]) -> Params:
    obs = list(observations)
    vendors = sorted({o.vendor for o in obs}) or ["nvidia"]
    engines = sorted({o.engine for o in obs}) or ["vllm"]
    return Params(
        memory_bandwidth=dict.fromkeys(vendors, 0.8),
        compute=dict.fromkeys(vendors, 0.6),
        step_overhead_s=dict.fromkeys(engines, 0.0015),
        request_overhead_s=dict.fromkeys(engines, 0.0),
    )


STEP_COLUMNS = ("weight_s", "kv_s", "gemm_s", "attention_s", "comm_bytes_s", "comm_calls", "sequences")


@dataclass(slots=True)
class StepArrays:
    """Observations flattened into arrays: one row per step term, summed per observation. `cols` holds
    the StepTerms fields named in STEP_COLUMNS, one array each (a form over them is fitted here and in
    evaluation/step_cost_candidate.py)."""

    n: int
    measured: np.ndarray
    tokens: np.ndarray
    requests: np.ndarray
    obs_engine: np.ndarray
    term_obs: np.ndarray  # observation index of each step term
    term_weight: np.ndarray  # how many times the term counts (decode steps x pp, or pp)
    cols: dict[str, np.ndarray]
    term_vendor: np.ndarray  # index into vendors
    term_engine: np.ndarray
    vendors: list[str]
    engines: list[str]


def step_arrays(obs: Sequence[Observation]) -> StepArrays:
    vendors = sorted({o.vendor for o in obs})
    engines = sorted({o.engine for o in obs})
    rows: list[tuple[int, float, StepTerms, int, int]] = []
    for i, o in enumerate(obs):
        v, e = vendors.index(o.vendor), engines.index(o.engine)
        if o.decode is not None and o.decode_steps:
            rows.append((i, o.decode_steps * o.pp, o.decode, v, e))
        for chunk in o.prefill:
            rows.append((i, float(o.pp) * o.prefill_repeats, chunk, v, e))
        for step in o.wave:
            rows.append((i, float(o.pp) * o.wave_repeats, step, v, e))
    return StepArrays(
        n=len(obs),
        measured=np.array([o.measured for o in obs], dtype=float),
        tokens=np.array([o.tokens for o in obs], dtype=float),
        requests=np.array([o.requests for o in obs], dtype=float),
        obs_engine=np.array([engines.index(o.engine) for o in obs], dtype=int),
        term_obs=np.array([r[0] for r in rows], dtype=int),
        term_weight=np.array([r[1] for r in rows], dtype=float),
        cols={c: np.array([getattr(r[2], c) for r in rows], dtype=float) for c in STEP_COLUMNS},
        term_vendor=np.array([r[3] for r in rows], dtype=int),
        term_engine=np.array([r[4] for r in rows], dtype=int),
        vendors=vendors,
        engines=engines,
    )


def _predict(a: StepArrays, p: Params) -> np.ndarray:
    mem = np.array([p.memory_bandwidth.get(v, 0.8) for v in a.vendors])[a.term_vendor]
    comp = np.array([p.compute.get(v, 0.6) for v in a.vendors])[a.term_vendor]
    over = np.array([p.step_overhead_s.get(e, 0.0015) for e in a.engines])[a.term_engine]
    # capacity.performance.step_seconds: the linear layers' roofline, then attention's, then the all-reduces
    k = a.cols
    linear = np.maximum(k["weight_s"] / mem, k["gemm_s"] / comp)
    attention = np.maximum(k["kv_s"] / mem, k["attention_s"] / comp)
    latency = p.allreduce_latency_s.get("*", _ALLREDUCE_LATENCY_S)
    step = linear + attention + k["comm_bytes_s"] + k["comm_calls"] * latency + over
    seconds = np.bincount(a.term_obs, weights=a.term_weight * step, minlength=a.n)
    fixed = np.array([p.request_overhead_s.get(e, 0.0) for e in a.engines])[a.obs_engine]
    seconds = seconds + a.requests * fixed
    with np.errstate(divide="ignore"):
        return np.where(a.tokens > 0, a.tokens / seconds, seconds)


def predict(observations: Sequence[Observation], params: Params) -> np.ndarray:
    """Predicted values in the observations' units (seconds or tokens/s)."""
    return _predict(step_arrays(observations), params)


def _loss(a: StepArrays, p: Params) -> float:
    pred = _predict(a, p)
    return float(np.mean(np.abs(np.log(pred / a.measured))))


_BOUNDS = {
    "memory_bandwidth": (0.2, 1.0),
    "compute": (0.1, 1.0),
    "step_overhead_s": (0.0, 0.03),
    "request_overhead_s": (0.0, 0.5),
    "allreduce_latency_s": (0.0, 0.0001),
}


def fit(observations: Sequence[Observation], start: Params | None = None, sweeps: int = 4) -> Params:
    """Coordinate search on each factor in its plausible range (golden section, then the next)."""
    a = step_arrays(observations)
    params = start or default_params(observations)
    if not observations:
        return params
    for _ in range(sweeps):
        for kind in _BOUNDS:
            for key in list(getattr(params, kind)):
                lo, hi = _BOUNDS[kind]
                best = _golden(partial(_loss_with, a, params, kind, key), lo, hi)
                params = replace(params, **{kind: {**getattr(params, kind), key: best}})
    return params


def _loss_with(a: StepArrays, params: Params, kind: str, key: str, value: float) -> float:
    return _loss(a, replace(params, **{kind: {**getattr(params, kind), key: value}}))


def _golden(f: Callable[[float], float], lo: float, hi: float, steps: int = 28) -> float:
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return float(f"{(a + b) / 2:.5g}")


def leave_one_group_out(
    observations: Sequence[Observation], group_of: Callable[[Observation], str] | None = None
) -> np.ndarray:
    """Each observation predicted by a fit that never saw its source group (`group_of`: another unit,
    such as the source family, the coarser owner of several groups)."""
    key = group_of or (lambda o: o.group)
    out = np.full(len(observations), np.nan)
    groups = sorted({key(o) for o in observations})
    for group in groups:
        train = [o for o in observations if key(o) != group]
        test_index = [i for i, o in enumerate(observations) if key(o) == group]
        if not train:
            continue
        params = fit(train)
        out[test_index] = predict([observations[i] for i in test_index], params)
    return out


@dataclass(frozen=True, slots=True)
class Accuracy:
    n: int
    median_abs_error_pct: float
    within_15_pct: float  # share of observations within 15 %
    within_25_pct: float


def accuracy(measured: np.ndarray, predicted: np.ndarray) -> Accuracy:
    ok = np.isfinite(predicted) & (predicted > 0)
    errors = np.abs(predicted[ok] / measured[ok] - 1) * 100
    if not len(errors):
        return Accuracy(0, math.nan, math.nan, math.nan)
    return Accuracy(
        n=len(errors),
        median_abs_error_pct=float(np.median(errors)),
        within_15_pct=float(np.mean(errors <= 15)),
        within_25_pct=float(np.mean(errors <= 25)),
    )
