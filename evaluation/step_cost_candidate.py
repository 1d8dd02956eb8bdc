"""A step cost built from its operations, fitted and scored beside the shipped one (issue 21, item 2).

NOT WIRED: capplan's step cost is `capacity.performance.step_seconds`; this module is the study of a
candidate form and of where the shipped one misses (`python -m tools.step_cost_study`).

The shipped form, per engine step on a rank (efficiencies per GPU vendor class, overheads per engine):

    step = max(bytes / (e_mem x BW), FLOPs / (e_compute x peak)) + all-reduces + o_step

The candidate, each operation on its own roofline, the CPU's cost beside the GPU's:

    gemm      = max(weight bytes / (e_weights x BW), 2 x active params x tokens / (e_compute x peak))
    attention = max(KV bytes / (e_kv x BW), attention FLOPs / (e_compute x peak))
    comm      = all-reduce bytes / link + calls x allreduce_latency      (calls = 2 x layers at TP > 1)
    gpu       = gemm + attention + comm
    cpu       = o_step + o_seq x sequences in the step                   (scheduling, sampling, input prep)
    step      = gpu + cpu - hidden x min(gpu, cpu)                        (hidden: the engine overlaps them)

Per vendor class: e_weights, e_kv, e_compute; one allreduce_latency; per engine: o_step, o_seq, hidden and
the request overhead before the first prefill step. Fitted like `capacity.perf_fit.fit` (mean absolute log
error, coordinate golden-section search) and scored by leaving out a whole source FAMILY at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from capacity.perf_fit import Observation, Params, StepArrays, _golden, predict, step_arrays

# (kind, bounds) of each coefficient; kinds keyed per vendor class, per engine, or global ("*")
BOUNDS: dict[str, tuple[float, float]] = {
    "e_weights": (0.2, 1.0),
    "e_kv": (0.2, 1.5),
    "e_compute": (0.1, 1.0),
    "allreduce_latency_s": (0.0, 0.0001),
    "o_step_s": (0.0, 0.03),
    "o_seq_s": (0.0, 0.0002),
    "hidden": (0.0, 1.0),
    "request_overhead_s": (0.0, 0.5),
}
PER_VENDOR = ("e_weights", "e_compute")
PER_ENGINE = ("o_step_s", "o_seq_s", "hidden", "request_overhead_s")
START = {
    "e_weights": 0.8,
    "e_kv": 1.0,
    "e_compute": 0.6,
    "allreduce_latency_s": 0.000015,
    "o_step_s": 0.0015,
    "o_seq_s": 0.0,
    "hidden": 0.0,
    "request_overhead_s": 0.0,
}


@dataclass(frozen=True, slots=True)
class Candidate:
    """The candidate's coefficients: {name: {vendor | engine | "*": value}}; `fixed` names stay at START."""

    values: dict[str, dict[str, float]]
    fixed: tuple[str, ...] = field(default_factory=tuple)
    shared: tuple[str, ...] = field(default_factory=tuple)  # one value for every vendor / engine

    def get(self, name: str, key: str) -> float:
        """A class the fit never saw (a left-out family's engine or vendor) takes NVIDIA's value, or the
        mean over the engines fitted, as `capacity.performance.efficiency_for` falls back."""
        return _fallback(self.values[name], key, START[name])


def _fallback(values: dict[str, float], key: str, default: float) -> float:
    if key in values:
        return values[key]
    if "nvidia" in values:
        return values["nvidia"]
    return float(np.mean(list(values.values()))) if values else default


def _per(t: StepArrays, c: Candidate, name: str) -> np.ndarray:
    if name in c.shared:
        return np.full(len(t.term_obs), c.get(name, "*"))
    if name in PER_VENDOR:
        return np.array([c.get(name, v) for v in t.vendors])[t.term_vendor]
    if name in PER_ENGINE:
        return np.array([c.get(name, e) for e in t.engines])[t.term_engine]
    return np.full(len(t.term_obs), c.get(name, "*"))


