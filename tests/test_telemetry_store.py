"""The telemetry sample store (telemetry/store.py): Hive-partitioned Parquet by day, on a
local folder and on S3 (moto's real S3 server on 127.0.0.1, extra `s3`).

Expected usage figures are derived by hand below (and, on the SAMPLE fleet, must equal what
`summary.sample_usage` computes with Polars from the same frame)."""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from telemetry import SAMPLE_DIR, ingest_dir, sample_usage
from telemetry.schema import REJECT_SCHEMA, SAMPLE_SCHEMA, frame
from telemetry.store import SampleStore, StoreError, with_store_rejects
from tests.conftest import require_extra

UTC = dt.UTC
T0 = dt.datetime(2026, 11, 30, 23, 59, 0, tzinfo=UTC)


def sample(deployment: str, metric: str, value: float, seconds: int, **labels: Any) -> dict[str, Any]:
    return {"deployment_id": deployment, "metric": metric, "value": value, "ts": T0 + dt.timedelta(seconds=seconds),
            "ts_source": "sample", "source_metric": labels.pop("source_metric", f"vllm:{metric}"),
            "file": "batch.prom", "line": seconds, **labels}  # fmt: skip


def hand_frame() -> pl.DataFrame:
    """d1: 21 KV-usage samples 0.00 .. 1.00 (15 s apart, across midnight), a preemption counter
    0, 3, 5, 1 (restart), 4; d2: framebuffer on two GPUs."""
    rows = [sample("d1", "kv_cache_usage", k / 20, 15 * k) for k in range(21)]
    rows += [sample("d1", "preemptions_total", v, 15 * k) for k, v in enumerate([0.0, 3.0, 5.0, 1.0, 4.0])]
    rows += [
        sample("d2", "fb_used_bytes", 1_500_000_000.75, 0, source_metric="DCGM_FI_DEV_FB_USED", gpu_uuid="GPU-a", gpu_sku="h100-sxm-80gb"),
        sample("d2", "fb_used_bytes", 2_000_000_000.5, 90, source_metric="DCGM_FI_DEV_FB_USED", gpu_uuid="GPU-b", gpu_sku="h100-sxm-80gb"),
    ]  # fmt: skip
    return frame(rows, SAMPLE_SCHEMA)


def test_usage_by_hand_and_the_day_partitions(tmp_path: Path) -> None:
    store = SampleStore.from_url(str(tmp_path / "store"))
    appended = store.append(hand_frame(), "hand")
    assert (appended.rows_in, appended.written, appended.already_stored, appended.rejected) == (28, 28, 0, 0)
    # T0 is 23:59:00: the samples at 0..45 s are on the 30th, 60 s and later on December 1st
    assert store.days() == ["2026-11-30", "2026-12-01"] and sorted(appended.days) == store.days()
    assert all(f.startswith(("samples/day=2026-11-30/part-", "samples/day=2026-12-01/part-")) for f in appended.files)
    usage = {r["deployment_id"]: r for r in store.usage(window_days=2).to_dicts()}
    d1, d2 = usage["d1"], usage["d2"]
    assert d1["peak_kv_usage"] == 1.0
    assert d1["p95_kv_usage"] == 19 / 20  # 21 values, index floor(0.95 x 20 + 0.5) = 19
    assert d1["preemptions_in_window"] == 0 + 3 + 2 + 1 + 3  # the drop to 1 is a restart: +1
    assert d1["n_samples"] == 26 and d1["gpus_seen"] == 0
    assert d1["first_sample_at"] == T0 and d1["last_sample_at"] == T0 + dt.timedelta(seconds=300)
    assert d2["peak_fb_used_bytes"] == 2_000_000_000 and d2["gpus_seen"] == 2 and d2["_dcgm_gpu_sku"] == "h100-sxm-80gb"
    assert d2["preemptions_in_window"] == 0.0 and d2["peak_kv_usage"] is None and d2["p95_kv_usage"] is None
    # the window counts back from the newest day: one day = December 1st only (60 s .. 300 s)
    newest = {r["deployment_id"]: r for r in store.usage(window_days=1).to_dicts()}
    assert newest["d1"]["n_samples"] == 21 - 4 + 5 - 4 and newest["d2"]["n_samples"] == 1
    # plain DuckDB reads the layout as Hive partitions
    con = duckdb.connect()
    rows = con.execute(
        "select day::varchar, count(*) from read_parquet($p, hive_partitioning = true) group by all order by all",
        {"p": str(tmp_path / "store" / "samples" / "*" / "*.parquet")},
    ).fetchall()
    assert rows == [("2026-11-30", 4 + 4 + 1), ("2026-12-01", 17 + 1 + 1)]


