"""The grid's context rows as a view: `GridTables` keep each deployment's inputs, DuckDB computes the
context rows when they are read, with the rules the collected grid runs (`contexts._at_contexts` over
`staged.SqlRows`).

Stored, a 10M-row grid's context rows cost more than everything else of the build and the publish
together (their Polars arithmetic and the insert of eight columns of ten million values); a query
reads a fraction of them (one model, one context) and DuckDB computes the columns it reads, in the
projection, after the filters. The values are the collected grid's, doubles included: every operator
renders what Polars computes (`capacity.sql_expr`), and `tests/test_grid_view.py` compares the two
row by row.
"""

from __future__ import annotations

from collections.abc import Mapping

from capacity.grid.columns import (
    _PERF_PARALLEL,
    GPU_COLUMNS,
    GRID_COLUMNS,
    LAYOUT_COLUMNS,
    VIEW_DEPLOYMENT_COLUMNS,
    VIEW_DEPLOYMENT_ONLY_COLUMNS,
    VIEW_GPU_COLUMNS,
    VIEW_LAYOUT_COLUMNS,
    VIEW_SETTINGS_COLUMNS,
    VIEW_SHAPE_COLUMNS,
    derived_deployment_columns,
)
from capacity.grid.contexts import _at_contexts
from capacity.grid.staged import SqlRows
from capacity.sql_expr import SqlKind

Kinds = Mapping[str, SqlKind]


def _duckdb_kind(type_name: str) -> SqlKind:
    name = type_name.upper()
    if name in ("DOUBLE", "FLOAT", "REAL"):
        return SqlKind.FLOAT
    return SqlKind.BOOL if name == "BOOLEAN" else SqlKind.INT


def duckdb_kinds(columns: Mapping[str, str]) -> dict[str, SqlKind]:
    """Column kinds from DuckDB type names (`information_schema.columns.data_type`)."""
    return {name: _duckdb_kind(type_name) for name, type_name in columns.items()}


VIEW_TABLES = ("deployments", "layouts", "gpus", "pool_shapes", "settings")


def context_view_sql(kinds: Mapping[str, Kinds], *, speed: bool = True, names: Mapping[str, str] | None = None) -> str:
    """A SELECT (DuckDB) of GRID_COLUMNS over the tables of a `GridTables(context_view=True)` (VIEW_TABLES,
    stored under `names`, default `grid_<table>`), whose columns and kinds are given per table: one row
    per deployment and grid context, as `build_capacity_grid` gives them."""
    tables = {table: f"grid_{table}" for table in VIEW_TABLES} | dict(names or {})
    shapes = kinds["pool_shapes"]
    windows = sum(1 for c in shapes if c.startswith("pool_window_") and c.endswith("_groups"))
    sources = {
        "d": [*VIEW_DEPLOYMENT_ONLY_COLUMNS, *VIEW_DEPLOYMENT_COLUMNS],
        "l": [*LAYOUT_COLUMNS, *(c for c in VIEW_LAYOUT_COLUMNS if c != "grid_contexts")],
        "g": [*GPU_COLUMNS, *VIEW_GPU_COLUMNS],
        "s": [*VIEW_SHAPE_COLUMNS, *(c for c in shapes if c.startswith("pool_window_"))],
        "e": list(VIEW_SETTINGS_COLUMNS),
    }
    table_of = {"d": "deployments", "l": "layouts", "g": "gpus", "s": "pool_shapes", "e": "settings"}
    select = ["d.deployment_id", *(f'{alias}."{c}"' for alias, columns in sources.items() for c in columns)]
    select += [f'l."{c.removeprefix("perf_")}" AS "{c}"' for c in _PERF_PARALLEL]
    select.append('unnest(l.grid_contexts) AS "context"')
    base = (
        "SELECT " + ",\n  ".join(select) + f"\nFROM {tables['deployments']} AS d\n"
        f"JOIN {tables['layouts']} AS l USING (layout_id)\nJOIN {tables['gpus']} AS g USING (gpu_id)\n"
        f"LEFT JOIN {tables['pool_shapes']} AS s USING (shape_id)\nLEFT JOIN {tables['settings']} AS e USING (settings_id)"
    )
    column_kinds: dict[str, SqlKind] = {"deployment_id": SqlKind.INT, "context": SqlKind.INT}
    for alias, columns in sources.items():
        column_kinds |= {c: kinds[table_of[alias]][c] for c in columns}
    column_kinds |= {c: kinds["layouts"][c.removeprefix("perf_")] for c in _PERF_PARALLEL}
    stored = SqlRows(base, column_kinds)
    rows = _at_contexts(stored.with_columns(derived_deployment_columns(stored.col)), windows, scaled=True, speed=speed)
    assert isinstance(rows, SqlRows)
    columns = [
        '"max_concurrency_e4" / 10000 AS "max_concurrency"' if c == "max_concurrency" else f'"{c}"'
        for c in GRID_COLUMNS
    ]
    return "SELECT " + ", ".join(columns) + f"\nFROM (\n{rows.sql}\n)"
