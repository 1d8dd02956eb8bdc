"""The serving simulation (`capacity.serving`) scored on the public measurements, beside the steady state.

Each measured row becomes the benchmark it ran: a closed loop at its concurrency (`--max-concurrency`), a
burst of its prompts (`--request-rate inf`, offline throughput), Poisson arrivals at its finite rate (rows
the steady-state model cannot score), or a static batch (a burst of the batch); its deployment sized by
`capacity.estimate.estimate` as `evaluation.perf_cv` sizes it, the step cost with the shipped efficiency
factors (`capacity.performance.efficiency_for`). Nothing is fitted: the factors were fitted on the
reference set for the steady-state model and are used here as they are.

Each simulated metric is paired with the steady-state model's prediction of the same row and metric
(`evaluation.perf_cv.predict` with the shipped factors), so a table shows both on the same rows.
Left out: datasets' length distributions (mean lengths, or vLLM's range ratio where the row gives one),
the offline LLM class's larger token budget (the API server's defaults are used), data-parallel replicas.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from capacity.perf_fit import Accuracy, Observation, Params, accuracy, fit, predict
from capacity.performance import PerfEfficiency, efficiency_for, perf_inputs, vendor_class
from capacity.serving import SIMULATED_SPEED_METRICS, Lengths, Load, ServingResult, simulate
from capacity.spec import GpuSku, ModelSpec, SpecError
from evaluation.perf_cv import Skipped, _catalog_resolver, build, family_of, read_rows, shipped_params, sized_row
from evaluation.perf_measurements import PerfMeasurement

DEFAULT_PROMPTS = 1000  # vllm bench serve --num-prompts default
MAX_PROMPTS = 2000  # a row sending more is simulated with this many (the rate settles long before)
STATIC_KINDS = ("static_batch", "static_batch_ttft", "offline_batch_latency")


@dataclass(frozen=True, slots=True)
class SimScore:
    """One measured metric of one row: what it measured, simulated, and what the steady state predicts."""

    row_id: str
    group: str
    engine: str
    regime: str
    metric: str
    measured: float
    simulated: float
    steady: float  # NaN where the steady-state model does not score this row

    @property
    def reported(self) -> float:
        """What `capplan estimate` reports for the row, given its load (`--concurrency`, `--burst` or
        `--request-rate`): TPOT, TTFT and output tokens/s from the simulation of that benchmark, everything else
        (static batches' latency, total tokens/s) from the steady state."""
        benchmark = self.regime != "static batch"
        return self.simulated if benchmark and self.metric in SIMULATED_SPEED_METRICS else self.steady


def regime(row: PerfMeasurement) -> str:
    """Capped client concurrency, all requests at once, a static batch, or Poisson arrivals at a finite rate."""
    if row.benchmark_kind in STATIC_KINDS:
        return "static batch"
    if row.concurrency is not None:
        return "capped concurrency"
    if row.benchmark_kind == "offline_throughput" or (row.request_rate is not None and math.isinf(row.request_rate)):
        return "all at once"
    return "finite rate"


# `Lengths` spreads less than the mean on either side (a length of 0 is no request): SGLang's default range, from 1 to
# L, is simulated as from 1 % to 199 % of its mean
MAX_SPREAD = 0.99


def row_load(row: PerfMeasurement, input_tokens: int, output_tokens: int) -> Load | str:
    """The benchmark the row ran, as a `Load` (or why there is none)."""
    lengths = Lengths(input_tokens, output_tokens, min(row.length_spread, MAX_SPREAD))
    prompts = min(row.num_prompts or DEFAULT_PROMPTS, MAX_PROMPTS)
    kind = regime(row)
    if kind == "static batch":
        batch = row.batch_size or row.concurrency
        return Load.burst(batch, lengths) if batch else "a static batch without its size"
    if kind == "capped concurrency" and row.concurrency is not None:
        return Load.closed(row.concurrency, max(prompts, row.concurrency), lengths)
    if kind == "all at once":
        return Load.burst(prompts, lengths)
    if row.request_rate is not None and row.request_rate > 0:
        return Load.poisson(row.request_rate, prompts, lengths)
    return "neither a concurrency, a batch, nor a request rate"


def _measured_and_simulated(row: PerfMeasurement, sim: ServingResult) -> list[tuple[str, float, float]]:
    """(metric, measured, simulated) for each metric the row states, the simulated statistic matching the
    stated one (mean TPOT, else median TPOT, else mean / median ITL; mean TTFT, else median; a static
    batch's TTFT is the batch's, when its last request has its first token)."""
    out: list[tuple[str, float, float]] = []
    if row.output_throughput and row.benchmark_kind != "static_batch_ttft":
        out.append(("output_throughput", row.output_throughput, sim.output_tokens_per_second))
    step = (
        (row.mean_tpot_ms, sim.tpot.mean_ms),
        (row.median_tpot_ms, sim.tpot.median_ms),
        (row.mean_itl_ms, sim.itl.mean_ms),
        (row.median_itl_ms, sim.itl.median_ms),
    )
    stated = next(((m, s) for m, s in step if m is not None), None)
    if stated is not None:
        out.append(("tpot", stated[0] / 1e3, stated[1] / 1e3))
    ttft = (
        (row.mean_ttft_ms, sim.ttft.mean_ms)
        if row.mean_ttft_ms is not None
        else (row.median_ttft_ms, sim.ttft.median_ms)
    )
    if regime(row) == "static batch":  # a static batch's first token: its whole context phase
        ttft = (ttft[0], max(sim.ttft_by_request_s) * 1e3)
    if ttft[0] is not None:
        out.append(("ttft", ttft[0] / 1e3, ttft[1] / 1e3))
    if row.batch_latency_s:
        out.append(("batch_latency", row.batch_latency_s, sim.duration_s))
    return out


EfficiencyOf = Callable[[str, GpuSku], PerfEfficiency]


def simulate_row(
    row: PerfMeasurement,
    model: ModelSpec,
    gpu: GpuSku,
    checkpoint_bytes: int | None,
    efficiency_of: EfficiencyOf = efficiency_for,
) -> list[tuple[str, float, float]] | str:
    """The row's metrics as (metric, measured, simulated), or why it cannot be simulated; the step cost's
    factors per engine and GPU from `efficiency_of` (the shipped ones by default)."""
    sized = sized_row(row, model, gpu, checkpoint_bytes)
    if isinstance(sized, str):
        return sized
    i_len, o_len, deployment, est = sized
    load = row_load(row, i_len, o_len)
    if isinstance(load, str):
        return load
    eff = efficiency_of(est.engine, gpu)
    if regime(row) == "static batch":  # no server: no per-request overhead before the batch (as perf_cv)
        eff = dataclasses.replace(eff, request_overhead_s=0.0)
    try:
        inputs = perf_inputs(model, est, gpu, deployment.weight_dtype)
        sim = simulate(est, inputs, load, eff)
    except SpecError as exc:
        return str(exc)
    return _measured_and_simulated(row, sim) or "no metric the simulation gives"


@dataclass(frozen=True, slots=True)
class SimReport:
    scores: list[SimScore]
    skipped: list[Skipped]

    def table(self, key: Callable[[SimScore], str | None]) -> dict[str, tuple[Accuracy, Accuracy, Accuracy]]:
        """(simulated on every scored row, simulated where the steady state scores too, the steady state
        on those rows) per value of `key` (None: left out)."""
        out: dict[str, tuple[Accuracy, Accuracy, Accuracy]] = {}
        for value in sorted({k for s in self.scores if (k := key(s)) is not None}):
            chosen = [s for s in self.scores if key(s) == value]
            both = [s for s in chosen if math.isfinite(s.steady)]
            measured, both_measured = np.array([s.measured for s in chosen]), np.array([s.measured for s in both])
            out[value] = (
                accuracy(measured, np.array([s.simulated for s in chosen])),
                accuracy(both_measured, np.array([s.simulated for s in both])),
                accuracy(both_measured, np.array([s.steady for s in both])),
            )
        return out


def sim_report(
    rows: Iterable[PerfMeasurement], params: Params | None = None, observations: Sequence[Observation] | None = None
) -> SimReport:
    """Simulate every row, and pair each metric with the steady state's prediction, both with `params` (the
    shipped factors by default); `observations`: the rows' own, where the caller built them already."""
    resolve, find = _catalog_resolver()
    data = list(rows)
    if observations is None:
        observations, _ = build(data, resolve, find)
    chosen = params if params is not None else shipped_params()
    steady_predicted = predict(observations, chosen) if observations else np.array([])
    steady = {(o.row_id, o.metric): float(v) for o, v in zip(observations, steady_predicted, strict=True)}
    scores: list[SimScore] = []

    def efficiency_of(engine: str, gpu: GpuSku) -> PerfEfficiency:
        return efficiency_for(engine, gpu) if params is None else params.efficiency(vendor_class(gpu), engine, "fitted")

    done, skipped = read_rows(data, resolve, find, partial(simulate_row, efficiency_of=efficiency_of))
    for row, found in done:
        for metric, measured, simulated in found:
            prior = steady.get((row.id, metric), math.nan)
            scores.append(
                SimScore(row.id, row.source_group, row.engine, regime(row), metric, measured, simulated, prior)
            )
    return SimReport(scores, skipped)


def family_out_sim_report(rows: Iterable[PerfMeasurement]) -> SimReport:
    """`sim_report` with each source family's rows simulated and predicted by factors fitted without that family
    (the steady-state fit of `capacity.perf_fit`, as `tools/perf_fit.py --family` leaves a family out)."""
    resolve, find = _catalog_resolver()
    data = list(rows)
    observations, _ = build(data, resolve, find)
    family = family_of(data)
    family_of_row = {o.row_id: family(o) for o in observations}
    scores: list[SimScore] = []
    skipped: list[Skipped] = []
    for name in sorted(set(family_of_row.values())):
        train = [o for o in observations if family_of_row[o.row_id] != name]
        test = [o for o in observations if family_of_row[o.row_id] == name]
        part = sim_report([row for row in data if family_of_row.get(row.id) == name], fit(train), test)
        scores += part.scores
        skipped += part.skipped
    return SimReport(scores, skipped)


def reported_table(
    report: SimReport, key: Callable[[SimScore], str | None], steady_rows_only: bool = False
) -> dict[str, tuple[Accuracy, float, float]]:
    """(accuracy, 90th percentile of |error| %, median signed error %) of what `capplan estimate` reports
    (`SimScore.reported`), per value of `key`: every metric it reports, request-rate rows included (the steady
    state scores none of them; `--request-rate` prints the simulation), or only the metrics the steady state
    scores too (`steady_rows_only`, to set the two side by side)."""
    out: dict[str, tuple[Accuracy, float, float]] = {}
    for value in sorted({k for s in report.scores if (k := key(s)) is not None}):
        chosen = [
            s
            for s in report.scores
            if key(s) == value and math.isfinite(s.reported) and (math.isfinite(s.steady) or not steady_rows_only)
        ]
        if not chosen:
            continue
        measured = np.array([s.measured for s in chosen])
        predicted = np.array([s.reported for s in chosen])
        errors = predicted / measured - 1
        p90, signed = float(np.percentile(np.abs(errors), 90) * 100), float(np.median(errors) * 100)
        out[value] = (accuracy(measured, predicted), p90, signed)
    return out


def _print_reported(table: dict[str, tuple[Accuracy, float, float]]) -> None:
    """One line per value of a `reported_table`: n, median |error|, p90, signed median, share within 25 %."""
    for value, (acc, p90, signed) in table.items():
        figures = f"{acc.median_abs_error_pct:7.1f}%  {p90:7.1f}%  {signed:+7.1f}%  {acc.within_25_pct:6.0%}"
        print(f"{value:40} {acc.n:4}  {figures}")


def print_sim_report(report: SimReport, title: str, show_rows: bool = False) -> None:
    """The tables `tools/perf_fit.py --simulate` and `tools/perf_holdout.py --simulate` print."""
    rows = len({s.row_id for s in report.scores})
    print(f"{title}: {len(report.scores)} metrics simulated from {rows} rows; {len(report.skipped)} rows skipped")
    for skipped in report.skipped:
        print(f"  skipped {skipped.row_id}: {skipped.reason}")
    header = f"{'':40} {'n':>4} {'simulated':>17}  {'n':>4} {'simulated':>17} {'steady state':>17}"
    keys: tuple[tuple[str, Callable[[SimScore], str | None]], ...] = (
        ("metric", lambda s: s.metric),
        ("load / metric", lambda s: f"{s.regime}/{s.metric}"),
        ("engine / metric", lambda s: f"{s.engine}/{s.metric}"),
    )
    for name, key in keys:
        print(f"\n{name}  (median |error|, share within 25 %; right: the rows both score)\n{header}")
        for value, (alone, both, steady) in report.table(key).items():
            print(
                f"{value:40} {alone.n:4} {alone.median_abs_error_pct:8.1f}% {alone.within_25_pct:6.0%}  "
                f"{both.n:4} {both.median_abs_error_pct:8.1f}% {both.within_25_pct:6.0%} "
                f"{steady.median_abs_error_pct:8.1f}% {steady.within_25_pct:6.0%}"
            )
    print("\nwhat capplan estimate reports (TPOT, TTFT and tokens/s of the row's benchmark simulated, the rest steady")
    print("state)")
    print(f"{'':40} {'n':>4}  {'|error|':>8}  {'p90':>8}  {'signed':>8}  {'<=25%':>6}")
    for _, key in keys[::2]:
        _print_reported(reported_table(report, key))
    print("on the metrics the steady state scores too (its own figures above, right column)")
    _print_reported(reported_table(report, keys[0][1], steady_rows_only=True))
    if show_rows:
        print()
        for s in report.scores:
            print(
                f"{s.row_id} {s.metric}: measured {s.measured:.4g} simulated {s.simulated:.4g} "
                f"({(s.simulated / s.measured - 1) * 100:+.1f}%) steady {s.steady:.4g}"
            )
