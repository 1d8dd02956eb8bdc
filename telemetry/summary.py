"""One row per deployment: what the marts compare with capplan's prediction.

Pure LazyFrame -> LazyFrame transforms over the `raw.telemetry_*` frames (see README.md);
`deployment_summary(...).collect()` at the edge. A SQL staging view can compute the same thing.

Which observation wins, per column (first non-null): startup logs of engine starts that did not
fail, then CSV/Parquet rows, then `vllm:cache_config_info`, then failed starts; the latest
first within each. Usage comes from the samples (and the observations' own peaks, for
deployments only seen in an export); speed (measured tokens/s, TPOT, TTFT, observed concurrency
and request lengths) from `telemetry.speed.sample_speed`.
"""

from __future__ import annotations

import polars as pl

from capacity.columns import OBSERVED_MEMORY_TERMS
from telemetry.prefix_cache import sample_prefix_cache
from telemetry.speed import sample_speed

SETTINGS = (
    "model_id",
    "gpu_sku",
    "tp",
    "pp",
    "dp",
    "ep",
    "engine",
    "engine_version",
    "engine_generation",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "weight_dtype",
    "quantization",
    "kv_cache_dtype",
    "block_size",
    "enable_prefix_caching",
    "enforce_eager",
    "triton_kernels",
    "disable_custom_all_reduce",
    "gpu_peer_access",
    "unmodelled_features",
    "speculative_config",
)
MEASURED = (
    "total_gpu_memory_bytes",
    *OBSERVED_MEMORY_TERMS,
    "kv_cache_memory_bytes",
    "num_gpu_blocks",
    "kv_cache_tokens",
    "max_concurrency",
    "max_concurrency_tokens",
)
_RANK = {"vllm_log": 0, "csv": 1, "parquet": 1, "prometheus": 2}


def ranked_observations(observations: pl.LazyFrame) -> pl.LazyFrame:
    """Observations in the order their values are preferred (best first) within a deployment."""
    rank = pl.col("source_kind").replace_strict(_RANK, default=3, return_dtype=pl.Int32)
    failed = (pl.col("startup_outcome") == "failed").fill_null(False)
    return observations.with_columns(pl.when(failed).then(9).otherwise(rank).alias("_rank")).sort(
        ["deployment_id", "_rank", "observed_at"], descending=[False, False, True], nulls_last=True
    )


def sample_usage(samples: pl.LazyFrame) -> pl.LazyFrame:
    """Per deployment: peak and p95 KV usage, peak running / waiting, preemptions added during
    the window (counter resets counted), peak framebuffer used, GPUs seen, time span."""
    series = ["deployment_id", "source_metric", "engine_index", "gpu_index", "gpu_uuid", "hostname"]
    step = pl.col("value").diff().over(series, order_by="ts")
    with_increase = samples.with_columns(
        pl.when(pl.col("metric") != "preemptions_total")
        .then(None)
        .when(step.is_null())
        .then(0.0)
        .when(step < 0)
        .then(pl.col("value"))  # the counter restarted from zero
        .otherwise(step)
        .alias("_increase")
    )

    def metric(name: str) -> pl.Expr:
        return pl.col("value").filter(pl.col("metric") == name)

    return with_increase.group_by("deployment_id").agg(
        metric("kv_cache_usage").max().alias("peak_kv_usage"),
        metric("kv_cache_usage").quantile(0.95, interpolation="nearest").alias("p95_kv_usage"),
        metric("requests_running").max().alias("peak_requests_running"),
        metric("requests_waiting").max().alias("peak_requests_waiting"),
        pl.col("_increase").sum().alias("preemptions_in_window"),
        metric("fb_used_bytes").max().cast(pl.Int64).alias("peak_fb_used_bytes"),
        pl.col("gpu_uuid").drop_nulls().n_unique().cast(pl.Int32).alias("gpus_seen"),
        pl.col("gpu_sku").drop_nulls().first().alias("_dcgm_gpu_sku"),
        pl.col("model_id").drop_nulls().first().alias("_sample_model_id"),
        pl.col("ts").min().alias("first_sample_at"),
        pl.col("ts").max().alias("last_sample_at"),
        pl.len().cast(pl.Int64).alias("n_samples"),
    )


def deployment_summary(
    observations: pl.LazyFrame, samples: pl.LazyFrame, usage: pl.LazyFrame | None = None
) -> pl.LazyFrame:
    """One row per deployment_id seen in observations or samples. `usage`: `sample_usage` computed
    elsewhere (the sample store's, by DuckDB over Parquet: `SampleStore.usage`); then `samples`
    is not read."""
    ranked = ranked_observations(observations)
    chosen = ranked.group_by("deployment_id", maintain_order=True).agg(
        *(pl.col(c).drop_nulls().first() for c in (*SETTINGS, *MEASURED)),
        pl.col("startup_outcome").filter(pl.col("source_kind") == "vllm_log").first().alias("latest_startup_outcome"),
        (pl.col("startup_outcome") == "failed").sum().cast(pl.Int32).alias("failed_starts"),
        pl.col("peak_kv_usage").max().alias("_obs_peak_kv_usage"),
        pl.col("peak_requests_running").max().alias("_obs_peak_running"),
        pl.col("peak_requests_waiting").max().alias("_obs_peak_waiting"),
        pl.col("source_kind").unique().sort().str.join(",").alias("sources"),
        pl.len().cast(pl.Int32).alias("n_observations"),
        pl.col("observed_at").max().alias("last_observed_at"),
    )
    usage = sample_usage(samples) if usage is None else usage
    ids = pl.concat([chosen.select("deployment_id"), usage.select("deployment_id")]).unique()
    return (
        ids.join(chosen, on="deployment_id", how="left")
        .join(usage, on="deployment_id", how="left")
        .join(sample_speed(samples), on="deployment_id", how="left")
        .join(sample_prefix_cache(samples), on="deployment_id", how="left")
        .with_columns(
            pl.coalesce("gpu_sku", "_dcgm_gpu_sku").alias("gpu_sku"),
            pl.coalesce("model_id", "_sample_model_id").alias("model_id"),
            pl.max_horizontal("peak_kv_usage", "_obs_peak_kv_usage").alias("peak_kv_usage"),
            pl.max_horizontal("peak_requests_running", "_obs_peak_running").alias("peak_requests_running"),
            pl.max_horizontal("peak_requests_waiting", "_obs_peak_waiting").alias("peak_requests_waiting"),
            pl.col("n_observations").fill_null(0),
            pl.col("n_samples").fill_null(0),
        )
        .drop("_dcgm_gpu_sku", "_sample_model_id", "_obs_peak_kv_usage", "_obs_peak_running", "_obs_peak_waiting")
        .sort("deployment_id")
    )
