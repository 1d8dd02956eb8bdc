"""A fleet-scale capacity grid computed with `capacity.grid` and published to a DuckDB file.

The bundled catalog is scaled with synthetic variants of its real specs (layer counts and hidden
sizes perturbed, heads and context limits kept, so each variant is a distinct model with its own
KV layout and weights) until the grid has at least `--rows` rows. Prints rows, rows/s, the build and
publish times, peak RSS, and the speed-up over the scalar `estimate` measured on a sample of the
same grid in the same run (every sampled row must also agree with it).

    .venv/bin/python -m benchmarks.grid [--rows 10000000] [--db var/bench/grid.duckdb] [--sample 2000]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import duckdb
import polars as pl

from benchmarks.estimate import catalog_gpus, catalog_models, cores
from capacity.grid import (
    CONTEXT_COLUMNS,
    GRID_COLUMNS,
    GridModel,
    build_capacity_grid,
    build_deployments,
    expand_contexts,
)
from capacity.memory import estimate
from capacity.spec import DeploymentSpec, GpuSku, LayerParams

RENAMED = {"weight_format": "weight_dtype", "kv_cache_dtype": "kv_dtype"}


def variant(model: GridModel, k: int) -> GridModel:
    """Variant k of a real spec: layers -2..+2 (the layer pattern repeated), linear layers
    scaled by 1 + 3k % (a wider hidden / intermediate size), no checkpoint size."""
    spec = model.spec
    n = len(spec.layers)
    layers_n = max(1, n + k % 5 - 2)
    factor = 1 + 0.03 * k
    layers = tuple(replace(spec.layers[i % n], index=i) for i in range(layers_n))
    params = tuple(
        LayerParams(
            attention=int(p.attention * factor),
            mlp=int(p.mlp * factor),
            experts=int(p.experts * factor),
            router=p.router,
            norms=p.norms,
        )
        for p in (spec.layer_params[i % n] for i in range(layers_n))
    )
    scaled = replace(spec, layers=layers, layer_params=params, num_layers=layers_n)
    return GridModel(f"{model.repo_id}@v{k}", scaled, None)


def fleet(models: list[GridModel], variants: int) -> list[GridModel]:
    return models + [variant(m, k) for k in range(1, variants + 1) for m in models]


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # ru_maxrss is KiB on Linux


def scalar_sample(
    grid: pl.DataFrame, models: dict[str, GridModel], gpus: dict[str, GpuSku], n: int, seed: int
) -> tuple[int, float, int]:
    """(rows, seconds, mismatching rows) of `estimate` on n random grid rows."""
    rows = [grid.row(i, named=True) for i in random.Random(seed).sample(range(grid.height), min(n, grid.height))]
    compared = [
        c for c in GRID_COLUMNS if c not in ("model", "model_family", "gpu", "weight_dtype", "kv_dtype", "num_gpus")
    ]
    mismatches = 0
    start = time.perf_counter()
    contracts = []
    for row in rows:
        model = models[row["model"]]
        deployment = DeploymentSpec(tp=row["tp"], pp=row["pp"], weight_dtype=row["weight_dtype"],
                                    kv_dtype=row["kv_dtype"], engine=row["engine"])  # fmt: skip
        contracts.append(
            estimate(model.spec, deployment, gpu=gpus[row["gpu"]], model_name=model.repo_id,
                     checkpoint_bytes=model.checkpoint_bytes, context_tokens=row["context"]).contract()
        )  # fmt: skip
    elapsed = time.perf_counter() - start
    for row, contract in zip(rows, contracts, strict=True):
        if any(row[c] != contract[RENAMED.get(c, c)] for c in compared):
            mismatches += 1
    return len(rows), elapsed, mismatches


def _fresh(path: Path) -> duckdb.DuckDBPyConnection:
    for stale in (path, Path(f"{path}.wal")):
        stale.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    con.execute("SET preserve_insertion_order = false")
    return con


def publish(grid: pl.DataFrame, path: Path) -> float:
    """The prescribed way: CREATE TABLE capacity_grid AS SELECT * FROM the frame; seconds."""
    start = time.perf_counter()
    con = _fresh(path)
    try:
        con.register("grid_frame", grid)
        con.execute("CREATE TABLE capacity_grid AS SELECT * FROM grid_frame")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return time.perf_counter() - start


def publish_star(deployments: pl.DataFrame, contexts: pl.DataFrame, path: Path) -> float:
    """Deployments once, contexts as a narrow table, and the grid as a view over both; seconds."""
    start = time.perf_counter()
    con = _fresh(path)
    try:
        con.register("deployment_frame", deployments)
        con.register("context_frame", contexts)
        con.execute("CREATE TABLE grid_deployments AS SELECT * FROM deployment_frame")
        con.execute("CREATE TABLE grid_contexts AS SELECT * FROM context_frame")
        columns = ", ".join(f"c.{c}" if c in CONTEXT_COLUMNS else f"d.{c}" for c in GRID_COLUMNS)
        con.execute(
            f"CREATE VIEW capacity_grid AS SELECT {columns} "
            "FROM grid_contexts c JOIN grid_deployments d USING (deployment_id)"
        )
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return time.perf_counter() - start


def count(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM capacity_grid").fetchone()
    finally:
        con.close()
    return int(row[0]) if row else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="at least this many grid rows")
    parser.add_argument(
        "--variants", type=int, default=None, help="synthetic variants per model (default: from --rows)"
    )
    parser.add_argument("--db", type=Path, default=None, help="DuckDB file (default: a temporary one)")
    parser.add_argument("--sample", type=int, default=2000, help="rows timed with the scalar estimate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    models, skipped = catalog_models()
    gpus = catalog_gpus()
    print(f"machine: {cores()}; polars {pl.__version__} ({pl.thread_pool_size()} threads), duckdb {duckdb.__version__}")
    if args.variants is None:
        # rows grow with the models; measure the catalog's rows per model on the cheap deployment count
        per_model = build_capacity_grid(models, gpus).select(pl.len()).collect().item() / len(models)
        args.variants = max(0, math.ceil(args.rows / (per_model * len(models)) * 1.02) - 1)
    everything = fleet(models, args.variants)
    print(f"fleet: {len(models)} catalog models x {args.variants + 1} (with synthetic variants) = "
          f"{len(everything)} models, {len(gpus)} GPUs ({len(skipped)} catalog entries refused by the parser)")  # fmt: skip

    start = time.perf_counter()
    plan = build_capacity_grid(everything, gpus).select(GRID_COLUMNS)  # the per-layout Python part runs here
    layouts_s = time.perf_counter() - start
    grid = plan.collect()
    build_s = time.perf_counter() - start
    rss_build = peak_rss_gib()
    rows = grid.height
    n, scalar_s, mismatches = scalar_sample(
        grid, {m.repo_id: m for m in everything}, {g.id: g for g in gpus}, args.sample, args.seed
    )

    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or Path(tmp) / "grid.duckdb"
        path.parent.mkdir(parents=True, exist_ok=True)
        publish_s = publish(grid, path)
        size = path.stat().st_size
        assert count(path) == rows
        width = grid.width
        memory = grid.estimated_size()
        del grid

        # the same grid as deployments + a narrow per-context table + a view (--layout star)
        start = time.perf_counter()
        deployments = build_deployments(everything, gpus).with_row_index("deployment_id")
        contexts = expand_contexts(deployments, carry=["deployment_id"]).select("deployment_id", *CONTEXT_COLUMNS)
        deployments_df, contexts_df = pl.collect_all([deployments.drop("contexts"), contexts])
        star_build_s = time.perf_counter() - start
        star_path = path.with_name(path.stem + "-star.duckdb")
        star_publish_s = publish_star(deployments_df.select(pl.exclude("^pool_.*$")), contexts_df, star_path)
        star_size = star_path.stat().st_size
        assert count(star_path) == rows

    grid_rate = rows / build_s
    scalar_rate = n / scalar_s
    total = build_s + publish_s
    star_total = star_build_s + star_publish_s
    print(f"rows: {rows:,} x {width} columns ({memory / 2**30:.2f} GiB in memory)")
    print(f"build: {build_s:.2f} s = {grid_rate:,.0f} rows/s (per-layout Python {layouts_s:.2f} s, "
          f"Polars {build_s - layouts_s:.2f} s)")  # fmt: skip
    print(f"publish: {publish_s:.2f} s, CREATE TABLE capacity_grid AS SELECT * FROM df ({size / 2**20:,.0f} MiB file)")
    print(f"build + publish: {total:.2f} s = {rows / total:,.0f} rows/s (target: >= 10M rows in <= 10 s)")
    print(f"star layout: build {star_build_s:.2f} s ({deployments_df.height:,} deployments, {contexts_df.height:,} "
          f"context rows) + publish {star_publish_s:.2f} s ({star_size / 2**20:,.0f} MiB) = {star_total:.2f} s "
          f"= {rows / star_total:,.0f} rows/s; view capacity_grid has the same {rows:,} rows")  # fmt: skip
    print(f"peak RSS: {peak_rss_gib():.2f} GiB ({rss_build:.2f} GiB after the build)")
    print(f"scalar estimate on {n:,} sampled rows: {scalar_s:.2f} s = {scalar_rate:,.0f} rows/s; "
          f"grid build is {grid_rate / scalar_rate:,.0f}x faster per row; {mismatches} sampled rows disagree")  # fmt: skip
    print(f"load average now: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
