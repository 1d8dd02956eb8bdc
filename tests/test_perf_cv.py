"""The performance model's accuracy on public benchmark measurements, out of sample.

A regression gate, not a target: the leave-one-source-group-out errors (each campaign predicted by a
fit that never saw it) stay at or below what the shipped model reached, the fit beats the unfitted
defaults, and the efficiency factors capplan ships are the ones the fit finds.
"""

from __future__ import annotations

import pytest

from capacity import performance
from evaluation.perf_cv import CvReport, cv_report
from evaluation.perf_measurements import load_perf_measurements

# every test reads one leave-one-group-out refit of the whole reference set (cross-validation refits are slow)
pytestmark = pytest.mark.slow

# cross-validated median absolute error (%) and share within 25 %, per metric: measured on the
# shipped data (tools/perf_fit.py) and pinned a little looser
GATES = {
    "output_throughput": (30.0, 0.45),
    "tpot": (35.0, 0.38),
    "ttft": (45.0, 0.32),
    "batch_latency": (22.0, 0.62),
}


@pytest.fixture(scope="module")
def report() -> CvReport:
    return cv_report()


def test_every_row_is_observed_or_skipped_with_a_reason(report: CvReport) -> None:
    rows = {row.id for row in load_perf_measurements().rows}
    observed = {o.row_id for o in report.observations}
    skipped = {s.row_id for s in report.skipped}
    assert observed | skipped == rows and not observed & skipped
    assert all(s.reason and "\n" not in s.reason for s in report.skipped)
    assert len(skipped) <= 0.05 * len(rows)


@pytest.mark.parametrize("metric", sorted(GATES))
def test_cross_validated_accuracy_holds(report: CvReport, metric: str) -> None:
    median_limit, within_limit = GATES[metric]
    _ins, cv, defaults = report.table(lambda o: o.metric)[metric]
    assert cv.n >= 50
    assert cv.median_abs_error_pct <= median_limit, cv
    assert cv.within_25_pct >= within_limit, cv
    assert cv.median_abs_error_pct < defaults.median_abs_error_pct  # fitting helps out of sample too


def test_the_shipped_factors_are_the_fit(report: CvReport) -> None:
    p = report.params
    for vendor, value in performance.MEMORY_EFFICIENCY.items():
        assert value == pytest.approx(p.memory_bandwidth[vendor], abs=0.03)
    assert performance.COMPUTE_EFFICIENCY["nvidia"] == pytest.approx(p.compute["nvidia"], abs=0.03)
    for engine, value in performance.STEP_OVERHEAD_S.items():
        assert value == pytest.approx(p.step_overhead_s[engine], abs=0.001)
    for engine, value in performance.REQUEST_OVERHEAD_S.items():
        assert value == pytest.approx(p.request_overhead_s[engine], abs=0.03)
    latency = performance.ALLREDUCE_LATENCY_S
    assert latency == pytest.approx(p.allreduce_latency_s["*"], abs=5e-6)


def _readme() -> str:
    from pathlib import Path

    return " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())


def test_what_the_command_reports_is_scored_leaving_a_family_out_as_the_readme_says() -> None:
    """`capplan estimate --concurrency` reports a closed loop's TPOT and tokens/s from its simulation; leaving each
    source family out (factors fitted without it), that beats the steady-state formula on TPOT and tokens/s, and
    the README quotes both (`tools/perf_fit.py --simulate --family`)."""
    from evaluation.perf_sim import family_out_sim_report, reported_table

    report = family_out_sim_report(load_perf_measurements().rows)
    reported = reported_table(report, lambda s: s.metric)
    steady = {metric: both[2] for metric, both in report.table(lambda s: s.metric).items()}
    tpot, tpot_p90, _ = reported["tpot"]
    tokens = reported["output_throughput"][0]
    assert tpot.median_abs_error_pct < steady["tpot"].median_abs_error_pct
    assert tokens.median_abs_error_pct < steady["output_throughput"].median_abs_error_pct
    readme = _readme()
    assert (
        f"TPOT from {steady['tpot'].median_abs_error_pct:.1f} % to {tpot.median_abs_error_pct:.1f} % median error"
        in readme
    )
    assert f"to {tpot_p90:.1f} %)" in readme
    assert (
        f"output tokens/s from {steady['output_throughput'].median_abs_error_pct:.1f} % to "
        f"{tokens.median_abs_error_pct:.1f} %" in readme
    )
    simulated_ttft = report.table(lambda s: s.metric)["ttft"][0]
    ttft, ttft_p90, _ = reported["ttft"]
    assert f"({ttft.median_abs_error_pct:.1f} % against {simulated_ttft.median_abs_error_pct:.1f} %" in readme
    assert f"to {ttft_p90:.1f} %). On" in readme

