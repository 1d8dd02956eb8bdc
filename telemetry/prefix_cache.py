"""The prefix-cache hit rate each deployment measured: the share of prompt tokens served from the cache.

vLLM 0.33 counts the prompt tokens each request looked up and those it found (v1/metrics/loggers.py
`vllm:prefix_cache_queries` / `vllm:prefix_cache_hits`, from `PrefixCacheStats`): over a window the hit rate is
increase(hits) / increase(queries), summed over the engine's series (restarts counted as `series_increase`
counts them). SGLang 0.5.23 exports only its recent hit rate as a gauge (observability/metrics_collector.py
`sglang:cache_hit_rate`): where there are no counters, the mean of its samples. The rate is what a workload's
`prefix_hit_rate` means (`capacity.features.prefix_caching`), so a measured one can stand in for a stated one.
"""

from __future__ import annotations

import polars as pl

from telemetry.speed import series_increase

PREFIX_CACHE_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "deployment_id": pl.String,
    "prefix_cache_queries": pl.Float64,  # prompt tokens looked up in the window (vLLM)
    "prefix_cache_hits": pl.Float64,  # of them, found in the cache
    "measured_prefix_hit_rate": pl.Float64,  # hits / queries; SGLang: the mean of its gauge
    "prefix_hit_rate_source": pl.String,  # prefix_cache_hits_total | prefix_cache_hit_rate
}
_QUERIES, _HITS, _GAUGE = "prefix_cache_queries_total", "prefix_cache_hits_total", "prefix_cache_hit_rate"


def sample_prefix_cache(samples: pl.LazyFrame) -> pl.LazyFrame:
    """One row per deployment with prefix-cache samples (`PREFIX_CACHE_SCHEMA`)."""
    increases = series_increase(samples, (_QUERIES, _HITS))
    counted = increases.group_by("deployment_id").agg(
        pl.col("increase").filter(pl.col("metric") == _QUERIES).sum().alias("prefix_cache_queries"),
        pl.col("increase").filter(pl.col("metric") == _HITS).sum().alias("prefix_cache_hits"),
    )
    gauge = (
        samples.filter(pl.col("metric") == _GAUGE).group_by("deployment_id").agg(pl.col("value").mean().alias("_gauge"))
    )
    ids = pl.concat([counted.select("deployment_id"), gauge.select("deployment_id")]).unique()
    counts = pl.col("prefix_cache_queries") > 0
    return (
        ids.join(counted, on="deployment_id", how="left")
        .join(gauge, on="deployment_id", how="left")
        .select(
            "deployment_id",
            "prefix_cache_queries",
            "prefix_cache_hits",
            pl.when(counts)
            .then(pl.col("prefix_cache_hits") / pl.col("prefix_cache_queries"))
            .otherwise(pl.col("_gauge"))
            .alias("measured_prefix_hit_rate"),
            pl.when(counts)
            .then(pl.lit(_HITS))
            .when(pl.col("_gauge").is_not_null())
            .then(pl.lit(_GAUGE))
            .alias("prefix_hit_rate_source"),
        )
        .cast(PREFIX_CACHE_SCHEMA)  # type: ignore[arg-type]
    )


def model_hit_rates(deployments: pl.DataFrame) -> dict[str, float]:
    """The hit rate per model over its deployments (`raw.telemetry_deployments`): their hits over their queries
    where vLLM counted them, else the mean of SGLang's gauges; what a workload that states none is valued at."""
    measured = deployments.filter(pl.col("model_id").is_not_null() & pl.col("measured_prefix_hit_rate").is_not_null())
    counted = pl.col("prefix_cache_queries").fill_null(0) > 0
    per_model = measured.group_by("model_id").agg(
        pl.col("prefix_cache_hits").filter(counted).sum().alias("hits"),
        pl.col("prefix_cache_queries").filter(counted).sum().alias("queries"),
        pl.col("measured_prefix_hit_rate").filter(~counted).mean().alias("gauge"),
    )
    rate = pl.when(pl.col("queries") > 0).then(pl.col("hits") / pl.col("queries")).otherwise(pl.col("gauge"))
    rows = per_model.select("model_id", rate.alias("rate")).drop_nulls().iter_rows()
    return {str(model): float(value) for model, value in rows}
