"""What the `capplan` commands share: the one-line user error and the published warehouse, read-only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    import duckdb

    from warehouse.publish import Warehouse


def fail(message: str, code: int = 2) -> NoReturn:
    """A user error: one line on stderr, exit code 2 (`code` 1: a run that failed after it started)."""
    typer.echo(f"capplan: error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(code)


WarehouseOption = Annotated[
    Path | None,
    typer.Option(
        "--warehouse", metavar="FILE", help="DuckDB file (default: CAPPLAN_WAREHOUSE, else var/warehouse.duckdb)."
    ),
]


def open_warehouse(path: Path | None, *, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """The published warehouse, read-only; a user error where it is missing or does not open."""
    from warehouse.publish import Warehouse

    return open_store(Warehouse(path), memory_limit=memory_limit)


def open_store(store: Warehouse, *, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """`store`'s published file, read-only; a one-line user error (with the recovery command where
    the file is corrupt) where it is missing, unusable or does not open."""
    from warehouse.publish import WarehouseCorrupt, WarehouseMissing, WarehouseUnusable

    try:
        return store.connect_read_only(memory_limit=memory_limit)
    except (WarehouseMissing, WarehouseUnusable, WarehouseCorrupt) as exc:
        fail(str(exc))
