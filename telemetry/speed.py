"""How fast a deployment ran: measured throughput, TPOT (inter-token latency) and TTFT from its samples.

Pure transforms over `raw.telemetry_samples` (one `collect()` at the edge, in the caller), the same
arithmetic PromQL does over a window:

- a counter's increase over the window is the sum of its steps, a step below zero being a restart
  (the new value is the increase), like `increase()` without the extrapolation to the window's
  edges; a series seen once has no window, and then its value counts as the increase since the
  engine started (a single snapshot's histogram is the distribution since start);
- measured output tokens/s = sum over series of increase(generation_tokens_total) / the series'
  span (`sum(rate(...))`); without token counters, SGLang's own `gen_throughput` gauge (mean of
  its non-zero samples);
- mean TPOT / TTFT = increase(_sum) / increase(_count); percentiles from the buckets' increases,
  summed over series per `le`, interpolated as `histogram_quantile` does (`histogram_quantile`);
- requests in the window = increase of the TTFT histogram's `_count` (one observation per
  request), so mean prompt and output lengths = increase(prompt / generation tokens) / requests;
- observed concurrency = the mean, over scrapes with at least one request running, of the running
  requests summed over the deployment's engines, per engine (the busy-time batch a prediction is
  made at).

Where a deployment exposes the inter-token histogram under both names (vLLM 0.10's deprecation
window), the newer `inter_token_latency_seconds` is used and the other ignored (never summed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

SPEED_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "deployment_id": pl.String,
    "speed_window_s": pl.Float64,
    "measured_output_tokens_per_second": pl.Float64,
    "measured_throughput_source": pl.String,  # generation_tokens_total | gen_throughput
    "requests_in_window": pl.Float64,
    "observed_input_tokens": pl.Float64,
    "observed_output_tokens": pl.Float64,
    "observed_concurrency": pl.Float64,
    "engines_seen": pl.Int32,
    "measured_tpot_mean_ms": pl.Float64,
    "measured_tpot_p50_ms": pl.Float64,
    "measured_tpot_p90_ms": pl.Float64,
    "measured_tpot_p99_ms": pl.Float64,
    "measured_ttft_mean_ms": pl.Float64,
    "measured_ttft_p50_ms": pl.Float64,
    "measured_ttft_p90_ms": pl.Float64,
    "measured_ttft_p99_ms": pl.Float64,
}
QUANTILES = (0.5, 0.9, 0.99)
_HISTOGRAMS = {"itl_seconds": "tpot", "ttft_seconds": "ttft"}
_SOURCE_RANK = {  # the histogram name preferred where a deployment exposes two
    "vllm:inter_token_latency_seconds": 0,
    "sglang:inter_token_latency_seconds": 0,
    "vllm:time_per_output_token_seconds": 1,
    "sglang:time_per_output_token_seconds": 1,
}
_COUNTERS = ("generation_tokens_total", "prompt_tokens_total")


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative buckets [(le, count)], as Prometheus' `histogram_quantile`
    (promql/quantile.go `bucketQuantile`): linear within the bucket holding rank q x total, the
    lowest bucket starting at 0 (when its bound is positive), and the highest finite bound when the
    rank falls in the +Inf bucket. None where Prometheus returns NaN (no +Inf bucket, fewer than
    two buckets, no observations)."""
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(buckets)
    if len(ordered) < 2 or ordered[-1][0] != math.inf:
        return None
    # cumulative counts can only grow; a lower count after a restart mid-window is raised as Prometheus does
    counts = [c for _, c in ordered]
    for i in range(1, len(counts)):
        counts[i] = max(counts[i], counts[i - 1])
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if b == len(ordered) - 1:
        return ordered[-2][0]
    if b == 0 and ordered[0][0] <= 0:
        return ordered[0][0]
    start = 0.0 if b == 0 else ordered[b - 1][0]
    end = ordered[b][0]
    count = counts[b]
    if b > 0:
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count <= 0:
        return end
    return start + (end - start) * (rank / count)


