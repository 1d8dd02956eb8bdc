"""In-sample against leave-one-source-out accuracy of capplan's vLLM overhead models.

    python tools/overhead_cv.py [--fit] [--rows] [--engines]

For the derived model (capacity/engines/vllm/overhead.py, named buffers) and the previous one
(capacity/overhead.py transformer_overhead: a_mlp x F_mlp, a_logits x F_logits), prints the KV-pool and
KV-token accuracy (n, median |error|, share within 1 % and 5 %, median signed error) with the shipped
coefficients, refit in-sample, and cross-validated (every source held out in turn), per engine era and
feature. `--fit` prints the coefficients a refit on every row gives (for engine_constants.py);
`--rows` each row's signed errors. See evaluation/overhead_cv.py for the method.
`--engines` prints the SGLang / TensorRT-LLM table instead (evaluation/engine_logs.py): per engine
and release era, the release-aware profile against the previous one (newest rules for every log), shipped,
in-sample refit and leave-one-source-out, and the start decisions.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capacity import engine_constants as ec
from capacity.dtypes import GIB
from evaluation import cudagraph_estimates as graphs
from evaluation.measurements import compare, load_measurements
from evaluation.overhead_cv import (
    DERIVED,
    PREVIOUS,
    Accuracy,
    build_rows,
    by_tag,
    cross_validated_scores,
    fitted_coefficients,
    in_sample_scores,
    shipped_scores,
)
from models_registry.resolve import spec_and_checkpoint
from models_registry.sources.gpu_catalog import find_gpu_sku


def _fmt(a: Accuracy) -> str:
    if not a.n:
        return f"{'-':>30}"
    return f"{a.n:>3} {a.median_abs_error:6.2%} {a.within_1pct:4.0%} {a.within_5pct:4.0%} {a.median_signed_error:+6.2%}"


def print_graph_estimates(rows_too: bool) -> None:
    """vLLM >= 0.21's CUDA-graph estimate: base + per graph, fitted and scored leave-one-source-out."""
    rows = graphs.load_rows()
    fitted = graphs.fit(rows)
    shipped = graphs.GraphCoefficients(ec.CG_BASE_BYTES, ec.CG_PER_GRAPH_BYTES, ec.CG_PER_GRAPH_TP_CUSTOM_AR_BYTES,
                                       ec.CG_PER_GRAPH_TP_NCCL_BYTES)
    print(f"rows {len(rows)}, fitted {sum(r.excluded is None for r in rows)}; left out: "
          + ", ".join(f"{k} {v}" for k, v in sorted(Counter(r.excluded for r in rows if r.excluded).items())))
    print(f"fit: base {fitted.base_bytes / GIB:.2f} GiB, per graph {fitted.per_graph_bytes / 2**20:.1f} MiB "
          f"(TP > 1: custom all-reduce {fitted.per_graph_custom_ar_bytes / 2**20:.1f} MiB, NCCL "
          f"{fitted.per_graph_nccl_bytes / 2**20:.1f} MiB); shipped: base {shipped.base_bytes / GIB:.2f} GiB, per graph "
          f"{shipped.per_graph_bytes / 2**20:.1f} / {shipped.per_graph_custom_ar_bytes / 2**20:.1f} / "
          f"{shipped.per_graph_nccl_bytes / 2**20:.1f} MiB")
    shipped_errors, cv_errors = graphs.errors_gib(rows, shipped), graphs.cross_validated_errors_gib(rows)
    for name, ids in (("all", None), ("TP = 1", {r.id for r in rows if r.tp == 1}),
                      ("TP > 1", {r.id for r in rows if r.tp > 1}),
                      ("TP>1 CAR", {r.id for r in rows if r.tp > 1 and r.custom_all_reduce}),
                      ("TP>1 NCCL", {r.id for r in rows if r.tp > 1 and not r.custom_all_reduce})):  # fmt: skip
        print(f"  {name:9} shipped: {graphs.accuracy(shipped_errors, ids)}")
        print(f"  {'':9} cv:      {graphs.accuracy(cv_errors, ids)}")
    if rows_too:
        for r in rows:
            if r.id in cv_errors:
                print(f"    {r.id[:52]:52} tp {r.tp} graphs {r.graphs:>3} logged {(r.estimate_bytes or 0) / GIB:5.2f} "
                      f"shipped {shipped_errors[r.id]:+.2f} cv {cv_errors[r.id]:+.2f} GiB"
                      + (f"  custom all-reduce {'on' if r.custom_all_reduce else 'off'} ({r.custom_all_reduce_from})"
                         if r.tp > 1 else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", action="store_true", help="print the coefficients of a refit on every row")
    parser.add_argument("--rows", action="store_true", help="print each row's cross-validated errors")
    parser.add_argument("--graphs", action="store_true", help="the CUDA-graph estimate against the public logs only")
    parser.add_argument("--engines", action="store_true", help="score the SGLang and TensorRT-LLM logs instead")
    args = parser.parse_args()
    if args.graphs:
        print_graph_estimates(args.rows)
        return
    if args.engines:
        from tools.engine_log_cv import print_engine_tables

        print_engine_tables(spec_and_checkpoint, find_gpu_sku, rows=args.rows)
        return
    comparisons = compare(load_measurements(), spec_and_checkpoint, find_gpu_sku)
    header = "   n  med|e|  1%   5%  med(e)"
    evaluated = []
    for model in (DERIVED, PREVIOUS):
        rows = build_rows(comparisons, spec_and_checkpoint, model)
        evaluated.append((model, rows, [shipped_scores(rows, model), in_sample_scores(rows, model),
                                        cross_validated_scores(rows, model)]))  # fmt: skip
    for metric in ("pool", "tokens"):
        print(f"\n== KV {metric}: {header} (shipped | in-sample refit | leave-one-source-out)")
        for model, rows, runs in evaluated:
            tables = [by_tag(rows, getattr(s, metric)) for s in runs]
            print(f"-- {model.name}  (sources: {len({r.group for r in rows})})")
            for tag in tables[0]:
                print(f"   {tag:14} " + " | ".join(_fmt(t[tag]) for t in tables))
            if args.rows and metric == "pool":
                cv = runs[2]
                for r in rows:
                    e, s = cv.pool[r.id], runs[0].pool[r.id]
                    if e is not None and s is not None:
                        print(f"      {r.id[:58]:58} {r.group[:32]:32} shipped {s:+7.2%} cv {e:+7.2%}")
    if args.fit:
        for model in (DERIVED, PREVIOUS):
            params = fitted_coefficients(build_rows(comparisons, spec_and_checkpoint, model), model)
            print(f"\n{model.name}: refit on every row")
            for era, p in params.items():
                print(f"   {era:9} " + ", ".join(f"{k}={v:g}" for k, v in p.items()))


if __name__ == "__main__":
    main()
