"""What the `capplan` commands share: the one-line user error and the published warehouse, read-only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    import duckdb


def fail(message: str, code: int = 2) -> NoReturn:
    """A user error: one line on stderr, exit code 2 (`code` 1: a run that failed after it started)."""
    typer.echo(f"capplan: error: {message}", err=True)
    raise typer.Exit(code)


WarehouseOption = Annotated[
    Path | None,
    typer.Option(
        "--warehouse", metavar="FILE", help="DuckDB file (default: CAPPLAN_WAREHOUSE, else var/warehouse.duckdb)."
    ),
]


def open_warehouse(path: Path | None) -> duckdb.DuckDBPyConnection:
    """The published warehouse, read-only; a user error where it is missing or does not open."""
    import duckdb

    from warehouse.publish import Warehouse, WarehouseMissing

    try:
        return Warehouse(path).connect_read_only()
    except WarehouseMissing as exc:
        fail(str(exc))
    except duckdb.Error as exc:
        fail(f"cannot open the warehouse: {str(exc).splitlines()[0]}")
