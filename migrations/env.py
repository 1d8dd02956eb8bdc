"""Alembic environment for the capplan registry.

URL, first match wins: `config.attributes["url"]` (set by `models_registry.db.upgrade_to_head`),
`alembic -x url=...`, `CAPPLAN_REGISTRY_URL`, else `sqlite:///var/registry.db`.
SQLite runs in batch mode (ALTER TABLE is limited there) with foreign keys off while migrating.

Two guards:
- **One migration at a time.** PostgreSQL: the migration transaction first takes a transaction-level
  advisory lock (`pg_advisory_xact_lock`, keyed by the schema), so two first-time ingests on an
  empty database do not both create the tables: the second waits, then finds the schema at head.
  SQLite: every transaction begins IMMEDIATE (`models_registry.db`), which does the same.
- **No downgrade below the first revision unless forced.** `downgrade base` (or `-N` reaching below
  the first revision) drops every registry table and its rows; it is refused before anything runs
  unless forced: `alembic -x force=1 downgrade base`, `config.attributes["force"] = True`, or
  `CAPPLAN_ALLOW_DOWNGRADE_BASE=1`.
"""

from __future__ import annotations

import os
import re
from logging.config import fileConfig

from alembic import context
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, text

from models_registry.db import make_engine, registry_url
from models_registry.orm import Base

config = context.config
target_metadata = Base.metadata
FORCE_ENV = "CAPPLAN_ALLOW_DOWNGRADE_BASE"
# Advisory lock key: one per schema (tests give each test its own schema on one server).
ADVISORY_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('capplan registry migrations ' || current_schema()))"

if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    return str(config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("url") or "") or (
        registry_url()
    )


def _is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def _forced() -> bool:
    flag = config.attributes.get("force") or context.get_x_argument(as_dictionary=True).get("force") or ""
    return str(flag).strip().lower() in {"1", "true", "yes"} or os.environ.get(FORCE_ENV, "").strip() == "1"


def _depth(script: ScriptDirectory, revision: str) -> int:
    """How many revisions `revision` is above base (the first revision is 1)."""
    return len(list(script.iterate_revisions(revision, "base")))


def below_first_revision(destination: str | tuple[str, ...] | None, current: tuple[str, ...]) -> bool:
    """True when migrating to `destination` from `current` would leave no revision applied."""
    if destination is None:  # 'base'
        return bool(current)
    if isinstance(destination, tuple):
        return False
    relative = re.fullmatch(r"(.*?)-(\d+)", destination)
    if relative is None:
        return False
    script = ScriptDirectory.from_config(config)
    starts = [relative.group(1)] if relative.group(1) else list(current)
    return any(int(relative.group(2)) >= _depth(script, start) for start in starts if start)


def refuse_downgrade_to_base(connection: Connection) -> None:
    """CommandError, before anything runs, for a downgrade that would drop the registry."""
    if _forced():
        return
    try:
        destination = context.get_revision_argument()
    except KeyError:  # a command without a destination (check, current, history)
        return
    current = MigrationContext.configure(connection).get_current_heads()
    if below_first_revision(destination, current):
        raise CommandError(
            "refusing to downgrade below the first revision: that drops every registry table and its rows. "
            f"To do it anyway: alembic -x force=1 downgrade base (or {FORCE_ENV}=1)"
        )


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
            if connection.dialect.name == "postgresql":
                connection.execute(text(ADVISORY_LOCK_SQL))  # held until this transaction ends
            refuse_downgrade_to_base(connection)
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
            )
            with context.begin_transaction():
                context.run_migrations()
            if connection.in_transaction():
                connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
