"""Atomic publishing of the warehouse: readers see the previous run or the new one, never a mix.

A DuckDB file cannot be opened read-only by one process while another holds it read-write, so a
run never writes to the published file at all:

1. `begin(run_id)` (under the refresh lock, see `warehouse.lock`) removes builds left by crashed
   runs and copies the published file to a private build file next to it,
   `.<name>.<run_id>.build` (a first run starts from an empty database), and stamps it with the
   run (`raw.run`: the marts show the rows of that run).
2. The run's assets write their tables into the build (`connect(run_id)`).
3. `publish(run_id, ...)` keeps history, inserts the `marts.runs` row, checkpoints and closes the
   build, fsyncs it, and `os.replace`s it over the published path (an atomic rename on POSIX),
   then fsyncs the directory.

History, keyed by `run_id` and `run_date`, trimmed to the last `history_runs` runs:
- in place, each row once, for the big tables: the capacity grid's raw tables hold the rows of
  every grid partition version (keyed by its content key `part_id`) a retained run published, and
  `raw.grid_partitions` maps each run to its versions; `marts.<table>_history` are views that join
  them. A partition unchanged since the last run costs a row in the map, not its rows again.
  After trimming the runs, publishing drops the rows of part_ids no retained run refers to.
  A run that did not write a run-keyed raw table publishes the previous run's rows under its own id.
- by copy for every other mart (`marts.<table>_history` tables, one copy of a small mart per run).

A run may also stage files (the grid partitions' Parquet) in `.<name>.<run_id>.stage/` next to the
build; the staging area is deleted once the build is published (or discarded), and by the next
run's `begin` if the run crashed.

A warehouse path that is a symbolic link (or runs through one) names the file it leads to: the
lock, the build, the staging area and the rename are all beside the resolved file (`resolve_warehouse`),
so two names for one file share one lock and a run through a link replaces the file it points at,
keeping the link. A link that leads nowhere a run can rename into (a loop, a missing directory, a
directory that is not writable, something other than a file) is refused with a one-line reason
(`WarehouseUnusable`) before anything is written.

A reader that opened the old file keeps reading the old inode; one that opens after the rename
reads the new snapshot. A run killed at any point before the rename leaves the published file
untouched (its build is deleted by the next run); after it, the new snapshot is complete.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from warehouse.lock import RunLock
from warehouse.sql import (
    LAYERS,
    build_relation,
    columns,
    connect_reader,
    ident,
    qualified,
    relation_kind,
    sql_string,
)

PATH_ENV = "CAPPLAN_WAREHOUSE"
DEFAULT_PATH = "var/warehouse.duckdb"
DEFAULT_HISTORY_RUNS = 7
HISTORY_SUFFIX = "_history"
RUNS_TABLE = "runs"
BUILD_SUFFIX = ".build"
STAGE_SUFFIX = ".stage"
CONTENT_KEY = "part_id"  # raw tables keyed by content: rows kept while a retained run refers to them


class WarehouseMissing(FileNotFoundError):
    """No published warehouse at the path yet."""


class WarehouseUnusable(ValueError):
    """The warehouse path leads nowhere a run can lock and rename into (one line, says why)."""


class WarehouseCorrupt(RuntimeError):
    """The published file does not open as a DuckDB warehouse (one line: the cause, and the recovery
    where the file is damaged)."""


RECOVERY_HINT = "check it: capplan doctor; rebuild it (history kept where readable): capplan nightly --rebuild"


def resolve_warehouse(path: Path) -> tuple[Path, str | None]:
    """The file `path` names, every symbolic link followed, and why it cannot be used (or None).

    A path that does not exist yet resolves as far as its links go (a first run creates the file
    where the last link points). A loop cannot be resolved: the path itself, with the reason."""
    given = Path(os.path.abspath(path))
    try:
        return Path(os.path.realpath(given, strict=True)), None
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return given, f"{path} is a symbolic link loop; point it at a file or remove it"
        return given, f"cannot follow {path}: {exc.strerror or exc}"
    return Path(os.path.realpath(given)), None


def warehouse_path(path: str | Path | None = None) -> Path:
    """The published warehouse file: the argument, else `CAPPLAN_WAREHOUSE`, else `var/warehouse.duckdb`."""
    return Path(path or os.environ.get(PATH_ENV) or DEFAULT_PATH)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class PublishResult:
    path: Path
    run_id: str
    row_counts: dict[str, int]
    history_runs: int
    file_bytes: int
    seconds: float
    steps: dict[str, float] = field(default_factory=dict)  # seconds per publishing step


class Warehouse:
    """The published DuckDB file at `path`, and the private builds that replace it."""

    def __init__(self, path: str | Path | None = None, *, history_runs: int = DEFAULT_HISTORY_RUNS) -> None:
        if history_runs < 1:
            raise ValueError(f"history_runs must be >= 1, got {history_runs}")
        self.given = warehouse_path(path)  # the name the caller used (maybe a link)
        self.path, self._unusable = resolve_warehouse(self.given)  # the file it leads to
        self.history_runs = history_runs

    @property
    def via_link(self) -> bool:
        """Whether the path given leads through a symbolic link to a file by another name."""
        return self.path != Path(os.path.abspath(self.given))

    def check_writable(self) -> None:
        """WarehouseUnusable, with the reason, unless a run can lock and rename into the resolved path."""
        if self._unusable:
            raise WarehouseUnusable(self._unusable)
        shown = f"{self.given} (a link to {self.path})" if self.via_link else str(self.given)
        if self.path.exists() and not self.path.is_file():
            raise WarehouseUnusable(f"{shown} is not a file; point it at a DuckDB file")
        directory = self.path.parent
        if not directory.is_dir():
            if self.via_link:
                raise WarehouseUnusable(f"{shown} leads to a directory that does not exist ({directory})")
            return  # created by begin()
        if not os.access(directory, os.W_OK | os.X_OK):
            raise WarehouseUnusable(
                f"cannot publish {shown}: its directory {directory} is not writable (a run renames a new file into it)"
            )

    # --- paths -------------------------------------------------------------------------------

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def build_path(self, run_id: str) -> Path:
        safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in run_id)
        return self.path.with_name(f".{self.path.name}.{safe}{BUILD_SUFFIX}")

    def stage_path(self, run_id: str) -> Path:
        """The run's staging area: files a run writes before they are loaded into its build."""
        return self.build_path(run_id).with_suffix(STAGE_SUFFIX)

    def stages(self) -> list[Path]:
        """Staging areas of runs in the warehouse's directory."""
        if not self.path.parent.exists():
            return []
        prefix = f".{self.path.name}."
        return sorted(
            p for p in self.path.parent.iterdir() if p.name.startswith(prefix) and p.name.endswith(STAGE_SUFFIX)
        )

    def builds(self) -> list[Path]:
        """Build files (and their WALs) in the warehouse's directory."""
        if not self.path.parent.exists():
            return []
        prefix = f".{self.path.name}."
        return sorted(
            p
            for p in self.path.parent.iterdir()
            if p.name.startswith(prefix) and (p.name.endswith(BUILD_SUFFIX) or p.name.endswith(BUILD_SUFFIX + ".wal"))
        )

    def lock(self, run_id: str | None = None, *, wait_s: float = 0.0) -> RunLock:
        """The refresh lock, beside the resolved file (WarehouseUnusable where a run cannot publish)."""
        self.check_writable()
        return RunLock(self.lock_path, run_id=run_id, wait_s=wait_s)

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    # --- build -------------------------------------------------------------------------------

    def begin(self, run_id: str, started_at: dt.datetime | None = None) -> Path:
        """Start this run's build: a copy of the published snapshot (or an empty database).

        The caller holds the refresh lock, so every other build file is a crashed run's: removed.
        Idempotent within a run: an existing build of the same run is kept.
        """
        self.check_writable()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        build = self.build_path(run_id)
        for leftover in self.builds():
            if leftover.name not in (build.name, build.name + ".wal"):
                leftover.unlink(missing_ok=True)
        for stage in self.stages():
            if stage != self.stage_path(run_id):
                _remove_tree(stage)
        if build.exists():  # this run's own build (a resource set up twice in one run): go on with it
            return build
        if self.exists:
            shutil.copyfile(self.path, build)
            wal = self.path.with_name(self.path.name + ".wal")
            if wal.exists():  # committed but not yet checkpointed by whoever wrote it
                shutil.copyfile(wal, build.with_name(build.name + ".wal"))
        started = started_at or dt.datetime.now(dt.UTC)
        con = duckdb.connect(str(build))
        try:
            for layer in LAYERS:
                con.execute(f"create schema if not exists {ident(layer)}")
            build_relation(
                con,
                "raw",
                "run",
                {"run_id": run_id, "run_date": started.astimezone(dt.UTC).date(), "started_at": started},
            )
        finally:
            con.close()
        return build

    @contextmanager
    def connect(self, run_id: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection to this run's build (`begin` first)."""
        build = self.build_path(run_id)
        if not build.exists():
            raise RuntimeError(f"no build for run {run_id} at {build}: call begin() first")
        con = duckdb.connect(str(build))
        try:
            yield con
        finally:
            con.close()

    def discard(self, run_id: str) -> None:
        build = self.build_path(run_id)
        build.unlink(missing_ok=True)
        build.with_name(build.name + ".wal").unlink(missing_ok=True)
        _remove_tree(self.stage_path(run_id))

    # --- publish -----------------------------------------------------------------------------

    def publish(self, run_id: str, run_row: Mapping[str, object]) -> PublishResult:
        """Record history and the `runs` row in the build, then swap it in atomically.

        `run_row` holds the `marts.runs` columns other than the counts, which are taken here.
        """
        start = time.perf_counter()
        steps: dict[str, float] = {}

        def lap(name: str, since: float) -> float:
            now = time.perf_counter()
            steps[name] = round(now - since, 3)
            return now

        build = self.build_path(run_id)
        with self.connect(run_id) as con:
            mark = time.perf_counter()
            con.execute("begin transaction")
            build_relation(con, "marts", RUNS_TABLE)
            keep = self._retained_runs(con, run_id)
            for table in run_keyed_tables(con):
                _carry_forward(con, table, run_id)
                con.execute(
                    f"delete from {qualified('raw', table)} where not list_contains($keep, run_id)", {"keep": keep}
                )
            referred = " union all ".join(
                f"select {ident(CONTENT_KEY)} from {qualified('raw', m)}" for m in content_maps(con)
            )
            for table in content_keyed_tables(con):
                con.execute(
                    f"delete from {qualified('raw', table)} where {ident(CONTENT_KEY)} not in ({referred or 'select null'})"
                )
            mark = lap("raw_history", mark)
            counts: dict[str, int] = {}
            for table in mart_tables(con):
                counts[table] = _append_history(con, table, run_id, keep)
                mark = lap(f"history_{table}", mark)
            _insert_run(con, run_id, _complete_run_row(run_row, counts))
            mark = lap("runs_row", mark)
            con.execute("commit")
            con.execute("checkpoint")
            mark = lap("checkpoint", mark)
        wal = build.with_name(build.name + ".wal")
        if wal.exists():
            raise RuntimeError(f"the build {build} still has a write-ahead log after checkpoint; not publishing")
        _fsync(build)
        os.replace(build, self.path)
        _fsync(self.path.parent)
        _remove_tree(self.stage_path(run_id))  # loaded into the snapshot: no longer needed
        lap("fsync_and_replace", mark)
        return PublishResult(
            path=self.path,
            run_id=run_id,
            row_counts=counts,
            history_runs=len(keep),
            file_bytes=self.path.stat().st_size,
            seconds=time.perf_counter() - start,
            steps=steps,
        )

    def _retained_runs(self, con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
        """This run and the `history_runs - 1` runs published before it."""
        earlier = con.execute(
            "select run_id from marts.runs where run_id <> $run_id order by started_at desc, run_id desc limit $n",
            {"run_id": run_id, "n": self.history_runs - 1},
        ).fetchall()
        return sorted({run_id, *(str(r[0]) for r in earlier)})

    # --- read --------------------------------------------------------------------------------

    def _stat(self) -> os.stat_result:
        try:
            return os.stat(self.path)
        except FileNotFoundError:  # moved aside by a rebuild as we looked
            raise WarehouseMissing(f"no warehouse at {self.given} (a rebuild is under way?); try again") from None

    def connect_read_only(self, *, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
        """A read-only connection to the published snapshot (never blocks a refresh) that can
        reach nothing else: no files, no network, no extensions (`warehouse.sql.connect_reader`)."""
        if self._unusable:
            raise WarehouseUnusable(self._unusable)
        if not self.exists:
            raise WarehouseMissing(f"no warehouse at {self.given}; run `capplan nightly` to build it")
        for attempt in range(3):
            before = self._stat()
            try:
                con = connect_reader(self.path, memory_limit=memory_limit)
            except duckdb.Error as exc:
                raise WarehouseCorrupt(corrupt_message(self.given, exc)) from exc
            try:
                short = truncation(con, before.st_size)
            except duckdb.Error as exc:
                con.close()
                raise WarehouseCorrupt(corrupt_message(self.given, exc)) from exc
            try:
                after = self._stat()
            except WarehouseMissing:
                con.close()
                raise
            if (before.st_ino, before.st_dev) == (after.st_ino, after.st_dev):
                break
            if attempt < 2:  # a publish renamed a new file in while this one opened: look again
                con.close()
                continue
            short = None  # still changing: the size read may not be the opened file's, so no verdict
        if short:
            con.close()
            raise WarehouseCorrupt(f"the warehouse {self.given} {short}; {RECOVERY_HINT}")
        return con


HEADER_BYTES = 3 * 4096  # a DuckDB file's main header and its two database headers, before the first block
_CORRUPT_SIGNS = ("Could not read enough bytes", "Corrupt database file", "not a valid DuckDB database file")


def truncation(con: duckdb.DuckDBPyConnection, size: int) -> str | None:
    """'is truncated: ...' when the file `con` opened (`size` bytes) is shorter than its blocks (it
    often still opens, and fails at the first query that reads a missing block), else None."""
    # used_blocks, not total_blocks: a checkpoint cuts free blocks off the end of the file, and
    # total_blocks still counts them. Every used block lies in the file, so this never misfires.
    blocks = con.execute("select block_size, used_blocks from pragma_database_size()").fetchone()
    needed = HEADER_BYTES + int(blocks[0]) * int(blocks[1]) if blocks else 0
    return f"is truncated: {size:,} bytes, its used blocks need at least {needed:,}" if size < needed else None


def looks_corrupt(exc: BaseException | str) -> bool:
    """Whether a DuckDB error met while reading says the file is damaged (then RECOVERY_HINT applies)."""
    return any(sign in str(exc) for sign in _CORRUPT_SIGNS)


def corrupt_message(path: Path, exc: BaseException) -> str:
    """One line: the warehouse does not open, DuckDB's first line of why, and the recovery when
    that says the file is damaged (not for a lock held by a writer or a permission)."""
    first = " ".join(str(exc).strip().split("\n\n", 1)[0].split()) or type(exc).__name__
    hint = f"; {RECOVERY_HINT}" if looks_corrupt(exc) else "; check it: capplan doctor"
    return f"the warehouse {path} does not open: {first}{hint}"


def _table_names(con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, object] | None = None) -> list[str]:
    """The names a catalog query of one column answers, in its order."""
    return [str(r[0]) for r in con.execute(sql, params or {}).fetchall()]


# the columns of the base tables (not views) in `raw`, as `c`: what the raw-table queries below select from
_RAW_TABLE_COLUMNS = (
    "from duckdb_columns() c "
    "join duckdb_tables() t on t.database_name = c.database_name and t.schema_name = c.schema_name "
    "and t.table_name = c.table_name "
    "where c.schema_name = 'raw' and c.database_name = current_database() "
)


def mart_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Relations (tables or views) in `marts` stamped with a `run_id`, without history and `runs`."""
    return _table_names(
        con,
        "select distinct table_name from duckdb_columns() "
        "where schema_name = 'marts' and database_name = current_database() and column_name = 'run_id' "
        "and table_name <> $runs and not suffix(table_name, $suffix) "
        "order by table_name",
        {"runs": RUNS_TABLE, "suffix": HISTORY_SUFFIX},
    )


def _complete_run_row(run_row: Mapping[str, object], counts: Mapping[str, int]) -> dict[str, object]:
    """The caller's provenance plus what only publishing knows: end time, duration, row counts."""
    row = dict(run_row)
    finished = dt.datetime.now(dt.UTC)
    started = row.get("started_at")
    if not isinstance(started, dt.datetime):
        raise ValueError("run_row needs started_at (a timezone-aware datetime)")
    row.setdefault("run_date", started.astimezone(dt.UTC).date())
    row.setdefault("finished_at", finished)
    row.setdefault("duration_s", round((finished - started).total_seconds(), 3))
    row.setdefault("status", "published")
    row["row_counts"] = dict(counts)
    for table, count in counts.items():
        for name in (table, f"{table}_rows"):
            row.setdefault(name, count)
    return row


def _insert_run(con: duckdb.DuckDBPyConnection, run_id: str, row: Mapping[str, object]) -> None:
    import json

    known = [name for name, _type, _comment in columns(con, "marts", RUNS_TABLE)]
    values: dict[str, object] = {}
    for name in known:
        value = row.get(name)
        if isinstance(value, dict | list):
            value = json.dumps(value, sort_keys=True, default=str)
        values[name] = value
    values["run_id"] = run_id
    unknown = {name for name in set(row) - set(known) if not _is_count_alias(name, row)}
    if unknown:
        raise ValueError(f"marts.runs has no column(s) {', '.join(sorted(unknown))}")
    con.execute("delete from marts.runs where run_id = $run_id", {"run_id": run_id})
    names = ", ".join(ident(n) for n in known)
    placeholders = ", ".join(f"${n}" for n in known)
    con.execute(f"insert into marts.runs ({names}) values ({placeholders})", values)


def _is_count_alias(name: str, row: Mapping[str, object]) -> bool:
    """A row count filled in for a mart that has no column of its own in marts.runs (see row_counts)."""
    counts = row.get("row_counts")
    return isinstance(counts, dict) and (name in counts or name.removesuffix("_rows") in counts)


def run_keyed_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Tables in `raw` that keep several runs' rows (a `run_id` column): history kept in place."""
    return _table_names(
        con,
        f"select distinct c.table_name {_RAW_TABLE_COLUMNS}and c.column_name = 'run_id' and c.table_name <> 'run' order by 1",
    )


def _raw_tables_with_key(con: duckdb.DuckDBPyConnection, *, run_keyed: bool) -> list[str]:
    return _table_names(
        con,
        f"select c.table_name {_RAW_TABLE_COLUMNS}"
        "group by c.table_name having bool_or(c.column_name = $key) and bool_or(c.column_name = 'run_id') = $runs "
        "order by 1",
        {"key": CONTENT_KEY, "runs": run_keyed},
    )


def content_keyed_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Tables in `raw` whose rows are keyed by content (`part_id`), not by run: history in place,
    each row once, referred to by the runs of a map (`content_maps`)."""
    return _raw_tables_with_key(con, run_keyed=False)


def content_maps(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Run-keyed tables in `raw` with a `part_id`: which content-keyed rows each retained run
    publishes (`raw.grid_partitions`, `raw.limit_partitions`)."""
    return _raw_tables_with_key(con, run_keyed=True)


def _remove_tree(path: Path) -> None:
    """Delete a staging area; a symlink in its place is unlinked, never followed."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path)


def _carry_forward(con: duckdb.DuckDBPyConnection, table: str, run_id: str) -> None:
    """A run that did not write a run-keyed raw table publishes the previous run's rows again,
    under its own run id (only partial runs, e.g. one asset materialized from the UI)."""
    target = qualified("raw", table)
    if con.execute(f"select 1 from {target} where run_id = $run_id limit 1", {"run_id": run_id}).fetchone():
        return
    previous = con.execute(
        f"select r.run_id from marts.runs as r where exists (select 1 from {target} as t where t.run_id = r.run_id) "
        "order by r.started_at desc limit 1"
    ).fetchone()
    if previous is None:
        return
    run_date = con.execute("select run_date from raw.run").fetchone()
    con.execute(
        f"insert into {target} by name select * replace ($run_id::varchar as run_id, $run_date::date as run_date) "
        f"from {target} where run_id = $previous",
        {"run_id": run_id, "run_date": run_date[0] if run_date else utc_today(), "previous": previous[0]},
    )


def _append_history(con: duckdb.DuckDBPyConnection, table: str, run_id: str, keep: list[str]) -> int:
    """Copy this run's rows of `marts.<table>` into the table `marts.<table>_history` (created or
    widened as needed, documented like the mart) and drop the runs not in `keep`; returns the mart's
    rows. A mart whose `_history` is a view (over run-keyed raw tables) has its history in place:
    only its documentation is refreshed. Each mart is evaluated once."""
    history = table + HISTORY_SUFFIX
    source = qualified("marts", table)
    target = qualified("marts", history)
    documented = {column: comment for column, _t, comment in columns(con, "marts", table) if comment}
    kind = relation_kind(con, "marts", history)
    if kind == "view":
        for column, _dtype, _comment in columns(con, "marts", history):
            if column in documented:
                con.execute(f"comment on column {target}.{ident(column)} is {sql_string(documented[column])}")
        counted = con.execute(f"select count(*) from {source}").fetchone()
        return int(counted[0]) if counted else 0
    source_columns = columns(con, "marts", table)
    if kind is None:
        con.execute(f"create table {target} as select * from {source} with no data")
    else:
        present = {column for column, _t, _c in columns(con, "marts", history)}
        for column, dtype, _comment in source_columns:
            if column not in present:
                con.execute(f"alter table {target} add column {ident(column)} {dtype}")
    for column, _dtype, _comment in source_columns:
        if column in documented:
            con.execute(f"comment on column {target}.{ident(column)} is {sql_string(documented[column])}")
    note = f"Every retained run's rows of marts.{table} (run_id, run_date on each row)."
    con.execute(f"comment on table {target} is {sql_string(note)}")
    con.execute(
        f"delete from {target} where run_id = $run_id or not list_contains($keep, run_id)",
        {"run_id": run_id, "keep": keep},
    )
    inserted = con.execute(f"insert into {target} by name select * from {source}").fetchone()
    return int(inserted[0]) if inserted else 0


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()
