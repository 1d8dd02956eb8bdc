"""A fleet-scale capacity grid computed with `capacity.grid` and published to a DuckDB file.

The bundled catalog is scaled with synthetic variants of its real specs (layer counts and hidden
sizes perturbed, heads and context limits kept, so each variant is a distinct model with its own
weights; variants with the same layer count share a KV layout, as fine-tunes of one base model
do) until the grid has at least `--rows` rows.

The grid is published as four tables, each column at its own grain (`capacity.grid.GridTables`:
grid_gpus, grid_layouts, grid_deployments, grid_contexts) and the view `capacity_grid` that joins
them back (`capacity.grid.grid_tables_sql`: GRID_COLUMNS, one row per deployment and context, the
same values as `build_capacity_grid`). Build and publish run as one pipeline over chunks of models
(`iter_grid_tables`): the Polars part of a chunk runs while the Python part of the next is planned
and while the one before is inserted; with `--processes 2` (the default where two cores are usable) a second
process builds the chunks this one is not building when it asks (`warehouse.grid_processes`) and CPU seconds count it. Prints rows,
rows/s, wall and CPU seconds, the load average, peak RSS, a query on the view, and the speed-up over the scalar `estimate` measured on rows
sampled from the published view in the same run (every sampled row must agree with it).
`--peer` (on by default where `.venv-ridgepoint` exists: benchmarks/setup_ridgepoint.sh) runs ridgepoint, the
fastest peer, in the same run on rows sampled from the same view (`benchmarks/peer.py`) and prints the ratio.
`--baseline` also times, in the same run, the two-frame star the warehouse publishes today
(`build_deployments` + `expand_contexts`: every context-free column per deployment, strings
included, and the per-context columns).

    .venv/bin/python -m benchmarks.grid [--rows 10000000] [--db var/bench/grid.duckdb] [--sample 2000]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import queue
import resource
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import duckdb
import polars as pl

from benchmarks.estimate import catalog_gpus, catalog_models, cores
from benchmarks.peer import DEFAULT_VENV, PeerResult, peer_lines, run_peer
from capacity.estimate import AUTO_MAX_MODEL_LEN, estimate
from capacity.grid import (
    CONTEXT_COLUMNS,
    GRID_COLUMNS,
    GridModel,
    GridOptions,
    GridTables,
    build_capacity_grid,
    build_deployments,
    expand_contexts,
    grid_tables_sql,
    iter_grid_tables,
)
from capacity.grid.view import VIEW_TABLES, context_view_sql, duckdb_kinds
from capacity.spec import DeploymentSpec, GpuSku, LayerParams
from warehouse.grid_processes import iter_grid_tables_parallel

RENAMED = {"weight_format": "weight_dtype", "kv_cache_dtype": "kv_dtype"}
TABLES = ("gpus", "layouts", "deployments", "contexts")
# queries on the view: the example (one model), and a fleet-wide aggregate (every deployment)
QUERIES = {
    "one model": "select gpu, max(b_max) from capacity_grid "
    "where model = 'meta-llama/Llama-3.1-70B-Instruct' and context = 32768 group by gpu",
    "whole fleet": "select gpu, weight_dtype, max(b_max), avg(max_concurrency) from capacity_grid "
    "where context = 8192 and fits group by all",
}


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


def fleet(models: list[GridModel], variants: int, count: int | None = None) -> list[GridModel]:
    """The catalog, then its variants 1..`variants` model by model; the first `count` of them where given."""
    everything = models + [variant(m, k) for k in range(1, variants + 1) for m in models]
    return everything if count is None else everything[:count]


def _counted(chunks: Iterable[GridTables], count: list[int]) -> Iterator[GridTables]:
    """`chunks`, counted in `count[0]` as they pass."""
    for chunk in chunks:
        count[0] += 1
        yield chunk


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # ru_maxrss is KiB on Linux


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended (the grid's second process)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def load() -> float:
    return os.getloadavg()[0]


def _fresh(path: Path, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    for stale in (path, Path(f"{path}.wal")):
        stale.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    con.execute("SET preserve_insertion_order = false")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


def grid_view_sql(con: duckdb.DuckDBPyConnection, prefix: str = "grid_", context_view: bool = False, speed: bool = True) -> str:
    """The view `capacity_grid`: GRID_COLUMNS from the four tables (or, for a context view, the tables
    that keep the context rows' inputs), one row per deployment and context."""
    if not context_view:
        names = {f"{table}": f"{prefix}{table}" for table in TABLES}
        return f"CREATE OR REPLACE VIEW capacity_grid AS\n{grid_tables_sql(**names)}"
    names = {table: f"{prefix}{table}" for table in VIEW_TABLES}
    kinds = {}
    for table, name in names.items():
        typed = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?", [name]
        ).fetchall()
        kinds[table] = duckdb_kinds(dict(typed))
    return f"CREATE OR REPLACE VIEW capacity_grid AS\n{context_view_sql(kinds, speed=speed, names=names)}"


