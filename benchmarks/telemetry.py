"""Telemetry at fleet scale: samples appended to the sample store, and `prediction_vs_measured` refreshed from it.

A synthetic fleet (`--deployments` x 10 series: the four vLLM gauges / counters and DCGM framebuffer
used / free on three GPUs, one scrape every 15 s, starting 2026-11-30 12:00 UTC so 100M samples
span two days) is generated in chunks of `--chunk-scrapes` scrapes (numpy, vectorized; its time is
measured and reported apart) and goes two ways, each in a process of its own (so each peak RSS is
its own):

1. **store** (`--samples`, default 100,000,000): every chunk appended to a `SampleStore`
   (`telemetry/store.py`: checks, duplicates, the keys already stored, Parquet by day);
   then the last chunk appended again (must write nothing); then the refresh: usage by DuckDB over
   the Parquet files, `deployments_frame`, `predict_deployments`, the calibration fit, the raw
   tables and views, and `select count(*)` of `marts.prediction_vs_measured`.
2. **baseline** (`--baseline-samples`, default 2,000,000: today's path keeps every sample in
   memory and in the warehouse, so it runs smaller): the same generator written as Prometheus text
   files in a drop folder (not timed), `ingest_dir` (the parser), `raw.telemetry_samples` loaded
   into DuckDB, then the refresh as the asset does it today (the samples read back into Polars,
   `sample_usage`, the same predictions, calibration and views).
3. **store at the baseline's size**, so the two are compared at one size too; its usage must equal
   the baseline's Polars usage of the parsed text (the run fails otherwise).

Prints samples/s, seconds per stage, peak RSS per path, the store's bytes, the load average.

    .venv/bin/python -m benchmarks.telemetry [--samples 100000000] [--baseline-samples 2000000]
    .venv/bin/python -m benchmarks.telemetry --samples 1000000 --baseline-samples 200000   # a smoke run
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl

from benchmarks.estimate import cores

START = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
SCRAPE_S = 15
SERIES = 10  # 4 vLLM + 2 DCGM x 3 GPUs
GPUS_PER_DEPLOYMENT = 3
MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B", "mistralai/Mistral-7B-Instruct-v0.3")
GPU_SKU = "h100-sxm-80gb"
GPU_NAME = "NVIDIA H100 80GB HBM3"
MIB = 1 << 20
VLLM = (
    ("kv_cache_usage", "vllm:kv_cache_usage_perc"),
    ("requests_running", "vllm:num_requests_running"),
    ("requests_waiting", "vllm:num_requests_waiting"),
    ("preemptions_total", "vllm:num_preemptions_total"),
)
DCGM = (("fb_used_bytes", "DCGM_FI_DEV_FB_USED"), ("fb_free_bytes", "DCGM_FI_DEV_FB_FREE"))


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # KiB on Linux


def deployment_ids(n: int) -> list[str]:
    return [f"fleet-{i:05d}" for i in range(n)]


# --- the synthetic fleet -----------------------------------------------------------------------------


def values(kind: str, i: np.ndarray, k: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Deterministic values per deployment i, scrape k, GPU g, in the unit the parsers produce
    (DCGM framebuffer in MiB here; the frames carry bytes)."""
    if kind == "kv_cache_usage":
        return ((i * 7 + k * 13) % 1000) / 1000.0
    if kind == "requests_running":
        return ((i + k) % 64).astype(np.float64)
    if kind == "requests_waiting":
        return ((i * 3 + k) % 5).astype(np.float64)
    if kind == "preemptions_total":  # a counter that restarts every 2,000 scrapes
        return ((k % 2000) // 40).astype(np.float64)
    used = 40_000 + (i + k + g * 17) % 1000
    return (used if kind == "fb_used_bytes" else 80_000 - used).astype(np.float64)


def chunk_frame(ids: list[str], first: int, scrapes: int) -> pl.DataFrame:
    """The samples of scrapes [first, first + scrapes) of every deployment, as the parsers give them."""
    d = len(ids)
    k = np.arange(first, first + scrapes, dtype=np.int64)
    parts = []
    ts = pl.Series(k * SCRAPE_S * 1_000_000 + int(START.timestamp()) * 1_000_000).cast(pl.Datetime("us", "UTC"))
    ids_s = pl.Series(ids, dtype=pl.String)
    model_of = pl.Series([MODELS[i % len(MODELS)] for i in range(d)], dtype=pl.String)
    for s in range(SERIES):
        if s < len(VLLM):
            metric, source = VLLM[s]
            g = np.full(1, -1)
        else:
            metric, source = DCGM[(s - len(VLLM)) % 2]
            g = np.full(1, (s - len(VLLM)) // 2)
        ii = np.repeat(np.arange(d), scrapes)
        kk = np.tile(k, d)
        value = values(metric, ii, kk, np.broadcast_to(g, ii.shape))
        if metric in ("fb_used_bytes", "fb_free_bytes"):
            value = value * MIB
        dcgm = s >= len(VLLM)
        gi = int(g[0])
        parts.append(
            pl.DataFrame(
                {
                    "deployment_id": ids_s.gather(ii),
                    "ts": ts.gather(np.tile(np.arange(scrapes), d)),
                    "metric": pl.repeat(metric, ii.size, eager=True),
                    "value": value,
                    "source_metric": pl.repeat(source, ii.size, eager=True),
                    "model_id": None if dcgm else model_of.gather(ii),
                    "model_name_raw": None if dcgm else model_of.gather(ii),
                    "engine_index": None if dcgm else pl.repeat("0", ii.size, eager=True),
                    "gpu_index": pl.repeat(gi, ii.size, eager=True, dtype=pl.Int32) if dcgm else None,
                    "gpu_uuid": None,
                    "gpu_sku": pl.repeat(GPU_SKU, ii.size, eager=True) if dcgm else None,
                    "hostname": None,
                },
                strict=False,
            ).with_columns(
                (pl.lit("GPU-") + pl.col("deployment_id") + pl.lit(f"-{gi}")).alias("gpu_uuid")
                if dcgm
                else pl.lit(None, pl.String).alias("gpu_uuid"),
                pl.col("gpu_index").cast(pl.Int32),
            )
        )
    from telemetry.schema import SAMPLE_SCHEMA

    frame = pl.concat(parts, how="diagonal_relaxed")
    frame = frame.with_columns(
        pl.lit("sample").alias("ts_source"),
        pl.lit(None, pl.String).alias("pod"),
        pl.lit("benchmark").alias("file"),
        pl.lit(None, pl.Int64).alias("line"),
    )
    missing = [pl.lit(None, t).alias(c) for c, t in SAMPLE_SCHEMA.items() if c not in frame.columns]  # le, series
    return frame.with_columns(missing).select([pl.col(c).cast(t) for c, t in SAMPLE_SCHEMA.items()])


def chunks(ids: list[str], scrapes: int, chunk_scrapes: int) -> Iterator[tuple[pl.DataFrame, float]]:
    for first in range(0, scrapes, chunk_scrapes):
        t0 = time.perf_counter()
        frame = chunk_frame(ids, first, min(chunk_scrapes, scrapes - first))
        yield frame, time.perf_counter() - t0


def observations(ids: list[str]) -> pl.DataFrame:
    """One `vllm:cache_config_info`-like observation per deployment (what predictions need)."""
    from telemetry.schema import OBSERVATION_SCHEMA, frame

    rows = [
        {"observation_id": f"obs-{d}", "deployment_id": d, "source_kind": "prometheus", "observed_at": START,
         "observed_at_source": "sample", "model_id": MODELS[i % len(MODELS)], "gpu_sku": GPU_SKU,
         "gpu_name_raw": GPU_NAME, "tp": 1, "pp": 1, "engine": "vllm", "engine_version": "0.11.0",
         "gpu_memory_utilization": 0.9, "max_model_len": 8192, "block_size": 16,
         "num_gpu_blocks": 28_000 + (i % 50), "input_rows": 1, "file": "benchmark", "line": None}
        for i, d in enumerate(ids)
    ]
    return frame(rows, OBSERVATION_SCHEMA)


def prometheus_text(ids: list[str], scrapes: int, folder: Path) -> None:
    """The same samples as Prometheus text, one file per deployment (for the baseline's parser)."""
    folder.mkdir(parents=True, exist_ok=True)
    k = np.arange(scrapes)
    stamps = (int(START.timestamp()) + k * SCRAPE_S) * 1000
    for i, d in enumerate(ids):
        lines: list[str] = []
        model = MODELS[i % len(MODELS)]
        ii = np.full(scrapes, i)
        for metric, source in VLLM:
            vs = values(metric, ii, k, np.zeros(scrapes, dtype=np.int64))
            labels = f'deployment="{d}",engine="0",model_name="{model}"'
            lines += [f"{source}{{{labels}}} {v!r} {t}" for v, t in zip(vs.tolist(), stamps.tolist(), strict=True)]
        for g in range(GPUS_PER_DEPLOYMENT):
            for metric, source in DCGM:
                vs = values(metric, ii, k, np.full(scrapes, g))
                labels = f'deployment="{d}",gpu="{g}",UUID="GPU-{d}-{g}",modelName="{GPU_NAME}"'
                lines += [f"{source}{{{labels}}} {v:.0f} {t}" for v, t in zip(vs.tolist(), stamps.tolist(), strict=True)]
        (folder / f"{d}.prom").write_text("\n".join(lines) + "\n", encoding="utf-8")


# --- the refresh of prediction_vs_measured, as the telemetry assets do it ------------------------


def refresh(
    con: duckdb.DuckDBPyConnection, obs: pl.DataFrame, samples: pl.DataFrame, usage: pl.DataFrame | None, calibrate: bool
) -> int:
    """deployments -> predictions -> calibration -> raw tables -> views -> count of the mart.
    `calibrate=False`: the calibration fit is given no deployments (its leave-one-out grows much
    faster than linearly with the deployments of one scope: 12 s at 100, 67 s at 200 here), so
    the figure is the telemetry path's own; `--calibrate` includes it."""
    from models_registry.planning import bundled_catalog
    from telemetry.calibration_frames import fit_frames
    from telemetry.drop_folder import deployments_frame
    from telemetry.predictions import predict_deployments
    from warehouse.sql import build_relation, load_frame

    registry = bundled_catalog(MODELS, [GPU_SKU])
    deployments = deployments_frame(obs, samples, "benchmark", usage)
    predictions = predict_deployments(deployments, registry)
    fitted = (deployments, predictions) if calibrate else (deployments.head(0), predictions.head(0))
    fit, per_deployment = fit_frames(*fitted, registry, min_observations=3)
    for table, frame in (
        ("telemetry_deployments", deployments),
        ("telemetry_predictions", predictions),
        ("calibration", fit),
        ("deployment_calibration", per_deployment),
    ):
        load_frame(con, "raw", table, frame)
    for table in ("telemetry_deployments", "telemetry_predictions", "deployment_calibration"):
        build_relation(con, "staging", table)
    build_relation(con, "marts", "prediction_vs_measured")
    row = con.execute("select count(*) from marts.prediction_vs_measured where prediction_status = 'predicted'").fetchone()
    return int(row[0]) if row else 0


def warehouse(path: Path) -> duckdb.DuckDBPyConnection:
    from warehouse.sql import LAYERS, build_relation, ident

    con = duckdb.connect(str(path))
    con.execute("set enable_progress_bar = false")
    for layer in LAYERS:
        con.execute(f"create schema if not exists {ident(layer)}")
    build_relation(con, "raw", "run", {"run_id": "benchmark", "run_date": START.date(), "started_at": START})
    return con


# --- the two paths, each in a process of its own -----------------------------------------------------


def store_path(args: dict[str, Any]) -> dict[str, Any]:
    from telemetry.store import SampleStore

    ids = deployment_ids(args["deployments"])
    scrapes = -(-args["samples"] // (len(ids) * SERIES))
    root = Path(args["dir"]) / "store"
    store = SampleStore.from_url(str(root))
    generate_s = append_s = 0.0
    n = written = 0
    last: pl.DataFrame | None = None
    t_all = time.perf_counter()
    for frame, seconds in chunks(ids, scrapes, args["chunk_scrapes"]):
        generate_s += seconds
        t0 = time.perf_counter()
        appended = store.append(frame, "benchmark")
        append_s += time.perf_counter() - t0
        assert appended.reconciles and appended.rejected == 0, appended.rejects.head(3)
        n += frame.height
        written += appended.written
        last = frame
    wall = time.perf_counter() - t_all
    assert last is not None and written == n
    t0 = time.perf_counter()
    again = store.append(last, "benchmark again")
    again_s = time.perf_counter() - t0
    assert again.written == 0 and again.already_stored == last.height
    rss_ingest = peak_rss_gib()
    con = warehouse(Path(args["dir"]) / "store.duckdb")
    t0 = time.perf_counter()
    usage = store.usage(window_days=3650)
    usage_s = time.perf_counter() - t0
    from telemetry.schema import SAMPLE_SCHEMA

    predicted = refresh(con, observations(ids), pl.DataFrame(schema=SAMPLE_SCHEMA), usage, args["calibrate"])
    refresh_s = time.perf_counter() - t0
    con.close()
    files = list(root.rglob("*.parquet"))
    return {
        "samples": n, "days": store.days(), "files": len(files), "store_bytes": sum(f.stat().st_size for f in files),
        "generate_s": generate_s, "append_s": append_s, "ingest_wall_s": wall, "reappend_s": again_s,
        "reappend_samples": last.height, "usage_s": usage_s, "refresh_s": refresh_s, "predicted": predicted,
        "rss_ingest_gib": rss_ingest, "rss_gib": peak_rss_gib(), "usage": usage if args.get("return_usage") else None,
    }  # fmt: skip


def baseline_path(args: dict[str, Any]) -> dict[str, Any]:
    from models_registry.planning import bundled_catalog
    from telemetry import ingest_dir
    from telemetry.summary import sample_usage
    from warehouse.sql import load_frame

    ids = deployment_ids(args["deployments"])
    scrapes = -(-args["samples"] // (len(ids) * SERIES))
    folder = Path(args["dir"]) / "drop"
    t0 = time.perf_counter()
    prometheus_text(ids, scrapes, folder)
    text_s = time.perf_counter() - t0
    registry = bundled_catalog(MODELS, [GPU_SKU])
    t0 = time.perf_counter()
    result = ingest_dir(folder, model_ids=registry.model_ids(), gpu_skus=list(registry.gpus.values()))
    parse_s = time.perf_counter() - t0
    summary = result.summary()
    assert summary["rejected"] == 0 and summary["samples"] == len(ids) * SERIES * scrapes, summary
    con = warehouse(Path(args["dir"]) / "baseline.duckdb")
    t0 = time.perf_counter()
    load_frame(con, "raw", "telemetry_samples", result.samples)
    load_s = time.perf_counter() - t0
    rss_ingest = peak_rss_gib()
    del result
    t0 = time.perf_counter()
    samples = con.sql("select * from raw.telemetry_samples").pl()  # as telemetry_predictions reads them
    usage = sample_usage(samples.lazy()).collect().sort("deployment_id")
    predicted = refresh(con, observations(ids), samples, None, args["calibrate"])
    refresh_s = time.perf_counter() - t0
    con.close()
    return {
        "samples": summary["samples"], "text_s": text_s, "parse_s": parse_s, "load_s": load_s,
        "refresh_s": refresh_s, "predicted": predicted, "rss_ingest_gib": rss_ingest, "rss_gib": peak_rss_gib(),
        "usage": usage,
    }  # fmt: skip


def in_process_of_its_own(target: Any, args: dict[str, Any]) -> dict[str, Any]:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(target, (args,))  # type: ignore[no-any-return]


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f} samples/s" if seconds > 0 else "-"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000_000, help="samples appended to the store")
    parser.add_argument("--baseline-samples", type=int, default=2_000_000, help="samples through today's path (0: skip)")
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--chunk-scrapes", type=int, default=100, help="scrapes per appended chunk (x deployments x 10)")
    parser.add_argument("--calibrate", action="store_true", help="include the calibration fit in the refresh")
    parser.add_argument("--dir", type=Path, default=None, help="where the store and DuckDB files go (default: temporary)")
    args = parser.parse_args(argv)
    print(f"machine: {cores()}; polars {pl.__version__}, duckdb {duckdb.__version__}")
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="capplan-telemetry-bench-"))
    common = {"deployments": args.deployments, "chunk_scrapes": args.chunk_scrapes, "calibrate": args.calibrate}
    try:
        if not args.calibrate:
            print("refresh timed without the calibration fit (--calibrate to include it; the same code on both paths)")
        print(f"store path: {args.samples:,} samples, {args.deployments:,} deployments x {SERIES} series every {SCRAPE_S} s")
        big = in_process_of_its_own(store_path, {**common, "samples": args.samples, "dir": str(work / "big")})
        print(f"  days {', '.join(big['days'])}; {big['files']} Parquet files, {big['store_bytes'] / 2**20:,.1f} MiB "
              f"({big['store_bytes'] / big['samples']:.2f} B/sample)")  # fmt: skip
        print(f"  ingest: append {big['append_s']:.1f} s = {rate(big['samples'], big['append_s'])} "
              f"(generator {big['generate_s']:.1f} s apart; wall {big['ingest_wall_s']:.1f} s); "
              f"peak RSS {big['rss_ingest_gib']:.2f} GiB")  # fmt: skip
        print(f"  re-append of the last chunk ({big['reappend_samples']:,} samples): {big['reappend_s']:.2f} s, 0 written")
        print(f"  refresh prediction_vs_measured: {big['refresh_s']:.1f} s (usage by DuckDB over Parquet "
              f"{big['usage_s']:.1f} s); {big['predicted']:,} deployments predicted; peak RSS {big['rss_gib']:.2f} GiB")  # fmt: skip
        if args.baseline_samples:
            n = args.baseline_samples
            print(f"baseline (today's path: parse text, samples in DuckDB and Polars): {n:,} samples")
            base = in_process_of_its_own(baseline_path, {**common, "samples": n, "dir": str(work / "baseline")})
            ingest_s = base["parse_s"] + base["load_s"]
            print(f"  ingest: parse {base['parse_s']:.1f} s + load {base['load_s']:.1f} s = {rate(base['samples'], ingest_s)} "
                  f"(parse alone {rate(base['samples'], base['parse_s'])}); peak RSS {base['rss_ingest_gib']:.2f} GiB")  # fmt: skip
            print(f"  refresh prediction_vs_measured: {base['refresh_s']:.1f} s; peak RSS {base['rss_gib']:.2f} GiB")
            same = in_process_of_its_own(
                store_path, {**common, "samples": n, "dir": str(work / "same"), "return_usage": True}
            )
            print(f"store path at the baseline's size: append {same['append_s']:.1f} s = {rate(same['samples'], same['append_s'])}; "
                  f"refresh {same['refresh_s']:.1f} s; peak RSS {same['rss_gib']:.2f} GiB")  # fmt: skip
            from polars.testing import assert_frame_equal

            # the baseline read its samples back from DuckDB, whose time zone is named 'Etc/UTC'
            assert_frame_equal(same["usage"], base["usage"].cast(dict(same["usage"].schema)))
            print("  usage from the store (DuckDB over Parquet) == usage from the parsed text (Polars): yes")
            print(f"ratios at {n:,} samples: ingest {ingest_s / same['append_s']:.1f}x (the store takes parsed frames; "
                  f"parsing is the same code on both paths), refresh {base['refresh_s'] / same['refresh_s']:.1f}x")  # fmt: skip
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