def _step(t: StepArrays, c: Candidate) -> np.ndarray:
    k = t.cols
    e_c = _per(t, c, "e_compute")
    e_w = _per(t, c, "e_weights")
    gemm = np.maximum(k["weight_s"] / e_w, k["gemm_s"] / e_c)
    attention = np.maximum(k["kv_s"] / (e_w * _per(t, c, "e_kv")), k["attention_s"] / e_c)
    comm = k["comm_bytes_s"] + k["comm_calls"] * _per(t, c, "allreduce_latency_s")
    gpu = gemm + attention + comm
    cpu = _per(t, c, "o_step_s") + _per(t, c, "o_seq_s") * k["sequences"]
    return gpu + cpu - _per(t, c, "hidden") * np.minimum(gpu, cpu)


def _predict(t: StepArrays, c: Candidate) -> np.ndarray:
    seconds = np.bincount(t.term_obs, weights=t.term_weight * _step(t, c), minlength=t.n)
    fixed = _per_obs(t, c, "request_overhead_s")
    seconds = seconds + t.requests * fixed
    with np.errstate(divide="ignore"):
        return np.where(t.tokens > 0, t.tokens / seconds, seconds)


def _per_obs(t: StepArrays, c: Candidate, name: str) -> np.ndarray:
    if name in c.shared:
        return np.full(t.n, c.get(name, "*"))
    return np.array([c.get(name, e) for e in t.engines])[t.obs_engine]


def predict_candidate(observations: Sequence[Observation], c: Candidate) -> np.ndarray:
    return _predict(step_arrays(observations), c)


def start(observations: Sequence[Observation], fixed: tuple[str, ...] = (), shared: tuple[str, ...] = ()) -> Candidate:
    vendors = sorted({o.vendor for o in observations}) or ["nvidia"]
    engines = sorted({o.engine for o in observations}) or ["vllm"]
    values: dict[str, dict[str, float]] = {}
    for name, value in START.items():
        keys = ["*"] if name in shared else vendors if name in PER_VENDOR else engines if name in PER_ENGINE else ["*"]
        values[name] = dict.fromkeys(keys, value)
    return Candidate(values, fixed, shared)


def fit_candidate(
    observations: Sequence[Observation], fixed: tuple[str, ...] = (), shared: tuple[str, ...] = (), sweeps: int = 10
) -> Candidate:
    """Coordinate golden-section search of every free coefficient, minimising the mean |log error|."""
    t = step_arrays(observations)
    c = start(observations, fixed, shared)
    if not observations:
        return c
    for _ in range(sweeps):
        for name in START:
            if name in fixed:
                continue
            for key in list(c.values[name]):
                lo, hi = BOUNDS[name]

                def loss(value: float, name: str = name, key: str = key, c: Candidate = c) -> float:
                    trial = Candidate({**c.values, name: {**c.values[name], key: value}}, fixed, shared)
                    return float(np.mean(np.abs(np.log(_predict(t, trial) / t.measured))))

                best = _golden(loss, lo, hi, steps=30)
                c = Candidate({**c.values, name: {**c.values[name], key: best}}, fixed, shared)
    return c


def leave_one_out(
    observations: Sequence[Observation],
    group_of: Callable[[Observation], str],
    fit_and_predict: Callable[[Sequence[Observation], Sequence[Observation]], np.ndarray],
) -> np.ndarray:
    """Each observation predicted by a fit that never saw its group (`group_of`: source group or family)."""
    out = np.full(len(observations), np.nan)
    for group in sorted({group_of(o) for o in observations}):
        train = [o for o in observations if group_of(o) != group]
        test = [i for i, o in enumerate(observations) if group_of(o) == group]
        if train:
            out[test] = fit_and_predict(train, [observations[i] for i in test])
    return out


