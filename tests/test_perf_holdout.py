"""The blind holdout (evaluation/data/perf_holdout.yaml): public serving measurements from source families the
reference set does not use, scored out of sample and never fitted on (README-perf-holdout.md).

The rows follow the reference set's schema and rules (tests/test_perf_measurements.py): every row loads, cites a
pinned source, names catalog GPU and model ids and states at least one number; on top of that no family, group or id
is shared with perf_measurements.yaml, and the fitting path never reads the file.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pytest

from evaluation.perf_measurements import (
    BENCHMARK_KINDS,
    ENGINES,
    MEASURED_FIELDS,
    PERF_HOLDOUT_PATH,
    PerfMeasurement,
    catalog_gpu_ids,
    load_perf_holdout,
    load_perf_measurements,
)
from models_registry.sources.bundled import bundled_ids
from tests.test_perf_measurements import perf_file_fixtures

_PINNED_BLOB = re.compile(r"^https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/[^\s#]+(#L\d+(-L\d+)?)?$")
_THREAD = re.compile(r"^https://github\.com/[^/]+/[^/]+/(issues|pull)/\d+(#[\w-]+)?$")


raw_rows, rows = perf_file_fixtures(PERF_HOLDOUT_PATH, load_perf_holdout)


@pytest.fixture(scope="module")
def reference() -> list[PerfMeasurement]:
    return load_perf_measurements().rows


def test_every_row_loads_with_a_unique_id(raw_rows: list[dict[str, object]], rows: list[PerfMeasurement]) -> None:
    assert len(rows) == len(raw_rows)
    counts = Counter(str(row.get("id")) for row in raw_rows)
    assert [key for key, n in counts.items() if n > 1] == []


def test_every_source_is_pinned(rows: list[PerfMeasurement]) -> None:
    """A repository file at a commit, an issue / pull request thread, or (off GitHub) a page URL."""
    for row in rows:
        assert row.source_group.strip() and row.source_family, row.id
        if row.source.startswith("https://github.com/"):
            assert _PINNED_BLOB.match(row.source) or _THREAD.match(row.source), (row.id, row.source)
        else:
            assert row.source.startswith("https://") and " " not in row.source, (row.id, row.source)


def test_the_holdout_shares_nothing_with_the_reference_set(
    rows: list[PerfMeasurement], reference: list[PerfMeasurement]
) -> None:
    """Blind: other publishers (families), other campaigns (groups), other ids, other source files."""
    assert {r.source_family for r in rows}.isdisjoint({r.source_family for r in reference})
    assert {r.source_group for r in rows}.isdisjoint({r.source_group for r in reference})
    assert {r.id for r in rows}.isdisjoint({r.id for r in reference})
    assert {r.source.split("#")[0] for r in rows}.isdisjoint({r.source.split("#")[0] for r in reference})


def test_the_fit_never_reads_the_holdout(rows: list[PerfMeasurement]) -> None:
    from evaluation import perf_cv

    holdout_ids = {row.id for row in rows}
    assert holdout_ids.isdisjoint(row.id for row in load_perf_measurements().rows)
    # cv_report() fits on load_perf_measurements()'s default path, which is not the holdout file
    assert perf_cv.load_perf_measurements.__defaults__ is not None
    assert PERF_HOLDOUT_PATH not in perf_cv.load_perf_measurements.__defaults__


def test_gpu_and_model_ids_are_catalog_ids(rows: list[PerfMeasurement]) -> None:
    assert {row.gpu for row in rows} <= catalog_gpu_ids()
    known = {repo.casefold() for repo in bundled_ids()}
    for row in rows:
        if row.model_in_catalog:
            assert row.model.casefold() in known, row.id
        else:
            assert row.catalog_model is not None and row.catalog_model.casefold() in known, row.id
        assert row.config_model.casefold() in known, row.id


def test_every_row_states_numbers_and_a_load(rows: list[PerfMeasurement]) -> None:
    for row in rows:
        assert any(getattr(row, name) is not None for name in MEASURED_FIELDS), row.id
        assert row.engine in ENGINES and row.benchmark_kind in BENCHMARK_KINDS, row.id
        # capplan needs the lengths and the load to size a row
        assert row.mean_input_len and row.mean_output_len, row.id
        assert row.effective_concurrency is not None or row.request_rate is not None, row.id
        assert row.notes and len(row.notes) > 40, row.id  # the setup and the quoted source lines


def test_numbers_are_plausible(rows: list[PerfMeasurement]) -> None:
    for row in rows:
        if row.tpot_ms is not None:
            assert 1.0 < row.tpot_ms < 10_000, row.id
            if row.output_throughput is not None and row.effective_concurrency is not None:
                assert row.output_throughput <= 1000.0 / row.tpot_ms * row.effective_concurrency * 1.5, row.id
        if row.ttft_ms is not None:
            assert 0 < row.ttft_ms < 3_600_000, row.id
        throughput = row.output_throughput
        assert throughput is None or 0 < throughput < 1_000_000, row.id
        if row.output_tokens_per_s is not None and row.total_tokens_per_s is not None:
            assert row.output_tokens_per_s <= row.total_tokens_per_s * 1.001, row.id
        assert row.tp * row.pp <= row.num_gpus, row.id


def test_serving_totals_are_self_consistent(rows: list[PerfMeasurement]) -> None:
    """Output tokens/s over requests/s is the mean output length, where the source prints all three."""
    checked = 0
    for row in rows:
        if row.request_throughput is None or row.output_tokens_per_s is None or row.total_output_tokens is None:
            continue
        assert row.num_prompts, row.id
        low = row.output_tokens_per_s / (row.request_throughput + 0.005)
        high = row.output_tokens_per_s / max(row.request_throughput - 0.005, 1e-9)
        assert low * 0.99 <= row.total_output_tokens / row.num_prompts <= high * 1.01, row.id
        checked += 1
    assert checked >= 20


def test_coverage_of_the_holdout(rows: list[PerfMeasurement]) -> None:
    assert len(rows) >= 60
    assert len({row.source_family for row in rows}) >= 5
    assert {"vllm", "sglang"} <= {row.engine for row in rows}
    assert {row.tp for row in rows} >= {1, 4, 8}
    concurrencies = {row.effective_concurrency for row in rows if row.effective_concurrency is not None}
    assert 1 in concurrencies and max(concurrencies) >= 32
    assert any(row.request_rate == math.inf for row in rows)


def test_the_holdout_is_scored_with_the_shipped_factors(rows: list[PerfMeasurement]) -> None:
    from capacity.performance import MEMORY_EFFICIENCY, STEP_OVERHEAD_S
    from evaluation.perf_cv import holdout_report

    report = holdout_report(rows)
    assert report.params.memory_bandwidth == MEMORY_EFFICIENCY
    assert report.params.step_overhead_s == {str(k): v for k, v in STEP_OVERHEAD_S.items()}
    scored = {o.row_id for o in report.observations}
    skipped = {s.row_id for s in report.skipped}
    assert scored | skipped == {row.id for row in rows} and not scored & skipped
    assert len(scored) >= 50
    table = report.table(lambda o: o.metric)
    assert {"output_throughput", "tpot", "ttft"} <= set(table)
    for accuracy, signed in table.values():
        assert accuracy.n > 0 and math.isfinite(accuracy.median_abs_error_pct) and math.isfinite(signed)


def _readme() -> str:
    return " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())


def _pct(value: float) -> str:
    return f"{value:.1f} %"


def test_the_readme_quotes_the_blind_steady_state_figures(rows: list[PerfMeasurement]) -> None:
    """The README's blind figures for the steady-state formulas are what `python -m tools.perf_holdout` prints
    today: a change to the speed rules or factors that moves them fails here until the README says so."""
    from evaluation.perf_cv import holdout_report

    table = holdout_report(rows).table(lambda o: o.metric)
    figures = [_pct(table[m][0].median_abs_error_pct) for m in ("output_throughput", "tpot", "ttft")]
    readme = _readme()
    assert f"{len(rows)} rows from source families the fit never saw" in readme
    assert f"a median error of {figures[0]} for output tokens/s" in readme
    assert f"{figures[1]} for TPOT" in readme and f"{figures[2]} for TTFT" in readme


@pytest.mark.slow
def test_the_readme_quotes_the_blind_simulated_figures(rows: list[PerfMeasurement]) -> None:
    """The same for the serving simulation's figures (`--simulate`: every row it scores, the rate rows too)."""
    from evaluation.perf_cv import holdout_report
    from evaluation.perf_sim import reported_table, sim_report

    report = sim_report(rows)
    table = report.table(lambda s: s.metric)
    figures = ", ".join(_pct(table[m][0].median_abs_error_pct) for m in ("output_throughput", "tpot", "ttft"))
    readme = _readme()
    assert f"and {figures} with the serving simulation" in readme
    # what `capplan estimate` reports (the row's benchmark simulated: its TPOT, TTFT and tokens/s), on the rows the
    # steady state scores too, against the steady state's figures on them (the README's first sentence quotes those)
    both = reported_table(report, lambda s: s.metric, steady_rows_only=True)
    steady_table = holdout_report(rows).table(lambda o: o.metric)
    steady = {m: steady_table[m][0].median_abs_error_pct for m in ("output_throughput", "tpot")}
    assert f"TPOT from {_pct(steady['tpot'])} to {_pct(both['tpot'][0].median_abs_error_pct)}" in readme
    tokens = both["output_throughput"][0].median_abs_error_pct
    assert f"from {_pct(steady['output_throughput'])} to {_pct(tokens)} (with its request-rate rows" in readme
    # with the request-rate rows, which only the simulation answers: the simulation's own figures
    every = reported_table(report, lambda s: s.metric)
    every_figures = f"{_pct(every['tpot'][0].median_abs_error_pct)} and {_pct(every['output_throughput'][0].median_abs_error_pct)}"
    assert f"only answer is the simulation: {every_figures})" in readme