def test_the_sample_fleet_usage_equals_the_polars_summary(tmp_path: Path) -> None:
    result = ingest_dir(SAMPLE_DIR)
    store = SampleStore.from_url(str(tmp_path / "store"))
    store.append(result.samples, "sample fleet")
    expected = sample_usage(result.samples.lazy()).collect().sort("deployment_id")
    assert expected.height > 10
    assert_frame_equal(store.usage(window_days=10_000), expected)


def stored_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.parquet"))}


def test_appending_is_idempotent_and_never_rewrites_a_file(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = SampleStore.from_url(str(root))
    batch = hand_frame()
    store.append(batch, "first")
    before = stored_files(root)
    again = store.append(batch, "first again")
    assert (again.written, again.already_stored, again.files) == (0, 28, [])
    assert stored_files(root) == before
    # the next scrape overlaps the last one: only the new samples are written, as one new file
    overlap = frame(
        [sample("d1", "kv_cache_usage", 1.0, 300), sample("d1", "kv_cache_usage", 0.5, 315)], SAMPLE_SCHEMA
    )
    later = store.append(overlap, "next scrape")
    assert (later.written, later.already_stored, later.rejected, later.days) == (1, 1, 0, ["2026-12-01"])
    after = stored_files(root)
    assert {k: after[k] for k in before} == before and len(after) == len(before) + 1
    assert store.usage(window_days=2).filter(pl.col("deployment_id") == "d1")["n_samples"].item() == 27


def test_hostile_samples_are_rejected_with_reasons_and_reconcile(tmp_path: Path) -> None:
    store = SampleStore.from_url(str(tmp_path / "store"))
    good = {"deployment_id": "ok", "metric": "kv_cache_usage", "value": "0.5", "ts": "2026-12-01T00:00:00Z"}
    rows = [
        good,
        {**good, "ts": "2026-12-01T00:00:15Z", "value": "0.25"},
        {**good, "ts": "2026-12-01T00:00:15Z", "value": "0.30"},  # same series and time again
        {**good, "value": "zero point five"},
        {**good, "deployment_id": None},
        {**good, "value": "nan"},
        {**good, "value": "inf"},
        {**good, "ts": "1970-01-01T00:00:00Z"},
        {**good, "ts": "not a time"},
        {**good, "deployment_id": "x" * 600},
        {**good, "deployment_id": "token hf_abcdefghijklmnopqrstuvwxyz0123456789", "value": "nan"},
    ]
    batch = pl.DataFrame(rows, schema={k: pl.String for k in good})
    appended = store.append(batch, "hostile.csv")
    assert appended.reconciles and (appended.rows_in, appended.written, appended.rejected) == (11, 2, 9)
    codes = dict(zip(appended.rejects["line"].to_list(), appended.rejects["reason_code"].to_list(), strict=True))
    assert codes == {3: "duplicate", 4: "bad_value", 5: "missing_field", 6: "not_finite", 7: "not_finite",
                     8: "bad_timestamp", 9: "bad_value", 10: "too_large", 11: "not_finite"}  # fmt: skip
    assert appended.rejects.schema == pl.Schema(REJECT_SCHEMA)
    assert set(appended.rejects["file"]) == {"hostile.csv"} and set(appended.rejects["source_kind"]) == {"sample_store"}
    shown = " ".join(str(v) for v in appended.rejects.select("deployment_id", "raw_excerpt", "reason").rows())
    assert "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in shown
    assert all("\n" not in r and r for r in appended.rejects["reason"])
    # a frame with none of the columns: every row rejected, nothing written, no exception
    nothing = store.append(pl.DataFrame({"junk": [1, 2, 3]}), "junk.parquet")
    assert (nothing.written, nothing.rejected) == (0, 3) and set(nothing.rejects["reason_code"]) == {"missing_field"}


def test_store_rejects_move_into_the_ingest_accounting(tmp_path: Path) -> None:
    result = ingest_dir(SAMPLE_DIR)
    first = result.samples.row(0, named=True)
    bad = frame([{**first, "ts": dt.datetime(1999, 1, 1, tzinfo=UTC)}], SAMPLE_SCHEMA)  # parsers accept it; the store does not
    samples = pl.concat([result.samples.filter(pl.int_range(pl.len()) > 0), bad])
    changed = type(result)(result.observations, samples, result.rejects, result.files)
    store = SampleStore.from_url(str(tmp_path / "store"))
    appended = store.append(samples, "run")
    assert appended.rejected == 1 and appended.rejects["reason_code"].item() == "bad_timestamp"
    merged = with_store_rejects(changed, appended)
    assert merged.check_reconciliation() == []
    assert merged.samples.height == samples.height - 1 and merged.rejects.height == result.rejects.height + 1
    summary = merged.summary()
    assert summary["rows_in"] == summary["accepted"] + summary["rejected"] == result.summary()["rows_in"]


def test_unreadable_files_and_links_out_are_left_out_with_a_reason(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = SampleStore.from_url(str(root))
    store.append(hand_frame(), "hand")
    day = root / "samples" / "day=2026-12-01"
    (day / "part-0123456789abcdef.parquet").write_bytes(b"PAR1 this is not parquet")
    outside = tmp_path / "outside.parquet"
    hand_frame().write_parquet(outside)
    (day / "part-fedcba9876543210.parquet").symlink_to(outside)
    (root / "samples" / "day=not-a-day").mkdir()
    (day / "notes.txt").write_text("ignored", encoding="utf-8")
    usage = store.usage(window_days=2)
    assert usage.filter(pl.col("deployment_id") == "d1")["n_samples"].item() == 26, "the hostile files added nothing"
    assert any("part-0123456789abcdef.parquet: not readable as Parquet" in p for p in store.problems)
    assert any("part-fedcba9876543210.parquet: a link out of the store" in p for p in store.problems)
    with pytest.raises(StoreError, match=r"s3fs|protocol|install"):
        SampleStore.from_url("nosuchprotocol://bucket/x")


# --- S3: moto's server on 127.0.0.1 -------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    require_extra("s3", "s3fs", "moto", "flask")
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **credentials).create_bucket(Bucket="fleet")
    options = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    try:
        yield {"endpoint": endpoint, "options": options}
    finally:
        server.stop()


def test_s3_store_appends_idempotently_and_duckdb_reads_it_through_fsspec(s3: dict[str, Any], tmp_path: Path) -> None:
    store = SampleStore.from_url("s3://fleet/capplan/telemetry", s3["options"])
    result = ingest_dir(SAMPLE_DIR)
    first = store.append(result.samples, "sample fleet")
    assert first.written == result.samples.height and first.files
    again = store.append(result.samples, "sample fleet")
    assert (again.written, again.already_stored) == (0, result.samples.height)
    listed = store.fs.find("fleet/capplan/telemetry/samples")
    assert all("/day=" in p and p.rsplit("/", 1)[-1].startswith("part-") for p in listed) and len(listed) == len(first.files)
    expected = sample_usage(result.samples.lazy()).collect().sort("deployment_id")
    assert_frame_equal(store.usage(window_days=10_000), expected)
    local = SampleStore.from_url(str(tmp_path / "local"))
    local.append(result.samples, "sample fleet")
    assert_frame_equal(store.usage(window_days=1), local.usage(window_days=1))


def test_s3_store_from_the_environment_as_the_pipeline_builds_it(s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The resource passes only the URL: endpoint and credentials come from the AWS variables."""
    from pipelines.resources import PlanningResource

    for name, value in {"AWS_ENDPOINT_URL": s3["endpoint"], "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    store = PlanningResource(telemetry_store="s3://fleet/from-env").sample_store()
    assert store is not None and not store.local
    appended = store.append(hand_frame(), "hand")
    assert appended.written == 28 and store.days() == ["2026-11-30", "2026-12-01"]
    assert math.isclose(store.usage(2).filter(pl.col("deployment_id") == "d1")["p95_kv_usage"].item(), 0.95)
    assert "testing" not in store.display_url() and os.environ["AWS_ENDPOINT_URL"] == s3["endpoint"]



def test_a_batch_of_repeated_sample_fleet_rows_reconciles(tmp_path: Path) -> None:
    """Histogram buckets (`le`) and series labels are part of a sample's key; repeats of a whole
    concatenated batch are `duplicate` rejects (Polars once panicked formatting their reasons)."""
    result = ingest_dir(SAMPLE_DIR)
    assert result.samples.get_column("le").is_not_null().any()
    batch = pl.concat([result.samples, result.samples, result.samples.head(500)])
    store = SampleStore.from_url(str(tmp_path / "store"))
    out = store.append(batch, "repeated")
    assert out.written == result.samples.height
    assert out.rows_in == out.written + out.already_stored + out.rejects.height == batch.height
    assert set(out.rejects.get_column("reason_code")) == {"duplicate"}
