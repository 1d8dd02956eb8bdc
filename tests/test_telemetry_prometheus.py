"""Prometheus snapshots: vLLM (V1 and V0 metric names) and DCGM, scrape times, and every
malformed case row by row."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

from tests.test_telemetry_support import FIXTURES, MIB, ingest, only_observation, rejects

PROM = FIXTURES / "prometheus"
LLAMA = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'
T0 = dt.datetime(2025, 6, 2, 14, 0, tzinfo=dt.UTC)


def _copy(tmp_path: Path, name: str, folder: str = "dep") -> Path:
    (tmp_path / folder).mkdir(exist_ok=True)
    shutil.copy(PROM / name, tmp_path / folder / name)
    return tmp_path


def _metrics(result: object) -> dict[str, float]:
    samples = result.samples  # type: ignore[attr-defined]
    return dict(zip(samples["metric"], samples["value"], strict=True))


def test_vllm_v1_scrape(tmp_path: Path) -> None:
    result = ingest(_copy(tmp_path, "vllm_v1_scrape.prom"))
    assert result.rejects.is_empty()
    assert _metrics(result) == {
        "requests_running": 27,
        "requests_waiting": 3,
        "kv_cache_usage": 0.8731,
        "preemptions_total": 14,
        "prompt_tokens_total": 41230511,  # a speed counter (telemetry.speed)
    }
    assert set(result.samples["ts"]) == {T0} and set(result.samples["ts_source"]) == {"comment"}
    assert set(result.samples["model_id"]) == {"meta-llama/Llama-3.1-8B-Instruct"}
    assert set(result.samples["deployment_id"]) == {"dep"} and set(result.samples["engine_index"]) == {"0"}
    obs = only_observation(result)  # cache_config_info has no model_name: it is the snapshot's model
    assert (obs["model_id"], obs["num_gpu_blocks"], obs["block_size"]) == (
        "meta-llama/Llama-3.1-8B-Instruct",
        28146,
        16,
    )
    assert (obs["gpu_memory_utilization"], obs["kv_cache_dtype"], obs["enable_prefix_caching"]) == (0.9, "auto", True)
    assert obs["source_kind"] == "prometheus" and obs["observed_at"] == T0 and "num_cpu_blocks" not in obs
    files = result.files.row(0, named=True)
    # 6 rows read (5 samples + cache_config_info); comments, gc and the e2e latency histogram ignored
    assert (files["rows_in"], files["accepted"], files["lines_total"]) == (6, 6, 29)
    assert files["lines_ignored"] == 23


def test_vllm_v0_names_and_local_model_path(tmp_path: Path) -> None:
    path = _copy(tmp_path, "vllm_v0_scrape.prom") / "dep" / "vllm_v0_scrape.prom"
    os.utime(path, (T0.timestamp(), T0.timestamp()))
    result = ingest(tmp_path)
    assert _metrics(result)["kv_cache_usage"] == 0.41  # vllm:gpu_cache_usage_perc
    assert set(result.samples["model_id"]) == {"Qwen/Qwen2.5-7B-Instruct"}  # basename of /models/...
    assert set(result.samples["ts_source"]) == {"mtime"} and set(result.samples["ts"]) == {T0}
    obs = only_observation(result)
    assert (obs["num_gpu_blocks"], obs["num_cpu_blocks"], obs["enable_prefix_caching"]) == (58210, 4681, False)


def test_dcgm_framebuffer_in_bytes(tmp_path: Path) -> None:
    result = ingest(_copy(tmp_path, "dcgm_h100.prom"))
    assert _metrics(result) == {"fb_free_bytes": 4112 * MIB, "fb_used_bytes": 76929 * MIB}
    row = result.samples.row(0, named=True)
    assert (row["gpu_sku"], row["gpu_index"], row["hostname"], row["pod"]) == (
        "h100-sxm-80gb",
        0,
        "gpu-node-07",
        "llama-8b-6d9c7b5f4-x2kqp",
    )
    assert row["gpu_uuid"].startswith("GPU-9d2f")
    assert result.observations.is_empty()


def test_concatenated_scrapes_and_sample_timestamps(tmp_path: Path) -> None:
    text = (
        f'# scraped_at: 2025-06-02T14:00:00Z\nvllm:num_requests_running{{engine="0",{LLAMA}}} 1\n'
        f'# scraped_at: 2025-06-02T14:15:00+00:00\nvllm:num_requests_running{{engine="0",{LLAMA}}} 2\n'
        f'vllm:num_requests_running{{engine="1",{LLAMA}}} 5 1748873700000\n'
    )
    result = ingest(tmp_path, {"d/m.prom": text})
    rows = result.samples.select("ts", "ts_source", "value").rows()
    assert rows == [
        (T0, "comment", 1.0),
        (T0 + dt.timedelta(minutes=15), "comment", 2.0),
        (dt.datetime(2025, 6, 2, 14, 15, tzinfo=dt.UTC), "sample", 5.0),
    ]


def test_sidecar_time_model_and_deployment(tmp_path: Path) -> None:
    text = 'vllm:num_requests_running{engine="0",model_name="llama-small"} 4\n'
    sidecar = "deployment_id: chat-prod\nmodel: meta-llama/Llama-3.1-8B-Instruct\nscraped_at: 2025-06-02T14:00:00\n"
    result = ingest(tmp_path, {"x/m.prom": text, "x/m.prom.meta.yaml": sidecar})
    row = result.samples.row(0, named=True)
    assert (row["deployment_id"], row["model_id"], row["model_name_raw"]) == (
        "chat-prod",
        "meta-llama/Llama-3.1-8B-Instruct",
        "llama-small",
    )
    assert (row["ts"], row["ts_source"]) == (T0, "sidecar")


def test_malformed_rows_each_rejected_with_a_reason(tmp_path: Path) -> None:
    text = "\n".join(
        [
            "# scraped_at: 2025-06-02T14:00:00Z",
            f'vllm:num_requests_running{{engine="0",{LLAMA}}} 3',  # 2 ok
            f'vllm:num_requests_waiting{{engine="0",{LLAMA[:30]}',  # 3 truncated labels
            f'vllm:num_requests_waiting{{engine="0",{LLAMA}}}',  # 4 truncated value
            f'vllm:kv_cache_usage_perc{{engine="0",{LLAMA}}} 87.5',  # 5 a percent
            f'vllm:num_requests_waiting{{engine="0",{LLAMA}}} -2',  # 6 negative
            f'vllm:num_preemptions_total{{engine="0",{LLAMA}}} NaN',  # 7 not finite
            'vllm:num_requests_running{engine="0",model_name="acme/secret-13b"} 1',  # 8 unknown model
            'vllm:num_requests_running{engine="0"} 1',  # 9 no model
            f'vllm:num_requests_running{{engine="0",{LLAMA}}} 3',  # 10 duplicate of 2
            f'vllm:gpu_cache_usage_perc{{engine="0",{LLAMA}}} 0.5',  # 11 ok (first usage sample)
            f'vllm:kv_cache_usage_perc{{engine="0",{LLAMA}}} 0.5',  # 12 the renamed metric, same series
            'DCGM_FI_DEV_FB_USED{gpu="0",modelName="NVIDIA H100 80GB HBM3"} 80661118976',  # 13 bytes, not MiB
            'DCGM_FI_DEV_FB_USED{gpu="1",modelName="NVIDIA GeForce RTX 9090"} 100',  # 14 unknown GPU
            'DCGM_FI_DEV_FB_FREE{gpu="2"} 2000000',  # 15 > 1 TiB in MiB, GPU unknown
            'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="-5"} 1.0',  # 16 negative
            "this is not a metric",  # 17
            "# scraped_at: yesterday",
            f'vllm:num_requests_running{{engine="0",{LLAMA}}} 3',  # 19 no usable time
        ]
    )
    result = ingest(tmp_path, {"d/m.prom": text})
    assert [(line, code) for _, line, code in rejects(result)] == [
        (3, "malformed"),
        (4, "malformed"),
        (5, "wrong_unit"),
        (6, "negative"),
        (7, "not_finite"),
        (8, "unknown_model"),
        (9, "missing_field"),
        (10, "duplicate"),
        (12, "duplicate"),
        (13, "wrong_unit"),
        (14, "unknown_gpu"),
        (15, "wrong_unit"),
        (16, "negative"),
        (17, "malformed"),
        (19, "bad_timestamp"),
    ]
    reasons = dict(zip(result.rejects["line"], result.rejects["reason"], strict=True))
    assert "a percent?" in reasons[5] and "looks like bytes" in reasons[13]
    assert "line 2" in reasons[10] and "line 11" in reasons[12]
    assert result.samples["line"].to_list() == [2, 11]
    assert result.rejects["raw_excerpt"][0].startswith("vllm:num_requests_waiting")


def test_duplicate_scrape_across_files(tmp_path: Path) -> None:
    scrape = f'# scraped_at: 2025-06-02T14:00:00Z\nvllm:num_requests_running{{engine="0",{LLAMA}}} 3\n'
    again = scrape + f'vllm:num_requests_waiting{{engine="0",{LLAMA}}} 0\n'
    result = ingest(tmp_path, {"d/a.prom": scrape, "d/b.prom": again})
    assert rejects(result) == [("d/b.prom", 2, "duplicate")]
    assert result.samples.height == 2
