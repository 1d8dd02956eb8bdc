"""What every warehouse asset shares: the relation it owns, and the metadata it reports.

An asset key `[layer, table]` is the DuckDB relation `layer.table` and the file
`warehouse/<layer>/<table>.sql` (STYLE.md §2). `sql_asset` builds the asset for a relation that
is pure SQL (staging views, marts); its upstream assets are the relations its SQL reads (`from` /
`join`), resolved to the file that creates them, as dbt's `ref()` does: no hand-written lists to
drift from the SQL. Python assets write frames with `warehouse.sql.load_frame` and report with
`relation_result`.
"""

import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import cache
from typing import Any

import dagster as dg
import duckdb

from pipelines.resources import WarehouseResource
from warehouse.capacity_grid import THIS_RUN_PARTS
from warehouse.publish import HISTORY_SUFFIX, RUNS_TABLE
from warehouse.sql import (
    LAYERS,
    WAREHOUSE_DIR,
    build_relation,
    columns,
    header_comment,
    qualified,
    read_sql,
    relation_kind,
    row_count,
)

PREVIEW_ROWS = 5
PREVIEW_COLUMNS = 10
# A LIMIT on a view over a join still builds the join's hash table: at ten times the catalog the
# previews of the grid's marts took 0.4-0.7 GiB each, the nightly's memory peak, for five rows.
# Views with more rows than this get a line saying how to read them instead.
PREVIEW_MAX_VIEW_ROWS = 1_000_000


def key(layer: str, table: str) -> dg.AssetKey:
    return dg.AssetKey([layer, table])


def describe(layer: str, table: str) -> str:
    """An asset's description: the header comment of its SQL file (grain and columns)."""
    return header_comment(read_sql(layer, table))


REGISTRY_DEPS = [key("raw", "models"), key("raw", "gpus")]


def raw_spec(
    table: str, deps: Sequence[dg.AssetKey], kinds: AbstractSet[str] = frozenset({"duckdb", "polars"})
) -> dg.AssetSpec:
    """A raw table a multi-asset writes: described by its SQL file, after the relations it reads."""
    return dg.AssetSpec(key("raw", table), description=describe("raw", table), deps=list(deps), kinds=set(kinds))


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 40 else text[:39] + "…"


def markdown_preview(con: duckdb.DuckDBPyConnection, layer: str, table: str, limit: int = PREVIEW_ROWS) -> str:
    """The first rows of `layer.table` as a small markdown table (at most PREVIEW_COLUMNS columns)."""
    names = [name for name, _type, _comment in columns(con, layer, table)][:PREVIEW_COLUMNS]
    if not names:
        return "(no columns)"
    selected = ", ".join(f'"{n}"' for n in names)
    rows = con.execute(f"select {selected} from {qualified(layer, table)} limit $n", {"n": limit}).fetchall()
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def run_row_count(con: duckdb.DuckDBPyConnection, layer: str, table: str, column_names: set[str]) -> int:
    """Rows of this run: raw tables, staging and history views keep every retained run's rows,
    keyed by run_id; counting them all would add the earlier runs' history to each run's count.
    A current mart holds the published run's rows only: counted as it is (a second run filter on
    a view that has one already makes DuckDB misjudge its joins: 5x the memory at 10x the catalog)."""
    current_mart = layer == "marts" and not table.endswith(HISTORY_SUFFIX) and table != RUNS_TABLE
    if "run_id" not in column_names or current_mart:
        return row_count(con, layer, table)
    row = con.execute(
        f"select count(*) from {qualified(layer, table)} where run_id = (select run_id from raw.run)"
    ).fetchone()
    return int(row[0]) if row else 0


def this_run_relation(con: duckdb.DuckDBPyConnection, layer: str, table: str) -> str:
    """The relation that holds this run's rows of `layer.table`: for a history view kept in place
    (`marts.<x>_history`), the current mart `marts.<x>` when it exists (it is that view at the
    published run, and is read without joining every retained run's rows); else the relation itself."""
    current = table.removesuffix(HISTORY_SUFFIX)
    in_place = layer == "marts" and current != table and relation_kind(con, layer, table) == "view"
    return current if in_place and relation_kind(con, layer, current) is not None else table


