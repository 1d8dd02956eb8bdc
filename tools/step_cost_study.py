"""Where the shipped step cost misses, and the operation-by-operation candidate beside it (not wired).

    python -m tools.step_cost_study [--variants]

Prints, on evaluation/data/perf_measurements.yaml (the reference set; the blind holdout is not read):
the shipped factors' signed median error per source family and per regime (decode batch, dense / MoE,
TP, prefill- or decode-heavy), then the shipped form and the candidate
(evaluation/step_cost_candidate.py), each fitted in sample and left out one source FAMILY at a time:
median and 90th percentile |error| and per-engine signed bias for throughput, TPOT and TTFT.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capacity.perf_fit import Observation, fit, predict
from evaluation.perf_cv import _catalog_resolver, build, shipped_params
from evaluation.perf_measurements import PerfMeasurement, load_perf_measurements
from evaluation.step_cost_candidate import (
    Score,
    candidate_fit_and_predict,
    fit_candidate,
    leave_one_out,
    nested_fit_and_predict,
    predict_candidate,
    score,
    shipped_fit_and_predict,
)

METRICS = ("output_throughput", "tpot", "ttft", "batch_latency")


def _batch(o: Observation) -> str:
    running = o.decode.sequences if o.decode is not None else (o.prefill[0].sequences if o.prefill else 1)
    return "B 1-8" if running <= 8 else "B 9-64" if running <= 64 else "B 65-127" if running < 128 else "B 128+"


def _shape(row: PerfMeasurement) -> str:
    i, o = row.mean_input_len or 1, row.mean_output_len or 1
    return "prefill-heavy" if i >= 4 * o else "decode-heavy" if o >= 4 * i else "balanced"


def _print(
    title: str, keys: dict[str, Callable[[Observation], str]], obs: list[Observation], preds: dict[str, np.ndarray]
) -> None:
    measured = np.array([o.measured for o in obs])
    print(f"\n{title}")
    print(f"{'':46} {'n':>4}  " + "  ".join(f"{name:>26}" for name in preds))
    print(f"{'':46} {'':>4}  " + "  ".join(f"{'med|e|':>8}{'p90':>8}{'signed':>10}" for _ in preds))
    for key_name, key in keys.items():
        for value in sorted({key(o) for o in obs}):
            for metric in METRICS:
                mask = np.array([key(o) == value and o.metric == metric for o in obs])
                if not mask.any():
                    continue
                scores: list[Score] = [score(measured[mask], p[mask]) for p in preds.values()]
                cells = "  ".join(
                    f"{s.median_abs_pct:7.1f}%{s.p90_abs_pct:7.1f}%{s.median_signed_pct:+9.1f}%" for s in scores
                )
                print(f"{key_name + ' ' + value + '/' + metric:46} {scores[0].n:4}  {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--diagnose", action="store_true", help="the shipped model's misses per family and regime")
    parser.add_argument("--fixed", default="", help="candidate coefficients held at their start, comma-separated")
    parser.add_argument("--nested", action="store_true", help="choose among VARIANTS inside each left-out fold")
    parser.add_argument("--shared", default="", help="candidate coefficients with one value for all classes")
    parser.add_argument("--tpot-interference", action="store_true", help="TPOT carries the joining prompts' prefills")
    args = parser.parse_args()
    rows = load_perf_measurements().rows
    by_id = {r.id: r for r in rows}
    resolve, find = _catalog_resolver()
    obs, _ = build(rows, resolve, find, args.tpot_interference)

    def family(o: Observation) -> str:
        row = by_id[o.row_id]
        return (row.source_family or row.source_group)[:24]

    shipped = predict(obs, shipped_params())
    if args.diagnose:
        regimes: dict[str, Callable[[Observation], str]] = {
            "family": family,
            "batch": _batch,
            "moe": lambda o: "MoE" if "moe" in o.tags else "dense",
            "tp": lambda o: "TP>1" if "tp>1" in o.tags else "TP1",
            "shape": lambda o: _shape(by_id[o.row_id]),
            "engine": lambda o: o.engine,
            "eng x B": lambda o: f"{o.engine} {_batch(o)}",
            "moe x tp x B": lambda o: (
                f"{'MoE' if 'moe' in o.tags else 'dense'} {'TP>1' if 'tp>1' in o.tags else 'TP1'} {_batch(o)}"
            ),
        }
        _print("shipped factors, in sample", regimes, obs, {"shipped": shipped})
        return
    if args.nested:
        nested = leave_one_out(obs, family, nested_fit_and_predict(family))
        _print("nested: variant chosen inside each fold, scored on the left-out family", {"": lambda o: "all",
               "engine": lambda o: o.engine}, obs, {"shipped": shipped, "nested candidate LOFO": nested})  # fmt: skip
        return
    fixed = tuple(f for f in args.fixed.split(",") if f)
    shared = tuple(f for f in args.shared.split(",") if f)
    cand = fit_candidate(obs, fixed, shared)
    print("candidate (in-sample fit):")
    for name, values in cand.values.items():
        print(f"  {name}: " + ", ".join(f"{k}={v:.6g}" for k, v in values.items()))
    print(f"shipped form refitted in sample: {fit(obs)}")
    preds = {
        "shipped in-sample": shipped,
        "shipped LOFO": leave_one_out(obs, family, shipped_fit_and_predict),
        "candidate in-sample": predict_candidate(obs, cand),
        "candidate LOFO": leave_one_out(obs, family, candidate_fit_and_predict(fixed, shared)),
    }
    _print("scores (median |error|, p90 |error|, median signed error: + predicts more)",
           {"": lambda o: "all", "engine": lambda o: o.engine, "family": family, "batch": _batch}, obs, preds)  # fmt: skip


if __name__ == "__main__":
    main()
