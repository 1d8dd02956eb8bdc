"""capplan's SGLang and TensorRT-LLM profiles against their public startup logs, per engine and release era.

    python tools/engine_log_cv.py [--rows]      (also: python tools/overhead_cv.py --engines)

Two models side by side: release-aware (the rules of the release the log names) and previous (the newest
modelled release's rules for every log). For each: KV pool and KV tokens (n, median |error|, share within
1 % and 5 %, median signed error) shipped | in-sample refit | leave-one-source-out of SGLang's one fitted
term, and the start decisions right / scored. Method: evaluation/engine_logs.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation import engine_logs as el
from evaluation.overhead_cv import Accuracy


def _fmt(a: Accuracy) -> str:
    if not a.n:
        return f"{'-':>30}"
    return f"{a.n:>3} {a.median_abs_error:6.2%} {a.within_1pct:4.0%} {a.within_5pct:4.0%} {a.median_signed_error:+6.2%}"


def print_engine_tables(resolve_model: el.ResolveModel, resolve_gpu: el.ResolveGpu, *, rows: bool = False) -> None:
    logs = el.load_engine_logs()
    header = "   n  med|e|  1%   5%  med(e)"
    for name, aware in (("release-aware", True), ("previous (newest rules)", False)):
        scored, shipped = el.shipped_scores(logs, resolve_model, resolve_gpu, version_aware=aware)
        runs = [shipped] + [el.refit_scores(scored, resolve_model, resolve_gpu, cross_validated=cv, version_aware=aware)
                            for cv in (False, True)]  # fmt: skip
        print(f"\n== {name}: {len(logs)} logs, {len({r.group for r in logs})} sources; "
              f"SGLang term refit on every row: {el.fitted_overhead(scored) / el.GIB:.2f} GiB")  # fmt: skip
        for metric in ("pool", "tokens"):
            print(f"-- KV {metric}: {header} (shipped | in-sample refit | leave-one-source-out)")
            tables = [el.table(logs, getattr(run, metric)) for run in runs]
            for tag in tables[0]:
                print(f"   {tag:18} " + " | ".join(_fmt(t[tag]) for t in tables))
        starts = el.start_table(logs, shipped.starts)
        print("-- start decisions right / scored: " + ", ".join(f"{t} {r}/{n}" for t, (r, n) in starts.items()))
        if rows:
            for s in scored:
                print(f"      {s.row.id[:58]:58} {_row_line(s, runs[2])}"
                      + (f"  [not modelled: {s.row.unmodelled}]" if s.row.unmodelled else ""))


def _pct(error: float | None) -> str:
    return f"{error:+7.2%}" if error is not None else f"{'-':>7}"


def _row_line(s: el.Scored, cv: el.EngineScores) -> str:
    """One row's figures: pool and tokens shipped, the pool leave-one-source-out, the start decision (each
    '-' where the log does not print it, with the reason where a figure is deliberately not scored)."""
    if s.skipped:
        return "unscored: " + s.skipped
    line = f"pool {_pct(s.pool_error)} cv {_pct(cv.pool.get(s.row.id))} tokens {_pct(s.tokens_error)} starts {s.start_correct}"
    notes = [f"tokens not scored: {s.row.tokens_note}"] if s.row.tokens_note else []
    notes += [f"start not scored: {s.row.start_note}"] if s.row.start_note else []
    return line + "".join(f"  [{n}]" for n in notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", action="store_true", help="print each row's errors")
    args = parser.parse_args()
    from models_registry.resolve import load_model
    from models_registry.sources.gpu_catalog import find_gpu_sku

    def resolve_model(repo_id: str) -> tuple[el.ModelSpec, int | None]:
        resolved = load_model(repo_id)
        return resolved.spec, resolved.checkpoint_bytes

    print_engine_tables(resolve_model, find_gpu_sku, rows=args.rows)


if __name__ == "__main__":
    main()