def relation_metadata(
    con: duckdb.DuckDBPyConnection, layer: str, table: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    cols = columns(con, layer, table)
    rows_of = this_run_relation(con, layer, table)
    names = {name for name, _, _ in cols}
    rows = run_row_count(con, layer, rows_of, names)
    if rows > PREVIEW_MAX_VIEW_ROWS and relation_kind(con, layer, rows_of) == "view":
        preview = (
            f"(no preview of a view of {rows:,} rows: `capplan sql \"select * from {layer}.{rows_of} limit "
            f'{PREVIEW_ROWS}\"`)'
        )
    else:
        preview = markdown_preview(con, layer, rows_of)
    metadata: dict[str, Any] = {
        "dagster/row_count": dg.MetadataValue.int(rows),
        "dagster/relation_identifier": f"{layer}.{table}",
        "dagster/column_schema": dg.TableSchema(
            columns=[dg.TableColumn(name, dtype, description=comment) for name, dtype, comment in cols]
        ),
        "preview": dg.MetadataValue.md(preview),
    }
    for name, value in (extra or {}).items():
        metadata[name] = value
    return metadata


def sum_over_partitions(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[int, ...]:
    """The column sums of a one-row query run once per grid partition of this run (`$p`: its part_id).
    A check over the whole grid would hash every row of a join or a distinct (0.4-0.6 GiB at ten times
    the catalog); partitions are disjoint (a model is in one, ids carry its prefix), so the sums are
    the whole grid's counts."""
    totals: list[int] = []
    for (part_id,) in con.execute(f"select part_id from {THIS_RUN_PARTS}").fetchall():
        row = con.execute(sql, {"p": int(part_id)}).fetchone() or ()
        values = [int(v or 0) for v in row]
        totals = [a + b for a, b in zip(totals, values, strict=True)] if totals else values
    return tuple(totals)


def relation_result(
    con: duckdb.DuckDBPyConnection, layer: str, table: str, extra: Mapping[str, Any] | None = None
) -> dg.MaterializeResult:
    return dg.MaterializeResult(asset_key=key(layer, table), metadata=relation_metadata(con, layer, table, extra))


def warning_result(problems: str | None, metadata: Mapping[str, Any]) -> dg.AssetCheckResult:
    """A warning check's result: it passes exactly when it has no problem to describe."""
    return dg.AssetCheckResult(
        passed=problems is None, severity=dg.AssetCheckSeverity.WARN, description=problems, metadata=metadata
    )


_RELATION = r"(raw|staging|marts)\.([a-z_][a-z0-9_]*)"
_READS = re.compile(rf"\b(?:from|join)\s+{_RELATION}", re.IGNORECASE)
_CREATES = re.compile(
    rf"\bcreate\s+(?:or\s+replace\s+)?(?:table|view|macro)\s+(?:if\s+not\s+exists\s+)?{_RELATION}", re.I
)
_NOISE = re.compile(r"--[^\n]*|'(?:[^']|'')*'")  # comments and string literals name no relation
NOT_ASSETS = frozenset({("raw", "run")})  # written by Warehouse.begin, before any asset runs


def _code(sql: str) -> str:
    return _NOISE.sub(" ", sql)


@cache
def sql_creators() -> dict[tuple[str, str], tuple[str, str]]:
    """(schema, name) of every relation or table macro the warehouse SQL creates -> its file (layer, table)."""
    creators: dict[tuple[str, str], tuple[str, str]] = {}
    for layer in LAYERS:
        for path in sorted((WAREHOUSE_DIR / layer).glob("*.sql")):
            for schema, name in _CREATES.findall(_code(read_sql(layer, path.stem))):
                creators[(schema.lower(), name.lower())] = (layer, path.stem)
    return creators


def relations_read(sql: str) -> set[tuple[str, str]]:
    """(schema, name) of every `from` / `join` target of a SQL text, comments and strings aside."""
    return {(schema.lower(), name.lower()) for schema, name in _READS.findall(_code(sql))}


def sql_deps(layer: str, table: str, sql: str | None = None) -> list[dg.AssetKey]:
    """The assets `warehouse/<layer>/<table>.sql` (or `sql`) reads: every `from` / `join` target,
    as the file that creates it (a table macro counts as its file's relation); raw.run is not an asset."""
    owners = set()
    for relation in sorted(
        relations_read(read_sql(layer, table) if sql is None else sql) - NOT_ASSETS - {(layer, table)}
    ):
        owner = sql_creators().get(relation)
        if owner is None:
            raise ValueError(f"{layer}.{table} reads {'.'.join(relation)}, which no warehouse SQL file creates")
        if owner != (layer, table):
            owners.add(owner)
    return [key(*owner) for owner in sorted(owners)]


def sql_asset(layer: str, table: str, *, group_name: str) -> dg.AssetsDefinition:
    """The asset of a pure-SQL relation: run `warehouse/<layer>/<table>.sql` in the run's build;
    its deps are what the SQL reads (`sql_deps`)."""

    @dg.asset(
        key=key(layer, table),
        deps=sql_deps(layer, table),
        group_name=group_name,
        description=describe(layer, table),
        kinds={"duckdb", "sql"},
    )
    def _relation(warehouse: WarehouseResource) -> dg.MaterializeResult:
        with warehouse.build() as con:
            build_relation(con, layer, table)
            return relation_result(con, layer, table)

    return _relation
