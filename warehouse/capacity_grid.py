"""From the run's `raw.models` and `raw.gpus` to the capacity grid and the context limits.

The grid is `capacity.grid.build_capacity_grid` (vectorized Polars); this module reads the
warehouse rows back as domain objects (`models_registry.planning`), keeps one bad model from sinking
the rest, and records every model left out with a reason (`raw.grid_errors`).

The grid is computed per **partition**: the models of one family (`partition_names`; a family of
more than 32 models is split into buckets by repo id, so one partition's frames stay small). A partition's
key (`GridPartition.part_key`) is the sha256 of everything its rows follow from (its models' raw
rows, every GPU, the grid options, the capacity code); `refresh_partitions` recomputes only the
partitions whose key the warehouse does not hold yet (or those a backfill names), writes each one's
frames as Parquet under the run's staging area, loads them into the run's build, and maps the run
to the partition versions it publishes (`raw.grid_partitions`). Rows are stored once per key: an
unchanged partition costs no new rows, whatever the number of runs of history.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from capacity.columns import CONTEXT_COLUMNS, DEPLOYMENT_COLUMNS, GRID_COLUMNS
from capacity.grid import (
    TARGET_CONCURRENCIES,
    GridModel,
    GridOptions,
    GridTables,
    grid_tables,
)
from capacity.spec import DeploymentSpec, GpuSku
from models_registry.frames import ingest_errors_frame
from models_registry.planning import gpu_skus, grid_models
from models_registry.sources.common import ItemError, one_line
from warehouse.provenance import CAPACITY_DIR, sha256_file, sha256_tree
from warehouse.sql import columns, load_frame, qualified, relation_kind, transaction


@dataclass(frozen=True, slots=True)
class CapacityFrames:
    """The grid stored as a star: one row per deployment, one narrow row per deployment x context.

    `deployments` holds every column of a grid row that does not depend on the context (keys,
    dtypes, bytes, blocks...), `grid` the per-context columns and `context_limits` the max context
    per target concurrency, both keyed by `deployment_id`. Joined back on it they are exactly
    `build_capacity_grid` / `build_context_limits` (the wide grid repeats ~40 columns, mostly
    strings, for every context: ten times the bytes to write and to keep in history).
    """

    deployments: pl.DataFrame
    grid: pl.DataFrame
    context_limits: pl.DataFrame
    errors: pl.DataFrame
    models: int  # models with grid rows

    def wide_grid(self) -> pl.DataFrame:
        """The grid as `build_capacity_grid` returns it (GRID_COLUMNS), joined back."""
        return self.grid.join(self.deployments, on="deployment_id", how="left").select(GRID_COLUMNS)


def _grid_tables(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None
) -> tuple[list[GridTables], list[ItemError]]:
    """The grid's tables with the context limits; when the build of all models raises, one model at
    a time (ids continuing), each failure reported and the rest planned."""
    try:
        return [grid_tables(models, gpus, options, concurrencies=TARGET_CONCURRENCIES)], []
    except Exception:
        pass
    tables: list[GridTables] = []
    errors: list[ItemError] = []
    layouts = deployments = 0
    for model in models:
        try:
            one = grid_tables(
                [model],
                gpus,
                options,
                concurrencies=TARGET_CONCURRENCIES,
                first_layout_id=layouts,
                first_deployment_id=deployments,
            )
        except Exception as exc:  # one model's failure must not stop the run; it is reported
            reason = one_line(f"{model.repo_id}: capacity grid failed: {type(exc).__name__}: {exc}")
            errors.append(ItemError("model", model.repo_id, "grid", reason))
            continue
        layouts += one.layouts.height
        deployments += one.deployments.height
        tables.append(one)
    return tables, errors


def capacity_frames(models: pl.DataFrame, gpus: pl.DataFrame, options: GridOptions | None = None) -> CapacityFrames:
    """The grid and the context limits for every model of the run (`raw.models`, `raw.gpus`
    rows), and why any model is missing."""
    specs, errors = grid_models(models)
    return plan(specs, gpu_skus(gpus), options, errors)


def plan(
    specs: Sequence[GridModel],
    skus: Sequence[GpuSku],
    options: GridOptions | None = None,
    errors: list[ItemError] | None = None,
    *,
    id_offset: int = 0,
) -> CapacityFrames:
    """The grid frames for parsed models and GPUs (`errors`: models already left out, with why);
    deployment ids count from `id_offset` (a partition's own range, `partition_id_offset`)."""
    errors = list(errors or [])
    # the PP = 1 deployments first, PP > 1 planned only where those do not fit (`grid_tables`)
    tables, more = _grid_tables(specs, skus, options)
    errors += more
    if not tables:
        tables = [grid_tables([], skus, options, concurrencies=TARGET_CONCURRENCIES)]
    ids = pl.col("deployment_id").cast(pl.Int64) + id_offset  # a partition's own id range
    deployments = pl.concat([t.deployment_rows() for t in tables]).with_columns(ids)
    grid = pl.concat([t.context_rows() for t in tables]).select("deployment_id", *CONTEXT_COLUMNS).with_columns(ids)
    limits = pl.concat([t.context_limits for t in tables if t.context_limits is not None]).with_columns(ids)
    planned = set(deployments.get_column("model").unique().to_list()) if deployments.height else set()
    for model in specs:
        if model.repo_id not in planned and not any(e.item_key == model.repo_id for e in errors):
            reason = f"{model.repo_id}: no deployment in the grid (no valid parallelism on any GPU in the catalog)"
            errors.append(ItemError("model", model.repo_id, "grid", reason))
    return CapacityFrames(
        deployments=deployments.select("deployment_id", *DEPLOYMENT_COLUMNS),
        grid=grid,
        context_limits=limits.select("deployment_id", "concurrency", "max_context"),
        errors=ingest_errors_frame(errors),
        models=len(planned),
    )


# --- partitions ----------------------------------------------------------------------------------

PARTITION_ID_SHIFT = 24  # a partition's deployment ids: prefix << 24 | row (2**24 deployments each)
PARTITION_PREFIX_BITS = 38  # from the name's sha256: ids stay below 2**62 (BIGINT)
MODELS_PER_PARTITION = 32  # a family with more models is split in ceil(n / 32) buckets by repo id
PART_ID_HEX = 15  # part_id: the key's first 60 bits, a BIGINT join key for the raw tables
OTHER_PARTITION = "other"
GRID_TABLES = ("deployments", "capacity_grid", "context_limits")
PARTITIONS_TABLE = "grid_partitions"
NO_PART = -1  # the part_id an empty table is created with (no part_key maps to a negative id)
# This run's partitions, for SQL over the content-keyed raw grid tables (checks, counts).
THIS_RUN_PARTS = "(select part_id from raw.grid_partitions where run_id = (select run_id from raw.run))"


class PartitionError(ValueError):
    """A backfill names a partition the catalog does not have, or two partitions' id ranges collide."""


def partition_name(family: object) -> str:
    """The partition of a model: its family, lowercased, as a safe file name (`other` when unknown)."""
    text = re.sub(r"[^a-z0-9_-]+", "_", str(family or "").strip().lower()).strip("_")[:64]
    return text or OTHER_PARTITION


def partition_id_offset(name: str) -> int:
    """The first deployment id of a partition: fixed by its name, so ids of an unchanged partition
    stay the same from run to run whatever the other partitions do."""
    prefix = int(hashlib.sha256(name.encode()).hexdigest(), 16) >> (256 - PARTITION_PREFIX_BITS)
    return prefix << PARTITION_ID_SHIFT


def _bucket(repo_id: str, buckets: int) -> int:
    return int(hashlib.sha256(repo_id.encode()).hexdigest()[:8], 16) % buckets


def partition_names(models: pl.DataFrame) -> pl.Series:
    """Each raw.models row's partition: its family (`partition_name`), or `<family>-<k>` when the
    family has more than MODELS_PER_PARTITION models (bucket k of ceil(n / 32), by the sha256 of
    the repo id: a model stays in its bucket while the family's bucket count stays the same)."""
    families = (
        models.get_column("family").map_elements(partition_name, return_dtype=pl.String)
        if "family" in models.columns
        else pl.Series([OTHER_PARTITION] * models.height, dtype=pl.String)
    )
    counts = families.value_counts()
    buckets = {str(f): -(-int(n) // MODELS_PER_PARTITION) for f, n in counts.iter_rows()}
    names = [
        family if buckets[family] == 1 else f"{family}-{_bucket(str(repo_id), buckets[family])}"
        for family, repo_id in zip(families.to_list(), models.get_column("repo_id").to_list(), strict=True)
    ]
    return pl.Series("_partition", names, dtype=pl.String)


REGISTRY_DIR = Path(__file__).resolve().parent.parent / "models_registry"


def grid_code_version() -> str:
    """sha256 over the code a grid row follows from: the capacity package (code and data), the
    registry's config parsing (models_registry), this module, and Polars' version; a partition
    computed by other code is computed again."""
    digest = hashlib.sha256()
    for root, pattern in ((CAPACITY_DIR, "**/*.py"), (CAPACITY_DIR, "**/*.yaml"), (REGISTRY_DIR, "**/*.py")):
        digest.update((sha256_tree(root, pattern) or "").encode())
    digest.update((sha256_file(Path(__file__)) or "").encode())
    digest.update(pl.__version__.encode())
    return digest.hexdigest()


MODEL_KEY_COLUMNS = ("repo_id", "config_json", "checkpoint_bytes", "family", "source", "source_path", "revision")


@dataclass(frozen=True, slots=True)
class GridPartition:
    """One partition of the run's catalog: its name, its models' raw rows and its content key."""

    name: str
    models: pl.DataFrame  # raw.models rows of the partition, by repo_id
    part_key: str  # sha256 hex of the inputs

    @property
    def part_id(self) -> int:
        return int(self.part_key[:PART_ID_HEX], 16)


def grid_partitions(
    models: pl.DataFrame, gpus: pl.DataFrame, options: GridOptions | None = None, code_version: str | None = None
) -> list[GridPartition]:
    """The run's models split by family, each with the key of what its grid rows follow from."""
    if models.height == 0:
        return []
    code = code_version or grid_code_version()
    shared = json.dumps(
        {"code": code, "options": repr(options or GridOptions()), "gpus": [repr(s) for s in gpu_skus(gpus)]},
        sort_keys=True,
    )
    present = [c for c in MODEL_KEY_COLUMNS if c in models.columns]
    named = models.with_columns(partition_names(models)).sort("repo_id")
    parts: list[GridPartition] = []
    offsets: dict[int, str] = {}
    for (name,), rows in sorted(named.group_by(["_partition"]), key=lambda item: str(item[0][0])):
        name = str(name)
        other = offsets.setdefault(partition_id_offset(name), name)
        if other != name:
            raise PartitionError(f"partitions {other!r} and {name!r} have the same deployment id range; rename one family")
        digest = hashlib.sha256(shared.encode())
        digest.update(b"\0" + name.encode() + b"\0")
        for row in rows.select(present).iter_rows():
            digest.update(json.dumps(row, default=str).encode() + b"\n")
        parts.append(GridPartition(name, rows.drop("_partition"), digest.hexdigest()))
    return parts


def stage_parquet(frame: pl.DataFrame, stage_dir: Path, part: GridPartition, table: str) -> Path:
    """Write one partition's frame for `raw.<table>` as `<stage>/<partition>/<key[:16]>/<table>.parquet`
    (zstd: as fast to write and read here as lz4 or none, and a third of lz4's bytes)."""
    folder = stage_dir / part.name / part.part_key[:16]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{table}.parquet"
    frame.write_parquet(path, compression="zstd", statistics=False)
    return path


def map_run_to_versions(
    con: duckdb.DuckDBPyConnection,
    tables: Sequence[str],
    empty: Callable[[], Mapping[str, pl.DataFrame]],
    map_table: str,
    versions: pl.DataFrame,
    run: dict[str, object],
) -> pl.DataFrame:
    """The end of a refresh of content-keyed tables: any of `tables` no version was ever loaded into
    (a new warehouse that computed nothing) is created empty, keyed NO_PART, so its views still
    resolve; then `raw.<map_table>` maps this run to the `versions` it publishes. Returns `versions`."""
    missing = [t for t in tables if relation_kind(con, "raw", t) != "table"]
    if missing:
        frames = empty()
        for table in missing:
            load_frame(con, "raw", table, frames[table], {"part_id": NO_PART})
    load_frame(con, "raw", map_table, versions, run)
    return versions


LEGACY_PARTITION = "all"  # a run of a warehouse written before partitions: its whole grid


def legacy_part_key(run_id: object) -> str:
    """The key a run's whole grid gets when a warehouse from before partitions is adopted."""
    return hashlib.sha256(f"run:{run_id}".encode()).hexdigest()


def adopt_rows_per_run(
    con: duckdb.DuckDBPyConnection, tables: Sequence[str], source: str | None = None
) -> list[tuple[str, object, int, str]]:
    """Re-key run-keyed rows by content: every run's rows of `raw.<table>` (or of `source`, a
    relation with run_id and run_date, written to each table) become one partition version,
    `part_id` = legacy_part_key(run_id), without run_id and run_date. Returns (run_id, run_date,
    part_id, part_key) per run; nothing when the tables are keyed by content already."""
    first = source or qualified("raw", tables[0])
    runs = con.execute(f"select distinct run_id, run_date from {first} order by run_id").fetchall()
    mapping = pl.DataFrame(
        {
            "run_id": [str(r[0]) for r in runs],
            "part_id": [int(legacy_part_key(r[0])[:PART_ID_HEX], 16) for r in runs],
        },
        schema={"run_id": pl.String, "part_id": pl.Int64},
    )
    con.register("legacy_parts", mapping)
    try:
        for table in tables:
            origin = source or qualified("raw", table)
            con.execute(
                f"create or replace table {qualified('raw', table)} as select m.part_id, t.* exclude (run_id, run_date) "
                f"from {origin} as t inner join legacy_parts as m using (run_id)"
            )
    finally:
        con.unregister("legacy_parts")
    return [(str(r[0]), r[1], int(legacy_part_key(r[0])[:PART_ID_HEX], 16), legacy_part_key(r[0])) for r in runs]


def adopt_run_keyed_grid(con: duckdb.DuckDBPyConnection) -> int:
    """A warehouse written before partitions kept the grid's raw rows per run (run_id columns):
    each retained run's grid becomes one partition version (`all`) that run published, so its
    history stays; the next partitioned run computes its partitions anew. Returns the runs adopted."""
    if relation_kind(con, "raw", "deployments") != "table":
        return 0
    present = {name for name, _t, _c in columns(con, "raw", "deployments")}
    if "run_id" not in present or "part_id" in present:
        return 0
    tables = [t for t in GRID_TABLES if relation_kind(con, "raw", t) == "table"]
    counts = {
        t: dict(con.execute(f"select run_id, count(*) from {qualified('raw', t)} group by 1").fetchall()) for t in tables
    }
    models = dict(con.execute("select run_id, count(distinct model) from raw.deployments group by 1").fetchall())
    adopted = adopt_rows_per_run(con, tables)
    rows = [
        {
            "partition": LEGACY_PARTITION,
            "part_key": part_key,
            "part_id": part_id,
            "computed_by_run_id": run_id,
            "computed": True,
            "models": int(models.get(run_id, 0)),
            "deployments": int(counts.get("deployments", {}).get(run_id, 0)),
            "grid_rows": int(counts.get("capacity_grid", {}).get(run_id, 0)),
            "context_limit_rows": int(counts.get("context_limits", {}).get(run_id, 0)),
            "errors_json": "[]",
        }
        for run_id, _date, part_id, part_key in adopted
    ]
    for (run_id, run_date, _p, _k), row in zip(adopted, rows, strict=True):
        load_frame(
            con,
            "raw",
            PARTITIONS_TABLE,
            pl.DataFrame([row], schema=PARTITION_SCHEMA),
            {"run_id": run_id, "run_date": run_date},
        )
    return len(adopted)


@dataclass(frozen=True, slots=True)
class PartitionRefresh:
    """What `refresh_partitions` did: the partitions it computed, those it reused, the rows."""

    computed: list[str]
    reused: list[str]
    models: int  # models with grid rows in this run
    deployments: int
    grid_rows: int
    context_limit_rows: int
    errors: pl.DataFrame
    parquet_bytes: int  # Parquet written to the staging area by this run
    compute_seconds: float
    load_seconds: float
    files: list[str] = field(default_factory=list)  # staged Parquet files, relative to the staging area


def _errors_json(errors: Sequence[ItemError]) -> str:
    return json.dumps(
        [[e.item_kind, e.item_key, e.stage, e.reason, e.source_path, e.raw_excerpt] for e in errors], sort_keys=False
    )


def _errors_of(text: str | None) -> list[ItemError]:
    return [ItemError(*item) for item in json.loads(text or "[]")]


@dataclass(frozen=True, slots=True)
class StoredVersions:
    """The partition versions a build holds in a map table (`raw.grid_partitions`...): by key (any
    retained run) and, by partition name, the one the latest earlier run published."""

    by_key: dict[str, dict[str, object]]
    latest: dict[str, dict[str, object]]

    @classmethod
    def read(cls, con: duckdb.DuckDBPyConnection, table: str) -> StoredVersions:
        if relation_kind(con, "raw", table) != "table":
            return cls({}, {})
        source = qualified("raw", table)
        frame = con.execute(
            f"select p.*, r.started_at from {source} as p "
            "left join (select run_id, started_at from marts.runs) as r using (run_id) "
            "where p.run_id <> (select run_id from raw.run) order by r.started_at nulls first, p.run_id"
            if relation_kind(con, "marts", "runs") is not None
            else f"select * from {source} where run_id <> (select run_id from raw.run)"
        ).pl()
        by_key: dict[str, dict[str, object]] = {}
        latest: dict[str, dict[str, object]] = {}
        for row in frame.iter_rows(named=True):  # oldest first: the latest run's rows win
            by_key[str(row["part_key"])] = row
            latest[str(row["partition"])] = row
        return cls(by_key, latest)

    def reusable(self, name: str, part_key: str, backfill: Sequence[str] | None) -> dict[str, object] | None:
        """The stored version to publish again, or None to compute the partition: without a backfill
        the version with this key; in a backfill, none for the partitions it names, the latest
        published one for the others (None if no run published one yet)."""
        if backfill is not None:
            return None if name in backfill else self.latest.get(name)
        return self.by_key.get(part_key)


def refresh_partitions(
    con: duckdb.DuckDBPyConnection,
    models: pl.DataFrame,
    gpus: pl.DataFrame,
    *,
    stage_dir: Path,
    run: dict[str, object],
    backfill: Sequence[str] | None = None,
    options: GridOptions | None = None,
) -> PartitionRefresh:
    """Bring the run's build up to date with the catalog, one partition at a time.

    Without `backfill` (the nightly): a partition whose key the build already holds (from any
    retained run) is reused as is; any other is computed. With `backfill` (partition names): those
    are computed again, every other partition is published as the last run published it (a
    partition no run has published yet is computed). Each computed partition is written as
    Parquet under `stage_dir/<partition>/<key>/` and loaded from there into the raw tables
    (rows keyed by `part_id`); `raw.grid_partitions` maps this run to its partition versions.
    """
    parts = grid_partitions(models, gpus, options)
    names = {p.name for p in parts}
    unknown = sorted(set(backfill or ()) - names)
    if unknown:
        raise PartitionError(
            f"no partition {', '.join(repr(u) for u in unknown)} in the catalog; partitions: {', '.join(sorted(names))}"
        )
    with transaction(con):
        adopt_run_keyed_grid(con)
    stored = StoredVersions.read(con, PARTITIONS_TABLE)
    with transaction(con):  # one commit for every partition
        return _refresh(con, parts, stored, gpus, stage_dir=stage_dir, run=run, backfill=backfill, options=options)


# a reused partition's row, as the run that computed it recorded it
_REUSED_COLUMNS = (
    "part_key",
    "part_id",
    "computed_by_run_id",
    "models",
    "deployments",
    "grid_rows",
    "context_limit_rows",
    "errors_json",
)
_ITEM_ERROR_COLUMNS = ("item_kind", "item_key", "stage", "reason", "source_path", "raw_excerpt")


def _refresh(
    con: duckdb.DuckDBPyConnection,
    parts: Sequence[GridPartition],
    stored: StoredVersions,
    gpus: pl.DataFrame,
    *,
    stage_dir: Path,
    run: dict[str, object],
    backfill: Sequence[str] | None,
    options: GridOptions | None,
) -> PartitionRefresh:
    skus = gpu_skus(gpus)
    computed: list[str] = []
    reused: list[str] = []
    rows: list[dict[str, object]] = []
    errors: list[ItemError] = []
    files: list[str] = []
    parquet_bytes = 0
    compute_s = load_s = 0.0

    def load(part: GridPartition, paths: dict[str, Path]) -> float:
        start = time.perf_counter()
        for table in GRID_TABLES:
            load_frame(con, "raw", table, paths[table], {"part_id": part.part_id})
        return time.perf_counter() - start

    # each partition is loaded into the build by a worker thread while the next one is planned:
    # DuckDB and Polars release the GIL, so the planning's Python part runs beside the load (only
    # the worker uses the connection until the loop ends; loads stay in partition order)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="grid-load") as loader:
        loads: list[Future[float]] = []
        for part in parts:
            previous = stored.reusable(part.name, part.part_key, backfill)
            if previous is not None:
                reused.append(part.name)
                errors += _errors_of(previous.get("errors_json"))  # type: ignore[arg-type]
                rows.append({"partition": part.name, "computed": False} | {k: previous[k] for k in _REUSED_COLUMNS})
                continue
            start = time.perf_counter()
            specs, parse_errors = grid_models(part.models)
            frames = plan(specs, skus, options, parse_errors, id_offset=partition_id_offset(part.name))
            if frames.deployments.height >= 1 << PARTITION_ID_SHIFT:
                raise PartitionError(f"partition {part.name!r} has {frames.deployments.height:,} deployments, more than its id range")
            part_errors = [ItemError(*r) for r in frames.errors.select(*_ITEM_ERROR_COLUMNS).iter_rows()]
            counts = {
                "deployments": frames.deployments.height,
                "capacity_grid": frames.grid.height,
                "context_limits": frames.context_limits.height,
            }
            paths = {}
            for table, frame in zip(GRID_TABLES, (frames.deployments, frames.grid, frames.context_limits), strict=True):
                paths[table] = stage_parquet(frame, stage_dir, part, table)
                parquet_bytes += paths[table].stat().st_size
                files.append(paths[table].relative_to(stage_dir).as_posix())
            planned = frames.models
            del frames
            compute_s += time.perf_counter() - start
            if loads:
                loads[-1].result()  # one load at a time, and its error now rather than after every plan
            loads.append(loader.submit(load, part, paths))
            computed.append(part.name)
            errors += part_errors
            rows.append(
                {
                    "partition": part.name,
                    "part_key": part.part_key,
                    "part_id": part.part_id,
                    "computed_by_run_id": run["run_id"],
                    "computed": True,
                    "models": int(planned),
                    "deployments": counts["deployments"],
                    "grid_rows": counts["capacity_grid"],
                    "context_limit_rows": counts["context_limits"],
                    "errors_json": _errors_json(part_errors),
                }
            )
        load_s = sum((done.result() for done in loads), 0.0)
    def empty() -> dict[str, pl.DataFrame]:
        frames = plan([], skus, options)
        return dict(zip(GRID_TABLES, (frames.deployments, frames.grid, frames.context_limits), strict=True))

    frame = map_run_to_versions(con, GRID_TABLES, empty, PARTITIONS_TABLE, pl.DataFrame(rows, schema=PARTITION_SCHEMA), run)
    return PartitionRefresh(
        computed=computed,
        reused=reused,
        models=int(frame.get_column("models").sum() or 0),
        deployments=int(frame.get_column("deployments").sum() or 0),
        grid_rows=int(frame.get_column("grid_rows").sum() or 0),
        context_limit_rows=int(frame.get_column("context_limit_rows").sum() or 0),
        errors=ingest_errors_frame(errors),
        parquet_bytes=parquet_bytes,
        compute_seconds=compute_s,
        load_seconds=load_s,
        files=files,
    )


# the columns every partition map starts with: the partition, its key and id range, the run that computed
# it, whether this run did, and its models (raw.grid_partitions, raw.limit_partitions)
PARTITION_KEY_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "partition": pl.String,
    "part_key": pl.String,
    "part_id": pl.Int64,
    "computed_by_run_id": pl.String,
    "computed": pl.Boolean,
    "models": pl.Int64,
}
PARTITION_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    **PARTITION_KEY_SCHEMA,
    "deployments": pl.Int64,
    "grid_rows": pl.Int64,
    "context_limit_rows": pl.Int64,
    "errors_json": pl.String,
}


# --- the grid against the scalar engine ---------------------------------------------------------

FLOAT_TOLERANCE = 1e-4  # contract() rounds max_concurrency to 4 decimals
SAMPLE_SEED = 42


@dataclass(frozen=True, slots=True)
class Mismatch:
    model: str
    gpu: str
    settings: str
    column: str
    grid: object
    estimate: object

    def line(self) -> str:
        return (
            f"{self.model} on {self.gpu} ({self.settings}): {self.column} grid={self.grid!r} estimate={self.estimate!r}"
        )


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        fa, fb = float(a), float(b)  # type: ignore[arg-type]
        if math.isinf(fa) or math.isinf(fb):
            return fa == fb
        return abs(fa - fb) <= FLOAT_TOLERANCE * max(1.0, abs(fb))
    return a == b


def row_deployment(row: Mapping[str, object], max_model_len: int, engine_version: str | None = None) -> DeploymentSpec:
    """The deployment a grid row keys (tp, pp, dp, ep, the asked dtypes, the engine) at `max_model_len`."""
    return DeploymentSpec(
        tp=int(row["tp"]),  # type: ignore[call-overload]
        pp=int(row["pp"]),  # type: ignore[call-overload]
        dp=int(row.get("dp") or 1),  # type: ignore[call-overload]
        ep=int(row.get("ep") or 1),  # type: ignore[call-overload]
        weight_dtype=str(row["weight_dtype"]),
        kv_dtype=str(row["kv_dtype"]),
        engine=str(row["engine"]),
        engine_version=engine_version,
        max_model_len=max_model_len,
    )


def estimate_for_row(
    row: dict[str, object], spec: object, sku: GpuSku, checkpoint_bytes: int | None
) -> dict[str, object]:
    """`capplan estimate --json` for the deployment and context of one grid row."""
    from capacity.estimate import estimate
    from capacity.spec import ModelSpec

    assert isinstance(spec, ModelSpec)
    version = str(row["engine_version"]) if row.get("engine_version") is not None else None
    deployment = row_deployment(row, int(row["max_model_len"]), version)  # type: ignore[call-overload]
    result = estimate(
        spec,
        deployment,
        gpu=sku,
        model_name=str(row["model"]),
        checkpoint_bytes=checkpoint_bytes,
        context_tokens=int(row["context"]),  # type: ignore[call-overload]
    )
    contract = result.contract()
    # The grid keys a row by what was asked (--dtype, --kv-dtype) and names what it resolved to
    # weight_format / kv_cache_dtype; the contract reports only the resolved names.
    contract["weight_format"] = contract.pop("weight_dtype")
    contract["kv_cache_dtype"] = contract.pop("kv_dtype")
    return contract


def compare_sample(sample: pl.DataFrame, models: pl.DataFrame, gpus: pl.DataFrame) -> tuple[int, list[Mismatch]]:
    """Recompute each sampled grid row with the scalar engine; every shared column must agree."""
    specs = {m.repo_id: m for m in grid_models(models)[0]}
    skus = {s.id: s for s in gpu_skus(gpus)}
    mismatches: list[Mismatch] = []
    checked = 0
    for row in sample.iter_rows(named=True):
        model = specs.get(str(row["model"]))
        sku = skus.get(str(row["gpu"]))
        settings = (
            f"{row['engine']} {row.get('engine_version')} {row['weight_dtype']}/{row['kv_dtype']} "
            f"tp={row['tp']} pp={row['pp']} T={row['context']}"
        )
        if model is None or sku is None:
            mismatches.append(Mismatch(str(row["model"]), str(row["gpu"]), settings, "model/gpu", "present", "missing"))
            continue
        expected = estimate_for_row(row, model.spec, sku, model.checkpoint_bytes)
        checked += 1
        for column, value in row.items():
            if column in ("model", "gpu") or column not in expected:
                continue
            if not _same(value, expected[column]):
                mismatches.append(Mismatch(model.repo_id, sku.id, settings, column, value, expected[column]))
    return checked, mismatches
