"""The shipped SAMPLE fleet parses with the expected counts (regenerate it with
tools/make_sample_fleet.py and update the numbers here when the generator changes)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path
from types import ModuleType

import polars as pl

from telemetry import SAMPLE_DIR, IngestResult, deployment_summary, ingest_dir
from tests.test_telemetry_support import model_ids

SAMPLE_GENERATOR = Path(__file__).resolve().parents[1] / "tools" / "make_sample_fleet.py"


@cache
def sample() -> IngestResult:
    return ingest_dir(SAMPLE_DIR, model_ids=model_ids())


def test_sample_fleet_counts_and_reconciles() -> None:
    result = sample()
    assert result.check_reconciliation() == []
    # the speed files: 7 deployments x 8 scrapes x (2 counters + ITL 19 bounds, +Inf, _count, _sum
    # + TTFT 22 bounds, +Inf, _count, _sum) = 7 x 8 x 49 = 2,744 samples; malformed/ adds 5 histogram lines
    assert result.summary() == {
        "files": 105,
        "rows_in": 4094 + 2744 + 5,
        "accepted": 4070 + 2744,
        "rejected": 24 + 5,
        "observations": 555,
        "samples": 3093 + 2744,
    }
    assert Counter(result.observations["source_kind"]) == {"prometheus": 528, "vllm_log": 24, "csv": 3}
    assert Counter(result.rejects["reason_code"]) == {
        "duplicate": 10,
        "malformed": 5,
        "unknown_model": 4,
        "wrong_unit": 2,
        "negative": 1,
        "unknown_gpu": 1,
        "unknown_file_type": 1,
        "bad_histogram": 5,  # decreasing buckets (3 lines), no +Inf bucket (2)
    }
    assert all(f.startswith(("malformed/", "fleet-export.csv")) for f in result.rejects["file"])


def test_sample_fleet_shows_the_whole_flow() -> None:
    result = sample()
    logs = result.observations.filter(pl.col("source_kind") == "vllm_log")
    fleet = logs.filter(~pl.col("file").str.starts_with("malformed/"))
    assert fleet["deployment_id"].n_unique() == 22
    assert fleet["gpu_sku"].null_count() == 0 and fleet["kv_cache_memory_bytes"].null_count() <= 2  # V0 logs
    assert set(fleet["gpu_sku"]) == {"h100-sxm-80gb", "h200-sxm-141gb", "a100-sxm-80gb", "l40s-48gb", "l4-24gb"}
    assert Counter(fleet["startup_outcome"]) == {"started": 22, "failed": 1}
    assert {"v0", "v1"} <= set(fleet["engine_generation"].drop_nulls())
    assert fleet.filter(pl.col("tp") * pl.col("pp") == 8).height >= 3  # DeepSeek-V3 8xH200 among them
    csv = result.observations.filter(pl.col("source_kind") == "csv")
    assert "mi300x-192gb" in set(csv["gpu_sku"])
    usage = result.samples.filter(pl.col("metric") == "kv_cache_usage").group_by("deployment_id").agg(pl.max("value"))
    saturated = usage.filter(pl.col("value") >= 0.95)["deployment_id"].to_list()
    assert len(saturated) >= 3
    waiting = result.samples.filter((pl.col("metric") == "requests_waiting") & (pl.col("value") > 0))
    # a full KV cache comes with a queue, except where the generator runs a "busy" load just under capacity
    assert set(saturated) <= set(waiting["deployment_id"]) | _busy_deployments()
    size = sum(p.stat().st_size for p in SAMPLE_DIR.rglob("*") if p.is_file())
    assert size < 2_000_000
    assert "SAMPLE" in (SAMPLE_DIR / "README.md").read_text()


def test_sample_fleet_summary_has_one_row_per_deployment() -> None:
    result = sample()
    summary = deployment_summary(result.observations.lazy(), result.samples.lazy()).collect()
    assert summary.height == summary["deployment_id"].n_unique() == 27
    assert summary["model_id"].null_count() == 0
    saturated = summary.filter((pl.col("peak_kv_usage") >= 0.95) & (pl.col("peak_requests_waiting") > 0))
    assert saturated.height >= 3 and saturated["preemptions_in_window"].max() > 0
    assert summary.filter(pl.col("deployment_id") == "chat-llama8b-l4")["failed_starts"].to_list() == [1]


def test_sample_fleet_measures_speed() -> None:
    """The speed files give every speed deployment a measured rate, TPOT and TTFT percentiles."""
    result = sample()
    summary = deployment_summary(result.observations.lazy(), result.samples.lazy()).collect()
    speed = summary.filter(pl.col("measured_output_tokens_per_second").is_not_null())
    assert speed.height == 7 and speed["speed_window_s"].to_list() == [21 * 3600.0] * 7
    for column in ("measured_tpot_mean_ms", "measured_tpot_p50_ms", "measured_tpot_p99_ms", "measured_ttft_p90_ms"):
        assert speed[column].null_count() == 0 and speed[column].min() > 0
    assert (speed["measured_tpot_p50_ms"] <= speed["measured_tpot_p99_ms"]).all()
    assert speed["observed_input_tokens"].min() > 0 and speed["observed_concurrency"].min() >= 1


@cache
def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_sample_fleet", SAMPLE_GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_sample_fleet", module)
    spec.loader.exec_module(module)
    return module


def _busy_deployments() -> set[str]:
    """The deployments tools/make_sample_fleet.py gives a "busy" load (90-98 % of their capacity)."""
    return {d.id for d in _generator().FLEET if d.load == "busy"}


def test_shipped_sample_is_what_the_generator_writes_today(tmp_path: Path) -> None:
    """The sample's "measured" numbers are capplan's own predictions perturbed: after a change to the
    capacity engine or the performance model the generator writes other files, and a stale sample would
    test the calibration against yesterday's model. Regenerate it (tools/make_sample_fleet.py) when this fails."""
    out = tmp_path / "sample"
    subprocess.run([sys.executable, str(SAMPLE_GENERATOR), "--out", str(out)], check=True, capture_output=True, timeout=300)
    shipped = {p.relative_to(SAMPLE_DIR): p.read_bytes() for p in sorted(SAMPLE_DIR.rglob("*")) if p.is_file()}
    written = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert sorted(written) == sorted(shipped)
    stale = [str(name) for name, data in written.items() if shipped[name] != data]
    assert stale == [], f"telemetry/sample is stale in {len(stale)} files, e.g. {stale[:3]}"