def series_increase(samples: pl.LazyFrame, counters: Sequence[str] | None = None) -> pl.LazyFrame:
    """Per series of the speed metrics (deployment, metric, source, labels, le): samples, time span
    in seconds and increase over the window (restarts counted; one sample = its value). `counters`: these
    counters instead (the prefix cache's, `telemetry.prefix_cache`)."""
    wanted = (
        pl.col("metric").is_in(_COUNTERS)
        | pl.col("metric").str.starts_with("itl_seconds_")
        | pl.col("metric").str.starts_with("ttft_seconds_")
        if counters is None
        else pl.col("metric").is_in(list(counters))
    )
    speed = samples.filter(wanted).with_columns(pl.col("le").fill_null(-math.inf).alias("_le"), pl.col("series").fill_null(""))
    key = ["deployment_id", "metric", "source_metric", "series", "_le"]
    step = pl.col("value").diff().over(key, order_by="ts")
    stepped = speed.with_columns(pl.when(step < 0).then(pl.col("value")).otherwise(step).alias("_step"))
    return stepped.group_by(key).agg(
        pl.len().alias("n"),
        ((pl.col("ts").max() - pl.col("ts").min()).dt.total_microseconds() / 1e6).alias("span_s"),
        pl.col("_step").sum().alias("_steps"),
        pl.col("value").sort_by("ts").last().alias("_last"),
        pl.col("engine_index").drop_nulls().first().alias("engine_index"),
    ).with_columns(
        pl.when(pl.col("n") >= 2).then(pl.col("_steps")).otherwise(pl.col("_last")).alias("increase"),
        pl.col("_le").replace(-math.inf, None).alias("le"),
    ).drop("_steps", "_last", "_le")


def _quantile_expr(q: float) -> pl.Expr:
    return pl.struct("les", "counts").map_elements(
        lambda s: histogram_quantile(q, list(zip(s["les"], s["counts"], strict=True))),
        return_dtype=pl.Float64,
    )


def _histograms(increases: pl.LazyFrame) -> pl.LazyFrame:
    """Per deployment: mean and percentiles (ms) of the TPOT and TTFT histograms."""
    hist = increases.filter(pl.col("metric").str.starts_with("itl_seconds_") | pl.col("metric").str.starts_with("ttft_seconds_"))
    hist = hist.with_columns(
        pl.col("metric").str.replace(r"_(bucket|sum|count)$", "").alias("_hist"),
        pl.col("metric").str.extract(r"_(bucket|sum|count)$", 1).alias("_part"),
        pl.col("source_metric").str.replace(r"_(bucket|sum|count)$", "").alias("_base"),
    )
    rank = pl.col("_base").replace_strict(_SOURCE_RANK, default=0, return_dtype=pl.Int32)
    chosen = hist.with_columns(rank.alias("_rank")).filter(
        pl.col("_rank") == pl.col("_rank").min().over(["deployment_id", "_hist"])
    )
    buckets = (
        chosen.filter(pl.col("_part") == "bucket")
        .group_by(["deployment_id", "_hist", "le"])
        .agg(pl.col("increase").sum())
        .sort("le")
        .group_by(["deployment_id", "_hist"])
        .agg(pl.col("le").alias("les"), pl.col("increase").alias("counts"))
    )
    totals = (
        chosen.filter(pl.col("_part").is_in(["sum", "count"]))
        .group_by(["deployment_id", "_hist"])
        .agg(
            pl.col("increase").filter(pl.col("_part") == "sum").sum().alias("_sum"),
            pl.col("increase").filter(pl.col("_part") == "count").sum().alias("_count"),
        )
    )
    per = totals.join(buckets, on=["deployment_id", "_hist"], how="full", coalesce=True).with_columns(
        (pl.col("_sum") / pl.when(pl.col("_count") > 0).then(pl.col("_count")) * 1e3).alias("mean_ms"),
        *((_quantile_expr(q) * 1e3).alias(f"p{round(q * 100)}_ms") for q in QUANTILES),
    )
    out = []
    for hist_name, label in _HISTOGRAMS.items():
        out.append(
            per.filter(pl.col("_hist") == hist_name).select(
                "deployment_id",
                pl.col("mean_ms").alias(f"measured_{label}_mean_ms"),
                *(pl.col(f"p{round(q * 100)}_ms").alias(f"measured_{label}_p{round(q * 100)}_ms") for q in QUANTILES),
                *([pl.col("_count").alias("requests_in_window")] if label == "ttft" else []),
            )
        )
    return out[0].join(out[1], on="deployment_id", how="full", coalesce=True)


