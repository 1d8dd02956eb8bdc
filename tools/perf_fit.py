"""Fit the performance model's efficiency factors and print in-sample vs cross-validated accuracy.

    python tools/perf_fit.py [--rows] [--simulate] [--family]

Fits `capacity.perf_fit.Params` on evaluation/data/perf_measurements.yaml and prints, per metric,
engine, GPU class and feature: in-sample, leave-one-source-group-out (the number to report) and the
unfitted defaults, as median absolute error and the shares within 15 % and 25 %. The fitted values
go into capacity/performance.py (MEMORY_EFFICIENCY, COMPUTE_EFFICIENCY, STEP_OVERHEAD_S, REQUEST_OVERHEAD_S,
ALLREDUCE_LATENCY_S). `--family` adds leave-one-source-family-out (the stricter unit).
`--simulate` fits nothing: it scores the serving simulation (capacity/serving/) with the shipped factors on
the same rows, beside the steady-state model and what `capplan estimate` reports (evaluation/perf_sim.py);
with `--family`, each source family's rows by factors fitted without that family.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from evaluation.perf_cv import cv_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", action="store_true", help="print every observation")
    parser.add_argument("--simulate", action="store_true", help="score the serving simulation (nothing fitted)")
    parser.add_argument("--family", action="store_true", help="also leave one source family out at a time")
    args = parser.parse_args()
    if args.simulate:
        from evaluation.perf_measurements import load_perf_measurements
        from evaluation.perf_sim import family_out_sim_report, print_sim_report, sim_report

        rows = load_perf_measurements().rows
        if args.family:
            title = "reference set, each source family by factors fitted without it"
            print_sim_report(family_out_sim_report(rows), title, args.rows)
        else:
            print_sim_report(sim_report(rows), "reference set (shipped factors)", args.rows)
        return
    report = cv_report(by_family=args.family)
    print(f"{len(report.observations)} observations from {len({o.row_id for o in report.observations})} rows; "
          f"{len(report.skipped)} rows skipped")  # fmt: skip
    for skipped in report.skipped:
        print(f"  skipped {skipped.row_id}: {skipped.reason}")
    print(f"fitted: {report.params}")
    header = f"{'':34} {'n':>4}  {'in-sample':>22}  {'cross-validated':>22}  {'defaults':>8}"
    for title, key in (
        ("metric", lambda o: o.metric),
        ("engine / metric", lambda o: f"{o.engine}/{o.metric}"),
        ("GPU class / metric", lambda o: f"{o.vendor}/{o.metric}"),
        ("feature / metric", lambda o: None),
    ):
        if title.startswith("feature"):
            continue
        print(f"\n{title}\n{header}")
        for value, (ins, cv, base) in report.table(key).items():
            print(f"{value:34} {ins.n:4}  {ins.median_abs_error_pct:6.1f}% {ins.within_15_pct:5.0%} {ins.within_25_pct:5.0%}"
                  f"    {cv.median_abs_error_pct:6.1f}% {cv.within_15_pct:5.0%} {cv.within_25_pct:5.0%}"
                  f"    {base.median_abs_error_pct:6.1f}%")  # fmt: skip
    tags = sorted({t for o in report.observations for t in o.tags})
    print(f"\nfeature / metric\n{header}")
    for tag in tags:
        for value, (ins, cv, base) in report.table(lambda o, t=tag: f"{t}/{o.metric}" if t in o.tags else None).items():
            print(f"{value:34} {ins.n:4}  {ins.median_abs_error_pct:6.1f}% {ins.within_15_pct:5.0%} {ins.within_25_pct:5.0%}"
                  f"    {cv.median_abs_error_pct:6.1f}% {cv.within_15_pct:5.0%} {cv.within_25_pct:5.0%}"
                  f"    {base.median_abs_error_pct:6.1f}%")  # fmt: skip
    if args.family:
        print(f"\nleave one source family out\n{'':34} {'n':>4}  {'|error|':>8}  {'p90':>8}  {'signed':>8}")
        measured = {id(o): o.measured for o in report.observations}
        for value, (acc, signed) in report.family_table(lambda o: o.metric).items():
            errors = [abs(p / measured[id(o)] - 1) * 100 for o, p in zip(report.observations, report.family_out,
                      strict=True) if o.metric == value and p > 0]  # fmt: skip
            print(f"{value:34} {acc.n:4}  {acc.median_abs_error_pct:7.1f}%  {np.percentile(errors, 90):7.1f}%  "
                  f"{signed:+7.1f}%")  # fmt: skip
        for value, (acc, signed) in report.family_table(lambda o: f"{o.engine}/{o.metric}").items():
            print(f"{value:34} {acc.n:4}  {acc.median_abs_error_pct:7.1f}%  {'':8}  {signed:+7.1f}%")
    if args.rows:
        for o, ins, cv in zip(report.observations, report.in_sample, report.cross_validated, strict=True):
            print(f"{o.row_id} {o.metric}: measured {o.measured:.4g} in-sample {ins:.4g} cv {cv:.4g}")


if __name__ == "__main__":
    main()
