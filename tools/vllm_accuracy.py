"""Compare capplan's vLLM profile with the public startup-log measurements.

    python tools/vllm_accuracy.py [--rows]

Prints, per row, measured vs predicted weights, activation peak, non-torch memory, KV pool and KV
tokens, then the median absolute error and the shares within 1 % and 5 % for the KV pool and KV tokens:
the in-sample figures of the shipped coefficients. The out-of-sample (leave-one-source-out) figures,
the ones to report, come from tools/overhead_cv.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capacity.dtypes import GIB
from capacity.spec import ModelSpec
from evaluation.measurements import compare, load_measurements, summarize
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku


def resolve_model(repo_id: str) -> tuple[ModelSpec, int | None]:
    resolved = load_model(repo_id)
    return resolved.spec, resolved.checkpoint_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", action="store_true", help="print every row")
    args = parser.parse_args()
    results = compare(load_measurements(), resolve_model, find_gpu_sku, dp_rows=True)
    skipped = 0
    for result in results:
        if result.predicted is None:
            skipped += 1
            if args.rows:
                print(f"SKIP {result.row.id}: {result.skipped}")
            continue
        p, r = result.predicted, result.row
        if args.rows:
            def g(x: float | None) -> str:
                return "   -  " if x is None else f"{x:6.2f}"
            print(
                f"{r.id[:60]:60} v{r.vllm_version or '?':7} tp{r.tp} pp{r.pp} | "
                f"W {g(r.weights_gib)}/{p.weights_bytes_per_gpu / GIB:6.2f} "
                f"A {g(r.activation_peak_gib)}/{p.activation_peak_bytes_per_gpu / GIB:5.2f} "
                f"NT {g(r.non_torch_gib)}/{p.non_torch_bytes_per_gpu / GIB:5.2f} "
                f"KV {g(r.kv_cache_memory_gib)}/{p.kv_budget_bytes_per_gpu / GIB:6.2f} "
                f"({'   -  ' if result.kv_pool_error is None else f'{result.kv_pool_error:+6.1%}'}) "
                f"tok {r.kv_cache_tokens or '-'}/{p.kv_cache_tokens} "
                f"({'   -  ' if result.kv_tokens_error is None else f'{result.kv_tokens_error:+6.1%}'})"
            )
    print(f"rows: {len(results)}, predicted: {len(results) - skipped}, skipped: {skipped}")
    known = [r for r in results if r.predicted is not None and r.row.vllm_version]
    for label, subset in (("all rows", [r for r in results if r.predicted is not None]), ("stated version", known)):
        pool_errors = [e for r in subset if (e := r.kv_pool_error) is not None]
        token_errors = [e for r in subset if (e := r.kv_tokens_error) is not None]
        pool, tokens = summarize(pool_errors), summarize(token_errors)
        for name, errors, s in (("KV pool:  ", pool_errors, pool), ("KV tokens:", token_errors, tokens)):
            within_1 = sum(abs(e) <= 0.01 for e in errors) / len(errors) if errors else float("nan")
            print(f"{label:15} {name} n={s.n} median |error| {s.median_abs_error:.2%}, "
                  f"within 1%: {within_1:.0%}, within 5%: {s.within_5pct:.0%}")


if __name__ == "__main__":
    main()
