"""Score the shipped performance model blind on the holdout set (evaluation/data/perf_holdout.yaml).

    python -m tools.perf_holdout [--rows] [--simulate] [--family NAME ...] [--silicon]

Every holdout row goes through the same observations and `predict` as the cross-validation
(`evaluation/perf_cv.py`), with the efficiency factors capplan ships (capacity/performance.py).
Nothing is fitted. Prints, per metric, engine, source family, GPU class and feature: n, median
absolute error, median signed error (predicted / measured - 1; + means capplan predicts more:
higher tokens/s or a longer latency) and the shares within 15 % and 25 %. The holdout is never
fitted on (README-perf-holdout.md). `--simulate` scores the serving simulation (capacity/serving/) on the
same rows instead, beside the steady-state model (evaluation/perf_sim.py). `--family` (repeatable) scores only
the rows of the named source families (exact `source_family` values), e.g. one collection batch.
`--silicon` scores the second blind set instead: NVIDIA's measured runs shipped in aiconfigurator-core
(evaluation/data/aic_silicon_agg.csv, `evaluation.silicon_sample`), less those a reference row measured.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capacity.perf_fit import Observation
from evaluation.perf_cv import HoldoutReport, holdout_report
from evaluation.perf_measurements import PerfLoadResult, PerfMeasurement, load_perf_holdout

HEADER = f"{'':44} {'n':>4}  {'|error|':>8}  {'signed':>8}  {'<=15%':>6}  {'<=25%':>6}"


def _print_table(report: HoldoutReport, title: str, key: Callable[[Observation], str | None]) -> None:
    print(f"\n{title}\n{HEADER}")
    for value, (acc, signed) in report.table(key).items():
        signed_text = f"{signed:+7.1f}%" if not math.isnan(signed) else "     n/a"
        print(f"{value:44} {acc.n:4}  {acc.median_abs_error_pct:7.1f}%  {signed_text}  "
              f"{acc.within_15_pct:6.0%}  {acc.within_25_pct:6.0%}")  # fmt: skip


def _regime(row: PerfMeasurement) -> str:
    """Capped client concurrency, all requests at once, or Poisson arrivals at a finite rate."""
    if row.effective_concurrency is not None:
        return "capped concurrency"
    return "all at once" if row.request_rate is not None and math.isinf(row.request_rate) else "finite rate"


def _silicon() -> PerfLoadResult:
    """The silicon runs capplan can size as stated, less those whose configuration a reference row measured; the
    runs left out are summed up by reason."""
    from collections import Counter

    from evaluation.perf_measurements import load_perf_measurements
    from evaluation.silicon_sample import SILICON_PATH, overlaps, read_silicon

    rows, skipped = read_silicon()
    seen = overlaps(rows, load_perf_measurements().rows)
    print(f"{SILICON_PATH.name}: {len(rows) + len(skipped)} runs; {len(seen)} repeat a reference row's configuration "
          f"and are left out; {len(skipped)} not taken:")  # fmt: skip
    for reason, count in Counter(s.reason.split(":")[0] for s in skipped).most_common():
        print(f"  {count:5} {reason}")
    return PerfLoadResult([row for row in rows if row.id not in seen], [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", action="store_true", help="print every observation")
    parser.add_argument("--simulate", action="store_true", help="score the serving simulation instead")
    parser.add_argument("--family", action="append", default=[], help="only rows of this source_family (repeatable)")
    parser.add_argument("--silicon", action="store_true", help="score NVIDIA's silicon runs (aic_silicon_agg.csv)")
    args = parser.parse_args()
    loaded = _silicon() if args.silicon else load_perf_holdout()
    for bad in loaded.skipped:
        print(f"  not loaded {bad.key}: {bad.reason}")
    if args.family:
        unknown = set(args.family) - {row.source_family for row in loaded.rows}
        if unknown:
            parser.error(f"no holdout rows of source family {sorted(unknown)}")
        loaded = PerfLoadResult([row for row in loaded.rows if row.source_family in args.family], loaded.skipped)
        print(f"families {args.family}: {len(loaded.rows)} rows")
    if args.simulate:
        from evaluation.perf_sim import print_sim_report, sim_report

        print_sim_report(sim_report(loaded.rows), "holdout (blind)", args.rows)
        return
    report = holdout_report(loaded.rows)
    print(f"{len(report.observations)} observations from {len({o.row_id for o in report.observations})} rows; "
          f"{len(report.skipped)} rows skipped")  # fmt: skip
    for skipped in report.skipped:
        print(f"  skipped {skipped.row_id}: {skipped.reason}")
    print(f"shipped factors (not refitted): {report.params}")
    family = report.family
    regime = {row.id: _regime(row) for row in loaded.rows}
    _print_table(report, "metric", lambda o: o.metric)
    _print_table(report, "engine / metric", lambda o: f"{o.engine}/{o.metric}")
    _print_table(report, "source family / metric", lambda o: f"{family.get(o.row_id, o.group)[:26]}/{o.metric}")
    _print_table(report, "load / metric", lambda o: f"{regime.get(o.row_id, '?')}/{o.metric}")
    _print_table(report, "GPU class / metric", lambda o: f"{o.vendor}/{o.metric}")
    if args.silicon:
        by_id = {row.id: row for row in loaded.rows}
        _print_table(report, "GPU / metric", lambda o: f"{by_id[o.row_id].gpu}/{o.metric}")
        _print_table(report, "model / metric", lambda o: f"{by_id[o.row_id].model[:34]}/{o.metric}")
    for tag in sorted({t for o in report.observations for t in o.tags}):
        _print_table(report, f"feature {tag} / metric", lambda o, t=tag: f"{t}/{o.metric}" if t in o.tags else None)
    if args.rows:
        print()
        for o, predicted in zip(report.observations, report.predicted, strict=True):
            print(f"{o.row_id} {o.metric}: measured {o.measured:.4g} predicted {predicted:.4g} "
                  f"({(predicted / o.measured - 1) * 100:+.1f}%)")  # fmt: skip


if __name__ == "__main__":
    main()