def shipped_fit_and_predict(train: Sequence[Observation], test: Sequence[Observation]) -> np.ndarray:
    """The shipped form refitted on `train`; classes it never saw fall back as in `Candidate.get`."""
    from capacity.perf_fit import fit

    p = fit(train)
    vendors, engines = {o.vendor for o in test}, {o.engine for o in test}

    def filled(values: dict[str, float], keys: set[str]) -> dict[str, float]:
        return {**{k: _fallback(values, k, 0.0) for k in keys}, **values}

    return predict(
        test,
        Params(
            memory_bandwidth=filled(p.memory_bandwidth, vendors),
            compute=filled(p.compute, vendors),
            step_overhead_s=filled(p.step_overhead_s, engines),
            request_overhead_s=filled(p.request_overhead_s, engines),
            allreduce_latency_s=p.allreduce_latency_s,
        ),
    )


def candidate_fit_and_predict(
    fixed: tuple[str, ...] = (), shared: tuple[str, ...] = (), sweeps: int = 10
) -> Callable[[Sequence[Observation], Sequence[Observation]], np.ndarray]:
    def run(train: Sequence[Observation], test: Sequence[Observation]) -> np.ndarray:
        return predict_candidate(test, fit_candidate(train, fixed, shared, sweeps))

    return run


@dataclass(frozen=True, slots=True)
class Score:
    n: int
    median_abs_pct: float
    p90_abs_pct: float
    median_signed_pct: float


def score(measured: np.ndarray, predicted: np.ndarray) -> Score:
    ok = np.isfinite(predicted) & (predicted > 0)
    signed = (predicted[ok] / measured[ok] - 1) * 100
    if not len(signed):
        return Score(0, math.nan, math.nan, math.nan)
    return Score(
        len(signed),
        float(np.median(np.abs(signed))),
        float(np.percentile(np.abs(signed), 90)),
        float(np.median(signed)),
    )


# the forms compared: (name, fixed, shared); "full" is the form stated above, the others hold terms out
VARIANTS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("full", (), ()),
    ("no hidden, KV at the weights' share, one o_seq", ("hidden", "e_kv"), ("o_seq_s",)),
    ("ops summed, fitted all-reduce latency only", ("o_seq_s", "hidden", "e_kv"), ()),
    ("one o_seq, one hidden, KV at the weights' share", ("e_kv",), ("o_seq_s", "hidden")),
)
SELECTED_METRICS = ("output_throughput", "tpot")


def _selection_loss(observations: Sequence[Observation], predicted: np.ndarray) -> float:
    """Mean over throughput and TPOT of the median |error| (the switching rule's two metrics)."""
    measured = np.array([o.measured for o in observations])
    losses = []
    for metric in SELECTED_METRICS:
        mask = np.array([o.metric == metric for o in observations])
        if mask.any():
            losses.append(score(measured[mask], predicted[mask]).median_abs_pct)
    return float(np.mean(losses)) if losses else math.inf


def nested_fit_and_predict(
    group_of: Callable[[Observation], str], sweeps: int = 5
) -> Callable[[Sequence[Observation], Sequence[Observation]], np.ndarray]:
    """Choose the variant by leave-one-family-out INSIDE the training families, then fit it on all of them:
    scored by an outer leave-one-family-out, the choice among variants is out of sample too."""

    def run(train: Sequence[Observation], test: Sequence[Observation]) -> np.ndarray:
        best, best_loss = VARIANTS[0], math.inf
        for variant in VARIANTS:
            _, fixed, shared = variant
            inner = candidate_fit_and_predict(fixed, shared, sweeps)
            loss = _selection_loss(train, leave_one_out(train, group_of, inner))
            if loss < best_loss:
                best, best_loss = variant, loss
        _, fixed, shared = best
        print(f"  outer fold without {sorted({group_of(o) for o in test})}: chose {best[0]!r}", flush=True)
        return predict_candidate(test, fit_candidate(train, fixed, shared, sweeps))

    return run
