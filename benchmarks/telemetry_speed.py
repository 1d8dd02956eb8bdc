"""Ingesting the speed telemetry (token counters and latency histograms) and summarising it.

A synthetic drop folder of `--deployments` vLLM 0.33 snapshots with `--scrapes` scrapes each: per
scrape the running / waiting gauges, KV usage and preemptions (what capplan read before speed),
and for the speed run also `vllm:generation_tokens_total`, `vllm:prompt_tokens_total` and the
`vllm:inter_token_latency_seconds` and `vllm:time_to_first_token_seconds` histograms with vLLM's own
bucket bounds (49 more lines a scrape). The same-run baseline is the same folder without the speed
lines. Prints lines, lines/s of `ingest_dir` and seconds of `deployment_summary` (which now computes
rates and `histogram_quantile` per deployment) for both, and peak RSS.

    .venv/bin/python -m benchmarks.telemetry_speed [--deployments 200] [--scrapes 24]
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
from pathlib import Path

from benchmarks.estimate import cores
from telemetry import deployment_summary, ingest_dir

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
        80.0, 160.0, 640.0, 2560.0)  # fmt: skip


def _histogram(name: str, labels: str, bounds: tuple[float, ...], total: int, rng: random.Random) -> list[str]:
    counts, running = [], 0
    for _ in bounds:
        running = min(total, running + rng.randrange(0, max(1, total // 4)))
        counts.append(running)
    lines = [f'{name}_bucket{{{labels},le="{le}"}} {c}.0' for le, c in zip(bounds, counts, strict=True)]
    return [*lines, f'{name}_bucket{{{labels},le="+Inf"}} {total}.0', f"{name}_count{{{labels}}} {total}.0",
            f"{name}_sum{{{labels}}} {total * 0.03:.3f}"]  # fmt: skip


def write_folder(root: Path, deployments: int, scrapes: int, speed: bool) -> int:
    """The drop folder; returns its line count."""
    rng = random.Random(20250602)
    labels = f'engine="0",model_name="{MODEL}"'
    lines_total = 0
    for d in range(deployments):
        lines: list[str] = []
        generated = requests = 0
        for s in range(scrapes):
            generated += rng.randrange(100_000, 200_000)
            requests += rng.randrange(200, 400)
            lines += [
                f"# scraped_at: 2025-06-02T{s % 24:02d}:{s // 24:02d}:00Z",
                f"vllm:num_requests_running{{{labels}}} {rng.randrange(1, 64)}.0",
                f"vllm:num_requests_waiting{{{labels}}} 0.0",
                f"vllm:kv_cache_usage_perc{{{labels}}} {rng.random():.4f}",
                f"vllm:num_preemptions_total{{{labels}}} {s}.0",
            ]
            if speed:
                lines += [
                    f"vllm:generation_tokens_total{{{labels}}} {generated}.0",
                    f"vllm:prompt_tokens_total{{{labels}}} {generated * 4}.0",
                    *_histogram("vllm:inter_token_latency_seconds", labels, ITL, generated - requests, rng),
                    *_histogram("vllm:time_to_first_token_seconds", labels, TTFT, requests, rng),
                ]
        folder = root / f"dep-{d:05d}"
        folder.mkdir(parents=True)
        (folder / "vllm-metrics.prom").write_text("\n".join(lines) + "\n", encoding="utf-8")
        lines_total += len(lines)
    return lines_total


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # ru_maxrss is KiB on Linux


def run(root: Path, deployments: int, scrapes: int, speed: bool) -> tuple[int, float, float, int]:
    lines = write_folder(root, deployments, scrapes, speed)
    start = time.perf_counter()
    result = ingest_dir(root, model_ids=[MODEL])
    ingest_s = time.perf_counter() - start
    assert result.check_reconciliation() == [] and result.rejects.is_empty()
    start = time.perf_counter()
    summary = deployment_summary(result.observations.lazy(), result.samples.lazy()).collect()
    summary_s = time.perf_counter() - start
    if speed:
        assert summary["measured_tpot_p99_ms"].null_count() == 0
    return lines, ingest_s, summary_s, summary.height


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=200)
    parser.add_argument("--scrapes", type=int, default=24)
    args = parser.parse_args()
    print(cores())
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, speed in (("baseline (no speed series)", False), ("with speed series", True)):
            lines, ingest_s, summary_s, n = run(Path(tmp) / name.split()[0], args.deployments, args.scrapes, speed)
            rows[name] = (lines, ingest_s, summary_s)
            print(
                f"{name:28s} {lines:>10,} lines  ingest {ingest_s:6.2f} s ({lines / ingest_s:>9,.0f} lines/s)  "
                f"summary {summary_s:5.2f} s  {n} deployments"
            )
    (b_lines, b_ingest, b_summary), (s_lines, s_ingest, s_summary) = rows.values()
    print(
        f"speed series: x{s_lines / b_lines:.1f} lines, ingest x{s_ingest / b_ingest:.2f} time "
        f"(lines/s x{(s_lines / s_ingest) / (b_lines / b_ingest):.2f}), summary x{s_summary / b_summary:.2f}; "
        f"peak RSS {peak_rss_gib():.2f} GiB"
    )


if __name__ == "__main__":
    main()
