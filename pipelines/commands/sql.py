"""`capplan sql`: query the published warehouse, read-only, as a table, CSV or JSON.

The warehouse is opened read-only, so a query never blocks (or is blocked by) a nightly refresh:
the refresh builds a new file and swaps it in. Example queries live in `warehouse/queries/`.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import math
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

FORMATS = ("table", "csv", "json")


def fail(message: str) -> NoReturn:
    """A user error: one line on stderr, exit code 2."""
    typer.echo(f"capplan: error: {message}", err=True)
    raise typer.Exit(2)


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.date | dt.datetime | dt.time | dt.timedelta | uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".") if math.isfinite(value) else str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def write_result(names: list[str], rows: list[tuple[Any, ...]], fmt: str, max_rows: int) -> None:
    """Print a result set to stdout in `fmt`."""
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows(rows)
        return
    if fmt == "json":
        records = [{name: _json_value(v) for name, v in zip(names, row, strict=True)} for row in rows]
        sys.stdout.write(json.dumps(records, indent=2) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold")
    for name in names:
        table.add_column(name, overflow="fold")
    for row in rows[:max_rows]:
        table.add_row(*(_cell(v) for v in row))
    console = Console(soft_wrap=False)
    console.print(table)
    hidden = len(rows) - max_rows
    more = f", {hidden:,} not shown (--max-rows, or --format csv)" if hidden > 0 else ""
    console.print(f"{len(rows):,} row{'s' if len(rows) != 1 else ''}{more}", style="dim")


def sql(
    query: Annotated[str | None, typer.Argument(help="SQL to run against the warehouse (read-only).")] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Read the SQL from a file (e.g. warehouse/queries/*.sql).")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="Output: table, csv or json.")] = "table",
    warehouse: Annotated[
        Path | None,
        typer.Option("--warehouse", help="DuckDB file (default: CAPPLAN_WAREHOUSE, else var/warehouse.duckdb)."),
    ] = None,
    max_rows: Annotated[int, typer.Option("--max-rows", help="Rows shown by the table format.")] = 200,
) -> None:
    """Run SQL against the published warehouse, read-only (marts.capacity_grid, marts.context_limits...)."""
    import duckdb

    from warehouse.publish import Warehouse, WarehouseMissing

    if fmt not in FORMATS:
        fail(f"unknown --format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if max_rows < 1:
        fail(f"--max-rows must be >= 1, got {max_rows}")
    if (query is None) == (file is None):
        fail('give the SQL as an argument or with --file, e.g. capplan sql "select * from marts.runs"')
    if file is not None:
        try:
            query = file.read_text(encoding="utf-8")
        except OSError as exc:
            fail(f"cannot read {file}: {exc.strerror or exc}")
    assert query is not None
    if not query.strip():
        fail("empty query")
    try:
        con = Warehouse(warehouse).connect_read_only()
    except WarehouseMissing as exc:
        fail(str(exc))
    except duckdb.Error as exc:
        fail(f"cannot open the warehouse: {str(exc).splitlines()[0]}")
    try:
        result = con.execute(query)
        names = [d[0] for d in result.description] if result.description else []
        rows = result.fetchall() if names else []
    except duckdb.Error as exc:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    finally:
        con.close()
    if not names:
        return
    write_result(names, rows, fmt, max_rows)
