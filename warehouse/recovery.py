"""A corrupt warehouse: found with a one-line cause, moved aside, and its readable history carried over.

`check_warehouse(store)` opens the published file the way readers do (read-only, locked down) and
checks what every command expects of it: a DuckDB file, the `raw`/`staging`/`marts` schemas, as
many bytes as its used blocks need (a truncated file often still opens) and a readable
`marts.runs`. It returns None when the file is fine, else one line saying what is wrong.

`capplan nightly --rebuild` (under the warehouse lock) then calls `move_aside`, which renames the
file to `<name>.corrupt-<UTC timestamp>` beside it (or `.before-rebuild-<timestamp>` when it was
fine), and `salvage_history`, which publishes a seed warehouse holding what the old file still
lets it read of the history: `marts.runs` (every published run, never trimmed), the copied mart
histories (`marts.<table>_history` tables) and the raw tables that keep the capacity grid's
history in place (run-keyed and content-keyed, copied together or not at all: a partition map
without the rows it refers to would make the next run reuse rows it does not have). The run that
follows builds everything else from the registry and the telemetry store, as every run does, and
appends to that history.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import duckdb

from warehouse.publish import RUNS_TABLE, Warehouse, _fsync, content_keyed_tables, run_keyed_tables, truncation
from warehouse.sql import LAYERS, build_relation, connect_reader, ident, qualified, sql_string

DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB database file
SALVAGE_ALIAS = "old"


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.split("\n\n", 1)[0].split()) or type(exc).__name__


def check_warehouse(store: Warehouse, *, deep: bool = False) -> str | None:
    """None when the published file opens as a warehouse; else one line: what is wrong with it.
    `deep` also reads every column of every table (DuckDB verifies each block's checksum)."""
    path = store.path
    try:
        with path.open("rb") as handle:
            header = handle.read(16)
    except OSError as exc:
        return f"cannot read {store.given}: {exc.strerror or exc}"
    if header[8:12] != DUCKDB_MAGIC:
        size = path.stat().st_size
        return f"{store.given} is not a DuckDB database file ({size:,} bytes, no DuckDB header)"
    try:
        con = connect_reader(path)
    except duckdb.Error as exc:
        return f"{store.given} does not open: {one_line(exc)}"
    try:
        schemas = {
            str(r[0])
            for r in con.execute(
                "select schema_name from duckdb_schemas() where database_name = current_database()"
            ).fetchall()
        }
        missing = [layer for layer in LAYERS if layer not in schemas]
        if missing:
            return f"{store.given} is a DuckDB file but not a capplan warehouse (no schema {', '.join(missing)})"
        short = truncation(con, path.stat().st_size)  # under the lock, or a doctor's look: no publish races
        if short:
            return f"{store.given} {short}"
        con.execute(f"select bit_xor(hash(columns(*))) from {qualified('marts', RUNS_TABLE)}").fetchall()
        if deep:
            for schema, table in con.execute(
                "select schema_name, table_name from duckdb_tables() where database_name = current_database() "
                "order by 1, 2"
            ).fetchall():
                try:
                    con.execute(f"select bit_xor(hash(columns(*))) from {qualified(schema, table)}").fetchall()
                except duckdb.Error as exc:
                    return f"{store.given}: {schema}.{table} cannot be read: {one_line(exc)}"
    except duckdb.Error as exc:
        return f"{store.given} opens but cannot be read: {one_line(exc)}"
    finally:
        con.close()
    return None


def move_aside(store: Warehouse, label: str, now: dt.datetime | None = None) -> Path:
    """Rename the published file (and a WAL beside it) to `<name>.<label>-<timestamp>`; returns the new path."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    aside = store.path.with_name(f"{store.path.name}.{label}-{stamp}")
    count = 1
    while aside.exists() or aside.is_symlink():  # two rebuilds in one second: never overwrite a kept file
        count += 1
        aside = store.path.with_name(f"{store.path.name}.{label}-{stamp}-{count}")
    os.replace(store.path, aside)
    wal = store.path.with_name(store.path.name + ".wal")
    if wal.exists():
        os.replace(wal, aside.with_name(aside.name + ".wal"))
    _fsync(store.path.parent)
    return aside


def salvage_history(old: Path, store: Warehouse) -> list[str]:
    """Publish a seed warehouse at `store.path` with the history `old` still lets us read.

    Returns one line per outcome (what was carried over, or why not). Nothing is published when
    nothing could be read: the next run then starts from an empty warehouse."""
    seed = store.path.with_name(f".{store.path.name}.salvage.build")
    seed.unlink(missing_ok=True)
    con = duckdb.connect(str(seed))
    try:
        try:
            con.execute(f"attach {sql_string(str(old))} as {SALVAGE_ALIAS} (read_only)")
        except duckdb.Error as exc:
            lines = [f"history not carried over: {old.name} does not open ({one_line(exc)})"]
        else:
            lines = _copy_history(con)
            con.execute(f"detach {SALVAGE_ALIAS}")
            con.execute("checkpoint")
    finally:
        con.close()
    if not any(line.startswith("carried over") for line in lines):
        seed.unlink(missing_ok=True)
        seed.with_name(seed.name + ".wal").unlink(missing_ok=True)
        return lines
    _fsync(seed)
    os.replace(seed, store.path)
    _fsync(store.path.parent)
    return lines


def _copy_history(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Copy marts.runs, the marts history tables and the grid's raw history from `old` into the
    seed; one line per group."""
    for layer in LAYERS:
        con.execute(f"create schema if not exists {ident(layer)}")
    try:
        build_relation(con, "marts", RUNS_TABLE)
        source = f"{ident(SALVAGE_ALIAS)}.{qualified('marts', RUNS_TABLE)}"
        inserted = con.execute(
            f"insert into {qualified('marts', RUNS_TABLE)} by name select * from {source}"
        ).fetchone()
        runs = int(inserted[0]) if inserted else 0
    except duckdb.Error as exc:
        return [f"history not carried over: marts.runs cannot be read ({one_line(exc)})"]
    lines = [f"carried over marts.runs ({runs:,} runs)"]
    copied, lost = [], []
    for table in _old_tables(con, "marts"):
        if not table.endswith("_history"):
            continue
        try:
            _copy(con, "marts", table)
            copied.append(table)
        except duckdb.Error as exc:
            con.execute(f"drop table if exists {qualified('marts', table)}")
            lost.append(f"marts.{table} ({one_line(exc)})")
    if copied:
        lines.append(f"carried over {len(copied)} mart histories ({', '.join(copied)})")
    lines.extend(f"history lost: {item}" for item in lost)
    lines.append(_copy_raw_history(con))
    return lines


def _copy_raw_history(con: duckdb.DuckDBPyConnection) -> str:
    """The run-keyed and content-keyed raw tables of `old`, all of them or none."""
    seed = _current(con)
    con.execute(f"use {SALVAGE_ALIAS}")
    try:
        tables = sorted(set(run_keyed_tables(con)) | set(content_keyed_tables(con)))
    finally:
        con.execute(f"use {ident(seed)}")
    if not tables:
        return "no raw history in the old file"
    con.execute("begin transaction")
    try:
        rows = sum(_copy(con, "raw", table) for table in tables)
    except duckdb.Error as exc:
        con.execute("rollback")
        return f"raw history lost (the grid is recomputed in full): {one_line(exc)}"
    con.execute("commit")
    return f"carried over raw history: {len(tables)} tables, {rows:,} rows"


def _current(con: duckdb.DuckDBPyConnection) -> str:
    row = con.execute("select current_database()").fetchone()
    return str(row[0]) if row else ""


def _old_tables(con: duckdb.DuckDBPyConnection, schema: str) -> list[str]:
    rows = con.execute(
        "select table_name from duckdb_tables() where database_name = $old and schema_name = $schema order by 1",
        {"old": SALVAGE_ALIAS, "schema": schema},
    ).fetchall()
    return [str(r[0]) for r in rows]


def _copy(con: duckdb.DuckDBPyConnection, schema: str, table: str) -> int:
    """`old.schema.table` into the seed's `schema.table` (replacing it); returns its rows."""
    target = qualified(schema, table)
    con.execute(
        f"create or replace table {target} as select * from {ident(SALVAGE_ALIAS)}.{ident(schema)}.{ident(table)}"
    )
    counted = con.execute(f"select count(*) from {target}").fetchone()
    return int(counted[0]) if counted else 0