def context_rows(chunk: GridTables) -> int:
    """Rows of the grid a chunk holds: its context rows, or for a context view the deployments times
    their model's grid contexts."""
    if not chunk.context_view:
        return chunk.contexts.height
    lengths = chunk.layouts.select("layout_id", pl.col("grid_contexts").list.len().alias("n"))
    return int(chunk.deployments.select("layout_id").join(lengths, on="layout_id").get_column("n").sum())


class Stopwatch:
    """Seconds spent per stage, summed over chunks (stages of a pipeline overlap)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, stage: str, seconds: float) -> None:
        with self._lock:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds


def publish_grid_tables(
    con: duckdb.DuckDBPyConnection,
    chunks: Iterable[GridTables],
    prefix: str = "grid_",
    clock: Stopwatch | None = None,
    writer_thread: bool = False,
) -> dict[str, int]:
    """Write GridTables chunks into `{prefix}gpus`, `layouts`, `deployments`, `contexts` (created from
    the first chunk, appended to after), then the view `capacity_grid` and a CHECKPOINT. Returns
    the rows per table. Inline, a chunk is written while `iter_grid_tables` collects the next one
    (its worker thread) and the planning of the one after waits: two things at a time, what two
    cores hold. With `writer_thread` the planning goes on during the insert too."""
    rows = dict.fromkeys(TABLES, 0)
    created = False
    last: GridTables | None = None

    def insert(name: str, frame: pl.DataFrame, create: bool) -> None:
        con.register("chunk_frame", frame)
        into = f"CREATE OR REPLACE TABLE {prefix}{name} AS" if create else f"INSERT INTO {prefix}{name}"
        con.execute(f"{into} SELECT * FROM chunk_frame")
        con.unregister("chunk_frame")

    def write(chunk: GridTables) -> None:
        nonlocal created, last
        start = time.perf_counter()
        last = chunk
        # every chunk carries the same GPUs: written with the first; a context view has no context rows
        for name in TABLES[1:] if created else TABLES:
            if name == "contexts" and chunk.context_view:
                rows[name] += context_rows(chunk)
                continue
            frame = getattr(chunk, name)
            insert(name, frame, not created)
            rows[name] += frame.height
        created = True
        if clock:
            clock.add("duckdb", time.perf_counter() - start)

    if writer_thread:
        _write_from_thread(chunks, write, clock)
    else:
        start = time.perf_counter()
        for chunk in chunks:
            if clock:
                clock.add("wait for Python + Polars", time.perf_counter() - start)
            write(chunk)
            start = time.perf_counter()
    start = time.perf_counter()
    context_view = last is not None and last.context_view
    if last is not None and last.pool_shapes is not None and last.settings is not None:
        # a context view's shapes and settings, numbered for the whole build: the last chunk holds them all
        insert("pool_shapes", last.pool_shapes, True)
        insert("settings", last.settings, True)
    con.execute(grid_view_sql(con, prefix, context_view, last.speed if last is not None else True))
    con.execute("CHECKPOINT")
    if clock:
        clock.add("view + checkpoint", time.perf_counter() - start)
    return rows


def _write_from_thread(
    chunks: Iterable[GridTables], write: Callable[[GridTables], None], clock: Stopwatch | None
) -> None:
    pending: queue.Queue[GridTables | None] = queue.Queue(maxsize=2)
    failure: list[BaseException] = []

    def loop() -> None:
        try:
            while (chunk := pending.get()) is not None:
                write(chunk)
        except BaseException as exc:  # re-raised in the caller
            failure.append(exc)
            while pending.get() is not None:  # let the producer finish
                pass

    writer = threading.Thread(target=loop, name="grid-duckdb")
    writer.start()
    try:
        start = time.perf_counter()
        for chunk in chunks:
            if clock:
                clock.add("wait for Python + Polars", time.perf_counter() - start)
            pending.put(chunk)
            start = time.perf_counter()
    finally:
        pending.put(None)
        writer.join()
    if failure:
        raise failure[0]


def publish_star_frames(deployments: pl.DataFrame, contexts: pl.DataFrame, path: Path) -> float:
    """The warehouse's layout today: deployments (every context-free column, strings included) and
    contexts as two tables, CREATE TABLE ... AS SELECT * from each frame; seconds."""
    start = time.perf_counter()
    con = _fresh(path)
    try:
        con.register("deployment_frame", deployments)
        con.register("context_frame", contexts)
        con.execute("CREATE TABLE grid_deployments AS SELECT * FROM deployment_frame")
        con.execute("CREATE TABLE grid_contexts AS SELECT * FROM context_frame")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return time.perf_counter() - start


def scalar_sample(
    sample: pl.DataFrame, models: dict[str, GridModel], gpus: dict[str, GpuSku]
) -> tuple[int, float, int]:
    """(rows, seconds, mismatching rows) of `estimate` on the sampled grid rows."""
    rows = list(sample.iter_rows(named=True))
    compared = [
        c for c in GRID_COLUMNS
        if c not in ("model", "model_family", "gpu", "weight_dtype", "kv_dtype", "num_gpus", "tpot_ms",
                     "output_tokens_per_second")  # the speed columns: tests/test_grid.py checks them
    ]
    mismatches = 0
    start = time.perf_counter()
    contracts = []
    for row in rows:
        model = models[row["model"]]
        # the grid runs each deployment at the max_model_len that starts (vLLM's auto-fit), at the release its row states
        deployment = DeploymentSpec(tp=row["tp"], pp=row["pp"], dp=row["dp"], ep=row["ep"],
                                    weight_dtype=row["weight_dtype"], kv_dtype=row["kv_dtype"], engine=row["engine"],
                                    engine_version=row["engine_version"], max_model_len=AUTO_MAX_MODEL_LEN)  # fmt: skip
        contracts.append(
            estimate(model.spec, deployment, gpu=gpus[row["gpu"]], model_name=model.repo_id,
                     checkpoint_bytes=model.checkpoint_bytes, context_tokens=row["context"]).contract()
        )  # fmt: skip
    elapsed = time.perf_counter() - start
    for row, contract in zip(rows, contracts, strict=True):
        # vLLM's DP ranks are TP groups of their own (world size tp x pp x dp); SGLang's DP attention splits --tp
        gpus_per_replica = row["tp"] * row["pp"] * (row["dp"] if row["engine"] == "vllm" else 1)
        if any(row[c] != contract[RENAMED.get(c, c)] for c in compared) or row["num_gpus"] != gpus_per_replica:
            mismatches += 1
    return len(rows), elapsed, mismatches


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="at least this many grid rows")
    parser.add_argument(
        "--variants", type=int, default=None, help="synthetic variants per model (default: from --rows)"
    )
    parser.add_argument("--db", type=Path, default=None, help="DuckDB file (default: a temporary one)")
    parser.add_argument("--sample", type=int, default=2000, help="rows timed with the scalar estimate")
    parser.add_argument("--chunk-models", type=int, default=192, help="models per pipeline chunk")
    # inserting the chunks, a second DuckDB thread doubled the CPU time of the inserts for a larger file (row groups
    # written per thread) and took longer on two cores, where the planning holds the other core (benchmarks/README.md)
    parser.add_argument(
        "--duckdb-threads", type=int, default=1, help="DuckDB threads while publishing (0: DuckDB's own; default: 1)"
    )
    parser.add_argument("--writer-thread", action="store_true", help="DuckDB inserts from a thread of their own")
    parser.add_argument(
        "--processes", type=int, default=min(2, len(os.sched_getaffinity(0))),
        help="processes that build the grid (2: a second one builds part of the fleet; default: 2 where 2 cores are usable)",
    )  # fmt: skip
    parser.add_argument(
        "--stored-contexts", action="store_true",
        help="store the context rows as a table (grid_contexts) instead of computing them in the view",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--baseline", action="store_true", help="also time the warehouse's two-frame star publish (same run)"
    )
    parser.add_argument(
        "--no-speed-baseline", action="store_true",
        help="skip the same-run baseline of the memory-only grid (GridOptions(speed=False))",
    )  # fmt: skip
    parser.add_argument(
        "--peer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ridgepoint in the same run (default: on where --peer-venv exists)",
    )
    parser.add_argument("--peer-venv", type=Path, default=DEFAULT_VENV, help="ridgepoint's venv")
    parser.add_argument("--peer-rows", type=int, default=100_000, help="grid rows sampled for the peer")
    parser.add_argument("--peer-repeat", type=int, default=3, help="the peer's passes (best counts)")
    args = parser.parse_args(argv)
    has_peer = (args.peer_venv / "bin" / "python").exists()
    if args.peer and not has_peer:
        raise SystemExit(f"--peer: no {args.peer_venv}; run benchmarks/setup_ridgepoint.sh")
    if args.peer is None:
        args.peer = has_peer
        if not has_peer:
            print(f"peer: ridgepoint not run (no {args.peer_venv}; benchmarks/setup_ridgepoint.sh creates it)")

    models, skipped = catalog_models()
    gpus = catalog_gpus()
    print(f"machine: {cores()}; polars {pl.__version__} ({pl.thread_pool_size()} threads), duckdb {duckdb.__version__}")
    count = None
    if args.variants is None:
        # rows grow with the models; measure the catalog's rows per model on the cheap deployment count, and take
        # as many models as give --rows with a 2 % margin (the last round of variants partly)
        per_model = build_capacity_grid(models, gpus).select(pl.len()).collect().item() / len(models)
        count = max(len(models), math.ceil(args.rows * 1.02 / per_model))
        args.variants = math.ceil(count / len(models)) - 1
    everything = fleet(models, args.variants, count)
    print(f"fleet: {len(models)} catalog models and {len(everything) - len(models)} synthetic variants of them "
          f"(up to {args.variants} each) = {len(everything)} models, {len(gpus)} GPUs "
          f"({len(skipped)} catalog entries refused by the parser)")

    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or Path(tmp) / "grid.duckdb"
        path.parent.mkdir(parents=True, exist_ok=True)
        # the fleet's specs live as long as the build: frozen out of the cyclic collector, whose full passes would
        # otherwise walk them again and again while the planning allocates rows (as the grid's second process does)
        gc.freeze()
        load_before = load()
        clock = Stopwatch()
        start, cpu = time.perf_counter(), cpu_seconds()
        con = _fresh(path, args.duckdb_threads)
        view = not args.stored_contexts
        chunks = iter_grid_tables_parallel(
            everything, gpus, chunk_models=args.chunk_models, context_view=view, processes=args.processes
        )
        chunk_count = [0]
        rows = publish_grid_tables(con, _counted(chunks, chunk_count), clock=clock, writer_thread=args.writer_thread)
        con.close()
        total_s, cpu_s = time.perf_counter() - start, cpu_seconds() - cpu
        load_after = load()
        rss = peak_rss_gib()
        size = path.stat().st_size

        con = duckdb.connect(str(path), read_only=True)
        try:
            counted = con.execute("SELECT count(*) FROM capacity_grid").fetchone()
            assert counted is not None and counted[0] == rows["contexts"], (counted, rows)
            query_ms: dict[str, float] = {}
            for name, query in QUERIES.items():
                for _ in range(3):
                    begin = time.perf_counter()
                    con.execute(query).fetchall()
                    elapsed = (time.perf_counter() - begin) * 1000
                    query_ms[name] = min(query_ms.get(name, elapsed), elapsed)
            pct = 100 * args.sample / max(rows["contexts"], 1)
            sample = con.execute(
                f"SELECT * FROM capacity_grid USING SAMPLE {min(pct, 100):.6f}% (bernoulli, {args.seed})"
            ).pl()
            peer: PeerResult | None = None
            if args.peer:
                fleet_by_name = {m.repo_id: m for m in everything}
                peer = run_peer(con, fleet_by_name, args.peer_venv, args.peer_rows, args.seed, args.peer_repeat)
        finally:
            con.close()
        n, scalar_s, mismatches = scalar_sample(sample, {m.repo_id: m for m in everything}, {g.id: g for g in gpus})

        memory_only = None
        if not args.no_speed_baseline:
            # the same grid without the speed columns (the memory model alone), in the same run
            begin = time.perf_counter()
            con = _fresh(path.with_name(path.stem + "-memory.duckdb"), args.duckdb_threads)
            chunks = iter_grid_tables(
                everything, gpus, GridOptions(speed=False), chunk_models=args.chunk_models, context_view=view
            )
            published = publish_grid_tables(con, chunks, clock=Stopwatch(), writer_thread=args.writer_thread)
            con.close()
            memory_only = (time.perf_counter() - begin, published["contexts"])

        baseline = None
        if args.baseline:
            # the same grid as the single-frame star of before (one deployments frame with every
            # context-free column, a narrow contexts frame), built and published in the same run
            begin = time.perf_counter()
            deployments = build_deployments(everything, gpus).with_row_index("deployment_id")
            contexts = expand_contexts(deployments, carry=["deployment_id"]).select("deployment_id", *CONTEXT_COLUMNS)
            deployments_df, contexts_df = pl.collect_all([deployments.drop("contexts"), contexts])
            build_s = time.perf_counter() - begin
            publish_s = publish_star_frames(
                deployments_df.select(pl.exclude("^pool_.*$")), contexts_df, path.with_name(path.stem + "-star.duckdb")
            )
            baseline = (build_s, publish_s, contexts_df.height)
            del deployments_df, contexts_df

    grid_rows = rows["contexts"]
    scalar_rate = n / scalar_s if n and scalar_s else float("nan")
    rate = grid_rows / total_s
    stages = ", ".join(f"{stage} {seconds:.2f} s" for stage, seconds in clock.seconds.items())
    print(f"tables: {rows['gpus']} GPUs, {rows['layouts']:,} layouts, {rows['deployments']:,} deployments, "
          f"{grid_rows:,} context rows (view capacity_grid: {len(GRID_COLUMNS)} columns)")  # fmt: skip
    print(f"build + publish: {total_s:.2f} s ({cpu_s:.2f} s CPU) = {rate:,.0f} rows/s, {size / 2**20:,.0f} MiB "
          f"(target: >= 10M rows in <= 5 s); load average {load_before:.2f} before, {load_after:.2f} after")  # fmt: skip
    print(f"  stages (summed over {chunk_count[0]} chunks, overlapping): {stages}")
    print(f"peak RSS: {rss:.2f} GiB")
    print("queries on the view (best of 3): " + ", ".join(f"{name} {ms:.0f} ms" for name, ms in query_ms.items()))
    if n:
        print(f"scalar estimate on {n:,} rows sampled from the view: {scalar_s:.2f} s = {scalar_rate:,.0f} rows/s; "
              f"grid build + publish is {rate / scalar_rate:,.0f}x faster per row; {mismatches} sampled rows disagree")  # fmt: skip
    if memory_only:
        seconds, height = memory_only
        print(f"memory-only grid (same run, no speed columns): {seconds:.2f} s = {height / seconds:,.0f} rows/s; "
              f"the speed model costs {100 * (total_s / seconds - 1):+.0f}% of the build")  # fmt: skip
    if baseline:
        build_s, publish_s, height = baseline
        before = build_s + publish_s
        print(f"baseline (same run), the warehouse's two-frame star: build {build_s:.2f} s + publish {publish_s:.2f} s = "
              f"{before:.2f} s = {height / before:,.0f} rows/s; now {before / total_s:.1f}x faster")  # fmt: skip
    if peer:
        usable = len(os.sched_getaffinity(0))
        for line in peer_lines(peer, grid_rows, total_s, cpu_s, usable):
            print(line)
    print(f"load average now: {load():.2f}")
    if mismatches:
        raise SystemExit(f"{mismatches} sampled rows disagree with the scalar estimate")


if __name__ == "__main__":
    main()
