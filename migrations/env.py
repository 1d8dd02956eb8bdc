"""Alembic environment for the capplan registry.

URL, first match wins: `config.attributes["url"]` (set by `models_registry.db.upgrade_to_head`),
`alembic -x url=...`, `CAPPLAN_REGISTRY_URL`, else `sqlite:///var/registry.db`.
SQLite runs in batch mode (ALTER TABLE is limited there) with foreign keys off while migrating.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from models_registry.db import make_engine, registry_url
from models_registry.orm import Base

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    return str(config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("url") or "") or (
        registry_url()
    )


def _is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def run_migrations_offline() -> None:
    """Emit SQL to stdout (`alembic upgrade head --sql`)."""
    url = _url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=_is_sqlite(url),
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = _url()
    engine = make_engine(url, foreign_keys=False)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