def sample_speed(samples: pl.LazyFrame) -> pl.LazyFrame:
    """One row per deployment with speed samples (`SPEED_SCHEMA`)."""
    increases = series_increase(samples)
    counters = increases.filter(pl.col("metric").is_in(_COUNTERS))
    rate = pl.when((pl.col("n") >= 2) & (pl.col("span_s") > 0)).then(pl.col("increase") / pl.col("span_s"))
    tokens = counters.group_by("deployment_id").agg(
        rate.filter(pl.col("metric") == "generation_tokens_total").sum().alias("_rate"),
        (pl.col("n") >= 2).filter(pl.col("metric") == "generation_tokens_total").any().alias("_has_rate"),
        pl.col("increase").filter(pl.col("metric") == "generation_tokens_total").sum().alias("_generated"),
        pl.col("increase").filter(pl.col("metric") == "prompt_tokens_total").sum().alias("_prompted"),
        pl.col("span_s").filter(pl.col("metric") == "generation_tokens_total").max().alias("speed_window_s"),
        pl.col("engine_index").n_unique().alias("_engines"),
    )
    gauge = (
        samples.filter((pl.col("metric") == "gen_throughput") & (pl.col("value") > 0))
        .group_by("deployment_id")
        .agg(pl.col("value").mean().alias("_gauge"))
    )
    running = samples.filter(pl.col("metric") == "requests_running")
    busy = (
        running.group_by(["deployment_id", "ts"])
        .agg(pl.col("value").sum().alias("_running"), pl.col("engine_index").n_unique().alias("_n"))
        .filter(pl.col("_running") >= 1)
        .group_by("deployment_id")
        .agg((pl.col("_running") / pl.col("_n").clip(lower_bound=1)).mean().alias("observed_concurrency"))
    )
    ids = pl.concat([tokens.select("deployment_id"), gauge.select("deployment_id"), _histograms(increases).select("deployment_id")]).unique()
    joined = (
        ids.join(tokens, on="deployment_id", how="left")
        .join(gauge, on="deployment_id", how="left")
        .join(_histograms(increases), on="deployment_id", how="left")
        .join(busy, on="deployment_id", how="left")
    )
    per_request = pl.when(pl.col("requests_in_window") > 0).then(pl.col("requests_in_window"))
    return joined.select(
        "deployment_id",
        "speed_window_s",
        pl.when(pl.col("_has_rate")).then(pl.col("_rate")).otherwise(pl.col("_gauge")).alias(
            "measured_output_tokens_per_second"
        ),
        pl.when(pl.col("_has_rate"))
        .then(pl.lit("generation_tokens_total"))
        .when(pl.col("_gauge").is_not_null())
        .then(pl.lit("gen_throughput"))
        .alias("measured_throughput_source"),
        "requests_in_window",
        (pl.col("_prompted") / per_request).alias("observed_input_tokens"),
        (pl.col("_generated") / per_request).alias("observed_output_tokens"),
        "observed_concurrency",
        pl.col("_engines").fill_null(1).clip(lower_bound=1).cast(pl.Int32).alias("engines_seen"),
        *(pl.col(c) for c in SPEED_SCHEMA if c.startswith(("measured_tpot", "measured_ttft"))),
    ).cast(SPEED_SCHEMA).select(list(SPEED_SCHEMA))  # type: ignore[arg-type]
