"""What the nightly run reads from the registry, as Polars frames for the warehouse's `raw` layer.

`sync_models` / `sync_gpus` bring the registry up to date with a catalog (Alembic migrations
first, then the registry's own idempotent ingest); `current_models_frame` / `gpu_skus_frame` read
what the registry then holds; `ingest_errors_frame` turns the rejected items into rows. No Dagster
here: the assets in `pipelines/assets/` call these.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import sqlalchemy as sa

from models_registry import db, orm
from models_registry.ingest import IngestReport, ingest_catalog
from models_registry.sources.bundled import CATALOG_DIR
from models_registry.sources.common import ItemError

_migrated: set[str] = set()


def migrate(url: str) -> None:
    """Alembic `upgrade head` on the registry, once per process and URL."""
    if url in _migrated:
        return
    db.upgrade_to_head(url)
    _migrated.add(url)


def catalog_root(catalog_dir: str | Path | None) -> Path:
    return Path(catalog_dir) if catalog_dir else CATALOG_DIR


def sync_models(url: str, catalog_dir: str | Path | None = None) -> IngestReport:
    """Migrate the registry, then ingest the catalog's models (a second run changes nothing)."""
    migrate(url)
    with db.session_scope(url) as session:
        return ingest_catalog(session, catalog_root(catalog_dir), models=True, gpus=False)


def sync_gpus(url: str, catalog_dir: str | Path | None = None, user_catalog: Path | None = None) -> IngestReport:
    """Migrate the registry, then ingest the catalog's GPU SKUs (`gpus.yaml`, the user catalog over it)."""
    migrate(url)
    with db.session_scope(url) as session:
        return ingest_catalog(session, catalog_root(catalog_dir), models=False, gpus=True, user_catalog=user_catalog)


def _polars_type(column: sa.ColumnElement[Any]) -> pl.DataType:
    kind = column.type
    if isinstance(kind, sa.Boolean):
        return pl.Boolean()
    if isinstance(kind, sa.Integer):  # BigInteger is an Integer
        return pl.Int64()
    if isinstance(kind, sa.Float | sa.Double | sa.Numeric):
        return pl.Float64()
    if isinstance(kind, sa.DateTime):
        return pl.Datetime("us", "UTC")
    if isinstance(kind, sa.Date):
        return pl.Date()
    return pl.String()


def table_frame(table: sa.FromClause, rows: Iterable[Any], *, exclude: Sequence[str] = ()) -> pl.DataFrame:
    """Rows of a registry table as a frame typed from the ORM's columns (JSON columns as text)."""
    wanted = [c for c in table.columns if c.name not in exclude]
    data: dict[str, list[Any]] = {c.name: [] for c in wanted}
    for row in rows:
        mapping = row._mapping
        for column in wanted:
            value = mapping[column.name]
            if isinstance(column.type, sa.JSON) and value is not None:
                value = json.dumps(value, sort_keys=True)
            elif isinstance(column.type, sa.DateTime) and value is not None and value.tzinfo is None:
                value = value.replace(tzinfo=dt.UTC)  # SQLite drops the zone; the registry writes UTC
            data[column.name].append(value)
    return pl.DataFrame(data, schema={c.name: _polars_type(c) for c in wanted})


def current_models_frame(url: str) -> pl.DataFrame:
    """The current revision of every model in the registry, `config_json` included, by repo id."""
    table = orm.Model.__table__
    with db.session_scope(url) as session:
        rows = session.execute(sa.select(table).where(table.c.is_current.is_(True)).order_by(table.c.repo_id)).all()
    return table_frame(table, rows, exclude=("id", "is_current"))


def gpu_skus_frame(url: str) -> pl.DataFrame:
    """Every GPU SKU in the registry, by catalog id (`slug`), with its aliases as a JSON list."""
    skus = orm.GpuSku.__table__
    aliases = orm.GpuAlias.__table__
    with db.session_scope(url) as session:
        rows = session.execute(sa.select(skus).order_by(skus.c.slug)).all()
        alias_rows = session.execute(
            sa.select(aliases.c.gpu_sku_id, aliases.c.alias).order_by(aliases.c.gpu_sku_id, aliases.c.alias)
        ).all()
    by_sku: dict[int, list[str]] = {}
    for sku_id, alias in alias_rows:
        by_sku.setdefault(int(sku_id), []).append(str(alias))
    frame = table_frame(skus, rows, exclude=("id",))
    ids = [int(row._mapping["id"]) for row in rows]
    return frame.with_columns(pl.Series("aliases", [json.dumps(by_sku.get(i, [])) for i in ids], dtype=pl.String()))


ERROR_SCHEMA: dict[str, pl.DataType] = {
    "ingest_run_id": pl.Int64(),
    "item_kind": pl.String(),
    "item_key": pl.String(),
    "stage": pl.String(),
    "reason": pl.String(),
    "source_path": pl.String(),
    "raw_excerpt": pl.String(),
}


def ingest_errors_frame(errors: Iterable[ItemError], ingest_run_id: int | None = None) -> pl.DataFrame:
    """Rejected items as rows (one per error, in the order they were met)."""
    rows = [
        {
            "ingest_run_id": ingest_run_id,
            "item_kind": e.item_kind,
            "item_key": e.item_key,
            "stage": e.stage,
            "reason": e.reason,
            "source_path": e.source_path,
            "raw_excerpt": e.raw_excerpt,
        }
        for e in errors
    ]
    return pl.DataFrame(rows, schema=ERROR_SCHEMA)
