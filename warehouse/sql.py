"""The warehouse's SQL files: one relation per file, `warehouse/<layer>/<table>.sql`.

A relation's name is the same everywhere (STYLE.md §2): the Dagster asset key `[layer, table]`,
the DuckDB relation `layer.table` and this file. Files are run statement by statement, each with
the named parameters (`$run_id`, `$run_date`...) it uses bound from a mapping — values are never
formatted into SQL. Identifiers (schema, table and column names, which DuckDB cannot bind) go
through `ident`, which quotes them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import duckdb

WAREHOUSE_DIR = Path(__file__).resolve().parent
LAYERS = ("raw", "staging", "marts")
QUERIES_DIR = WAREHOUSE_DIR / "queries"


class WarehouseSqlError(RuntimeError):
    """A warehouse SQL file is missing, or one of its statements failed (names the file)."""


def sql_path(layer: str, table: str) -> Path:
    """The file that defines `layer.table`."""
    if layer not in LAYERS:
        raise WarehouseSqlError(f"unknown warehouse layer {layer!r}; expected one of {', '.join(LAYERS)}")
    return WAREHOUSE_DIR / layer / f"{table}.sql"


def read_sql(layer: str, table: str) -> str:
    path = sql_path(layer, table)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WarehouseSqlError(f"no SQL file for {layer}.{table} ({path})") from None


def header_comment(sql: str) -> str:
    """The leading `--` comment block of a SQL file (its grain and columns), without the dashes."""
    lines = []
    for line in sql.splitlines():
        stripped = line.strip()
        if not stripped.startswith("--"):
            break
        lines.append(stripped[2:].strip())
    return "\n".join(lines).strip()


def execute_sql(
    con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, object] | None = None, *, name: str = "sql"
) -> None:
    """Run every statement of `sql`, binding the named parameters each statement uses."""
    values = dict(params or {})
    for statement in duckdb.extract_statements(sql):
        wanted = statement.named_parameters
        missing = wanted - values.keys()
        if missing:
            raise WarehouseSqlError(f"{name}: no value for parameter(s) {', '.join(sorted(missing))}")
        try:
            if wanted:
                con.execute(statement.query, {key: values[key] for key in wanted})
            else:
                con.execute(statement.query)
        except duckdb.Error as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise WarehouseSqlError(f"{name}: {first}") from exc


_CREATES = re.compile(
    r"\bcreate\s+(?:or\s+replace\s+)?(table|view)\s+(?:if\s+not\s+exists\s+)?([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)",
    re.IGNORECASE,
)


def relation_kind(con: duckdb.DuckDBPyConnection, layer: str, table: str) -> str | None:
    """'table', 'view' or None."""
    if con.execute(
        "select 1 from duckdb_tables() where schema_name = $schema and table_name = $table "
        "and database_name = current_database()",
        {"schema": layer, "table": table},
    ).fetchone():
        return "table"
    if con.execute(
        "select 1 from duckdb_views() where schema_name = $schema and view_name = $table "
        "and database_name = current_database()",
        {"schema": layer, "table": table},
    ).fetchone():
        return "view"
    return None


def build_relation(
    con: duckdb.DuckDBPyConnection, layer: str, table: str, params: Mapping[str, object] | None = None
) -> None:
    """Create (or replace) `layer.table` by running its SQL file.

    Safe to re-run on a snapshot written by another version: when the file now makes a view where
    a table was (or the other way round), the old object is dropped first.
    """
    sql = read_sql(layer, table)
    for kind, schema, name in _CREATES.findall(sql):
        existing = relation_kind(con, schema.lower(), name.lower())
        if existing is not None and existing != kind.lower():
            con.execute(f"drop {existing} {qualified(schema.lower(), name.lower())}")
    execute_sql(con, sql, params, name=f"warehouse/{layer}/{table}.sql")


def ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def qualified(layer: str, table: str) -> str:
    return f"{ident(layer)}.{ident(table)}"


def row_count(con: duckdb.DuckDBPyConnection, layer: str, table: str) -> int:
    row = con.execute(f"select count(*) from {qualified(layer, table)}").fetchone()
    return int(row[0]) if row else 0


def columns(con: duckdb.DuckDBPyConnection, layer: str, table: str) -> list[tuple[str, str, str | None]]:
    """(name, type, comment) of each column of `layer.table`, in order."""
    rows = con.execute(
        "select column_name, data_type, comment from duckdb_columns() "
        "where schema_name = $schema and table_name = $table and database_name = current_database() "
        "order by column_index",
        {"schema": layer, "table": table},
    ).fetchall()
    return [(str(name), str(dtype), comment) for name, dtype, comment in rows]


def example_queries() -> dict[str, str]:
    """`warehouse/queries/*.sql` by file stem, in name order."""
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(QUERIES_DIR.glob("*.sql"))}


INCOMING = "incoming"


def load_frame(
    con: duckdb.DuckDBPyConnection,
    layer: str,
    table: str,
    frame: object,
    params: Mapping[str, object] | None = None,
) -> int:
    """Write a Polars frame into `layer.table` through its SQL file, which reads the relation
    `incoming` (and may bind `params`). Returns the rows the frame had.

    A run-keyed table (its file appends `$run_id` rows to a table that keeps earlier runs) gains
    any column the frame brings that it does not have yet, so that code changes never drop history.
    """
    con.register(INCOMING, frame)
    try:
        if relation_kind(con, layer, table) == "table" and "$run_id" in read_sql(layer, table):
            present = {name for name, _type, _comment in columns(con, layer, table)}
            if "run_id" not in present:  # written by a version that kept one run: start its history
                con.execute(f"drop table {qualified(layer, table)}")
            else:
                for name, dtype, *_ in con.execute(f"describe select * from {INCOMING}").fetchall():
                    if name not in present:
                        con.execute(f"alter table {qualified(layer, table)} add column {ident(str(name))} {dtype}")
        build_relation(con, layer, table, params)
        counted = con.execute(f"select count(*) from {INCOMING}").fetchone()
    finally:
        con.unregister(INCOMING)
    return int(counted[0]) if counted else 0


def is_run_keyed(con: duckdb.DuckDBPyConnection, layer: str, table: str) -> bool:
    """A table that keeps several runs' rows, keyed by its `run_id` column."""
    return relation_kind(con, layer, table) == "table" and any(
        name == "run_id" for name, _t, _c in columns(con, layer, table)
    )
