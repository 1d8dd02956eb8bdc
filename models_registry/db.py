"""Engine and sessions for the registry database, and the one way to create its schema.

The URL comes from `CAPPLAN_REGISTRY_URL` (default `sqlite:///var/registry.db`, relative to the
working directory; `var/` is created on demand). SQLite connections switch foreign keys on,
begin every transaction IMMEDIATE and wait up to `CAPPLAN_REGISTRY_BUSY_TIMEOUT_S` (300) for
another writer, so a nightly and a large `registry ingest --dir` at the same time take turns
instead of failing "database is locked".
The schema is created and upgraded only by Alembic: `upgrade_to_head(url)`.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from models_registry.redact import redact, redact_url

URL_ENV = "CAPPLAN_REGISTRY_URL"
DEFAULT_URL = "sqlite:///var/registry.db"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
ALEMBIC_INI = PROJECT_ROOT / "alembic.ini"
MIGRATIONS_DIR = PROJECT_ROOT / "migrations"
BUSY_TIMEOUT_ENV = "CAPPLAN_REGISTRY_BUSY_TIMEOUT_S"
DEFAULT_BUSY_TIMEOUT_S = 300.0


class RegistryError(RuntimeError):
    """The registry database cannot be used (bad URL, unreachable server); one line for the user."""


def registry_url(url: str | None = None) -> str:
    """The URL to use: the argument, else `CAPPLAN_REGISTRY_URL`, else the default SQLite file."""
    return url or os.environ.get(URL_ENV) or DEFAULT_URL


# scheme://userinfo@rest, the userinfo up to the LAST `@`: a password may hold `@ / # ?` unencoded
_USERINFO_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)(.*)@([^@]*)$", re.S)
_RAW_PASSWORD_CHARS = frozenset("@/#?")


def _parse(url: str) -> URL:
    """The URL as SQLAlchemy takes it. Its parser ends the password at the first `@` (or `/`, `#`,
    `?`) and expects the rest percent-encoded; a password pasted as it is would connect as someone
    else's host and show its tail in errors. So the userinfo runs to the last `@`, as in the
    Prometheus URL: a password holding one of those characters is taken as written, any other one
    is percent-decoded as SQLAlchemy does (`p%40ss` stays `p@ss`)."""
    try:
        match = _USERINFO_URL.match(url)
        if match is None or url.startswith("sqlite"):  # a SQLite path may hold `@`; it has no userinfo
            return make_url(url)
        scheme, userinfo, rest = match.groups()
        user, has_password, password = userinfo.partition(":")
        parsed = make_url(scheme + rest)
        raw = any(char in _RAW_PASSWORD_CHARS for char in password)
        return parsed.set(
            username=unquote(user), password=(password if raw else unquote(password)) if has_password else None
        )
    except (ArgumentError, ValueError):
        raise RegistryError(f"invalid registry URL in {URL_ENV}: {safe_url(url)}") from None


def sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL (None for other backends and in-memory SQLite)."""
    parsed = _parse(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def safe_url(url: str) -> str:
    """The URL with its userinfo masked (`models_registry.redact`, the one rule), for messages and logs.
    A SQLite URL has no userinfo (its path may hold an `@`) and is shown as it is."""
    return url if url.startswith("sqlite") else redact_url(url)


def make_engine(url: str | None = None, *, foreign_keys: bool = True, **kwargs: Any) -> Engine:
    """An engine for `url`. SQLite: creates the file's directory and turns foreign keys on.

    `foreign_keys=False` is for migrations only: SQLite batch operations recreate tables, and with
    foreign keys on, dropping a parent table would cascade-delete its children.
    """
    resolved = registry_url(url)
    path = sqlite_path(resolved)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        engine = create_engine(_parse(resolved), **kwargs)
    except (ArgumentError, ImportError) as exc:
        raise RegistryError(f"cannot use registry URL {safe_url(resolved)}: {redact(str(exc))}") from None
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine, foreign_keys=foreign_keys)
    return engine


def busy_timeout_ms() -> int:
    """How long a SQLite connection waits for another writer (`CAPPLAN_REGISTRY_BUSY_TIMEOUT_S`, 300 s)."""
    try:
        seconds = float(os.environ.get(BUSY_TIMEOUT_ENV) or DEFAULT_BUSY_TIMEOUT_S)
    except ValueError:
        raise RegistryError(f"{BUSY_TIMEOUT_ENV} must be a number of seconds") from None
    return max(int(seconds * 1000), 0)


def _configure_sqlite(engine: Engine, *, foreign_keys: bool) -> None:
    """Foreign keys on; let SQLAlchemy, not the sqlite3 module, emit BEGIN, so that SAVEPOINTs
    (one per ingested item) work as documented for pysqlite; and make concurrent writers wait
    for each other instead of failing with "database is locked".

    Every transaction begins IMMEDIATE: it takes the write lock at BEGIN, where SQLite's busy
    timeout applies. A deferred transaction that reads and then writes while another process
    writes (a nightly during a `registry ingest --dir`) gets SQLITE_BUSY at once, busy timeout or
    not, because waiting could deadlock. Writers are short (one ingested item each), so a nightly
    and an ingest interleave item by item; the timeout only bounds a stuck writer."""
    pragma = "ON" if foreign_keys else "OFF"
    timeout_ms = busy_timeout_ms()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={timeout_ms:d}")
        cursor.execute(f"PRAGMA foreign_keys={pragma}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A session on a fresh engine; commits on success, rolls back on error, disposes the engine."""
    engine = make_engine(url)
    try:
        with make_sessionmaker(engine)() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise
    finally:
        engine.dispose()


def alembic_config(url: str | None = None) -> Any:
    """An Alembic `Config` for this project's migrations, pointed at `url`."""
    from alembic.config import Config

    # stdout named now: Config's default is the sys.stdout of when alembic.config was first
    # imported, which may be a stream captured (and since closed) by a CLI runner.
    config = Config(str(ALEMBIC_INI), stdout=sys.stdout) if ALEMBIC_INI.exists() else Config(stdout=sys.stdout)
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not through the ini parser (which would interpolate '%' in passwords).
    config.attributes["url"] = registry_url(url)
    config.attributes["configure_logger"] = False
    return config


def upgrade_to_head(url: str | None = None) -> None:
    """Create or upgrade the registry schema to the latest migration (idempotent)."""
    from alembic import command

    resolved = registry_url(url)
    path = sqlite_path(resolved)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        command.upgrade(alembic_config(resolved), "head")
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise RegistryError(f"cannot migrate the registry at {safe_url(resolved)}: {redact(reason)}") from None


def registry_exists(url: str | None = None) -> bool:
    """True when a migrated registry database is reachable at `url`. Never creates anything."""
    resolved = registry_url(url)
    path = sqlite_path(resolved)
    if path is not None and not path.exists():
        return False
    try:
        engine = make_engine(resolved)
    except RegistryError:
        return False
    try:
        with engine.connect() as connection:
            return inspect(connection).has_table("models")
    except SQLAlchemyError:
        return False
    finally:
        engine.dispose()
