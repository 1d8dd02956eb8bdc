"""deployment_summary: which observation's values win, and usage from the samples."""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
from polars.testing import assert_frame_equal

from telemetry.schema import OBSERVATION_SCHEMA, SAMPLE_SCHEMA, frame
from telemetry.summary import deployment_summary

T = dt.datetime(2025, 6, 2, tzinfo=dt.UTC)


def _obs(**values: Any) -> dict[str, Any]:
    return {"model_id": "m", "observed_at": T, "input_rows": 1, "file": "f", **values}


def _smp(deployment: str, metric: str, hour: int, value: float, **extra: Any) -> dict[str, Any]:
    return {"deployment_id": deployment, "metric": metric, "ts": T + dt.timedelta(hours=hour), "value": value, **extra}


def test_preferred_values_and_usage() -> None:
    observations = frame(
        [
            # a: a failed start, a good log start, a later cache_config_info, a CSV row
            _obs(
                deployment_id="a",
                source_kind="vllm_log",
                startup_outcome="failed",
                max_model_len=131072,
                kv_cache_memory_bytes=4,
            ),
            _obs(
                deployment_id="a",
                source_kind="vllm_log",
                startup_outcome="started",
                max_model_len=8192,
                kv_cache_memory_bytes=5,
                tp=1,
            ),
            _obs(
                deployment_id="a",
                source_kind="prometheus",
                observed_at=T + dt.timedelta(hours=5),
                num_gpu_blocks=300,
                block_size=16,
            ),
            _obs(deployment_id="a", source_kind="csv", num_gpu_blocks=299, gpu_sku="l4-24gb", tp=2),
            # b: only a CSV row with its own peaks
            _obs(deployment_id="b", source_kind="csv", peak_kv_usage=0.7, peak_requests_running=9.0),
        ],
        OBSERVATION_SCHEMA,
    )
    samples = frame(
        [
            _smp("a", "kv_cache_usage", 0, 0.5, source_metric="u", engine_index="0"),
            _smp("a", "kv_cache_usage", 1, 0.99, source_metric="u", engine_index="0"),
            _smp("a", "preemptions_total", 0, 10, source_metric="p", engine_index="0"),
            _smp("a", "preemptions_total", 1, 14, source_metric="p", engine_index="0"),
            _smp("a", "preemptions_total", 2, 3, source_metric="p", engine_index="0"),  # restarted
            _smp("a", "requests_waiting", 1, 6, source_metric="w", engine_index="0"),
            # c: only DCGM
            _smp("c", "fb_used_bytes", 0, 1000, source_metric="f", gpu_index=0, gpu_uuid="G0", gpu_sku="h100-sxm-80gb"),
            _smp("c", "fb_used_bytes", 0, 1200, source_metric="f", gpu_index=1, gpu_uuid="G1", gpu_sku="h100-sxm-80gb"),
        ],
        SAMPLE_SCHEMA,
    )
    columns = [
        "deployment_id",
        "gpu_sku",
        "tp",
        "max_model_len",
        "kv_cache_memory_bytes",
        "num_gpu_blocks",
        "latest_startup_outcome",
        "failed_starts",
        "peak_kv_usage",
        "peak_requests_running",
        "peak_requests_waiting",
        "preemptions_in_window",
        "peak_fb_used_bytes",
        "gpus_seen",
        "sources",
        "n_observations",
        "n_samples",
    ]
    got = deployment_summary(observations.lazy(), samples.lazy()).collect().select(columns)
    expected = pl.DataFrame(
        {
            "deployment_id": ["a", "b", "c"],
            "gpu_sku": ["l4-24gb", None, "h100-sxm-80gb"],
            "tp": [1, None, None],  # the log beats the CSV
            "max_model_len": [8192, None, None],  # the failed start only when nothing else says
            "kv_cache_memory_bytes": [5, None, None],
            "num_gpu_blocks": [299, None, None],  # the CSV beats cache_config_info
            "latest_startup_outcome": ["started", None, None],
            "failed_starts": [1, 0, None],
            "peak_kv_usage": [0.99, 0.7, None],
            "peak_requests_running": [None, 9.0, None],
            "peak_requests_waiting": [6.0, None, None],
            "preemptions_in_window": [7.0, None, 0.0],  # 10 -> 14 (+4), reset -> 3 (+3)
            "peak_fb_used_bytes": [None, None, 1200],
            "gpus_seen": [0, None, 2],
            "sources": ["csv,prometheus,vllm_log", "csv", None],
            "n_observations": [4, 1, 0],
            "n_samples": [6, 0, 2],
        },
        schema_overrides={"tp": pl.Int32, "failed_starts": pl.Int32, "gpus_seen": pl.Int32, "n_observations": pl.Int32},
    )
    assert_frame_equal(got, expected)
