"""Concurrent runs and destructive migrations (issue 9, item 5), on real SQLite and PostgreSQL.

- A nightly's registry sync during another process's write waits for it, instead of failing
  "database is locked" (SQLite: every transaction BEGIN IMMEDIATE, busy timeout).
- A nightly's registry sync and a large `capplan registry ingest --dir` at the same time both
  finish with nothing rejected.
- Two first-time migrations at once on an empty PostgreSQL schema: both succeed, once each
  (advisory lock in migrations/env.py).
- `downgrade` below the first revision is refused, with the data intact, unless forced.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.util import CommandError
from sqlalchemy import inspect, select, text
from sqlalchemy.engine import make_url

from models_registry import db, orm
from models_registry.frames import sync_gpus, sync_models
from models_registry.ingest import store_gpu
from models_registry.sources.gpu_catalog import read_gpu_catalog
from tests.test_warehouse_fixtures import write_catalog

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CATALOG_CONFIGS = PROJECT_ROOT / "models_registry" / "catalog" / "configs"
ALEMBIC = Path(sys.executable).with_name("alembic")

TAKE_WRITE_LOCK = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
print("trying", flush=True)
con.execute("BEGIN IMMEDIATE")  # another writer: a concurrent ingest's item
print("locked", flush=True)
con.execute("COMMIT")
"""


def _sqlite_file(url: str) -> str:
    path = db.sqlite_path(url)
    assert path is not None
    return str(path)


def test_a_registry_transaction_that_reads_then_writes_survives_another_writer(sqlite_url: str) -> None:
    """The nightly's registry sync reads a SKU, then writes it. Another process starts writing in
    between. Before: the write failed at once with "database is locked" (SQLite does not wait for a
    lock upgrade inside a read transaction, whatever the busy timeout). Now the transaction took
    the write lock at BEGIN (IMMEDIATE), so the other writer waits for it instead."""
    records, _ = read_gpu_catalog()
    engine = db.make_engine(sqlite_url)
    other: subprocess.Popen[str] | None = None
    try:
        with db.make_sessionmaker(engine)() as session:
            store_gpu(session, records[0])
            session.commit()
            session.scalar(select(orm.GpuSku.slug))  # the read that opens the transaction
            other = subprocess.Popen(
                [sys.executable, "-c", TAKE_WRITE_LOCK, _sqlite_file(sqlite_url)], stdout=subprocess.PIPE, text=True
            )
            assert other.stdout is not None and other.stdout.readline().strip() == "trying"
            time.sleep(0.5)  # the other writer is at its BEGIN IMMEDIATE now
            assert store_gpu(session, records[1]) == "added"
            session.commit()
        assert other.stdout.readline().strip() == "locked"  # ... and got its turn afterwards
    finally:
        if other is not None:
            other.wait(timeout=60)
        engine.dispose()
    assert other.returncode == 0


def test_the_busy_timeout_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(db.BUSY_TIMEOUT_ENV, "2.5")
    assert db.busy_timeout_ms() == 2500
    engine = db.make_engine("sqlite://")
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 2500
    finally:
        engine.dispose()
    monkeypatch.setenv(db.BUSY_TIMEOUT_ENV, "soon")
    with pytest.raises(db.RegistryError, match=db.BUSY_TIMEOUT_ENV):
        db.busy_timeout_ms()


@pytest.mark.slow  # a large ingest raced by a whole nightly
def test_a_nightly_sync_during_a_large_registry_ingest(sqlite_url: str, tmp_path: Path) -> None:
    """A real `capplan registry ingest --dir` of 8 x the bundled configs (8 x 73 models) in another
    process while the nightly's registry syncs run here in a loop: nothing rejected on either side."""
    big = tmp_path / "big"
    for copy in range(8):
        shutil.copytree(CATALOG_CONFIGS, big / f"copy{copy}")
    catalog = write_catalog(tmp_path / "catalog")
    sync_models(sqlite_url, catalog)
    env = {**os.environ, db.URL_ENV: sqlite_url}
    ingest = subprocess.Popen(  # this tree's CLI: `capplan registry ingest --dir BIG`
        [sys.executable, "-c", "from pipelines.cli import app; app()", "registry", "ingest", "--dir", str(big)],
        env=env,
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    syncs = 0
    try:
        while ingest.poll() is None:
            for report in (sync_gpus(sqlite_url, catalog), sync_models(sqlite_url, catalog)):
                assert report.failed == 0, [e.reason for e in report.errors]
            syncs += 1
    finally:
        output = ingest.communicate(timeout=300)[0]
    assert ingest.returncode == 0, output
    assert "locked" not in output
    models = next(line.split() for line in output.splitlines() if line.startswith("models"))
    configs = sum(1 for _ in CATALOG_CONFIGS.rglob("config.json"))
    assert models[1] == str(8 * configs) and models[-1] == "0", output  # seen 8 x the configs, failed 0
    assert syncs >= 1


# --- PostgreSQL: the first migration on an empty database -----------------------------------------

MIGRATE_AT_SIGNAL = """
import os, sys, time
from pathlib import Path
import alembic.command, alembic.config  # imported before the signal: both processes then start migrating at once
from models_registry import db
go = Path(sys.argv[2])
go.with_name(f"{go.name}.ready-{os.getpid()}").touch()
while not go.exists():
    time.sleep(0.005)
db.upgrade_to_head(sys.argv[1])
print("migrated", flush=True)
"""


@pytest.fixture
def empty_pg_schemas(pg_admin_url: str) -> Iterator[list[str]]:
    """Three empty schemas, each as a URL whose search_path points at it (dropped after)."""
    admin = db.make_engine(pg_admin_url, isolation_level="AUTOCOMMIT")
    names = [f"capplan_lock_{uuid.uuid4().hex[:10]}" for _ in range(3)]
    with admin.connect() as connection:
        for name in names:
            connection.execute(text(f'CREATE SCHEMA "{name}"'))
    urls = [
        make_url(pg_admin_url)
        .update_query_dict({"options": f"-csearch_path={name}"})
        .render_as_string(hide_password=False)
        for name in names
    ]
    try:
        yield urls
    finally:
        with admin.connect() as connection:
            for name in names:
                connection.execute(text(f'DROP SCHEMA "{name}" CASCADE'))
        admin.dispose()


@pytest.mark.postgres
def test_two_first_migrations_at_once_on_an_empty_postgres(empty_pg_schemas: list[str], tmp_path: Path) -> None:
    """Two processes, released at the same instant, each migrate the same empty schema: both
    succeed and the schema is at head once (three rounds)."""
    for round_, url in enumerate(empty_pg_schemas):
        go = tmp_path / f"go-{round_}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", MIGRATE_AT_SIGNAL, url, str(go)],
                cwd=PROJECT_ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob(f"{go.name}.ready-*"))) < 2:  # both imported and polling
            assert all(p.poll() is None for p in procs), [p.communicate()[1] for p in procs if p.poll() is not None]
            assert time.monotonic() < deadline, "the migrating processes did not start"
            time.sleep(0.01)
        go.touch()
        results = [p.communicate(timeout=120) for p in procs]
        failures = [err.strip().splitlines()[-1] for p, (_, err) in zip(procs, results, strict=True) if p.returncode]
        assert failures == [], failures
        engine = db.make_engine(url)
        try:
            with engine.connect() as connection:
                versions = connection.execute(text("select version_num from alembic_version")).scalars().all()
                assert "models" in inspect(connection).get_table_names()
        finally:
            engine.dispose()
        assert versions == [_head()]


def _head() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(db.alembic_config()).get_current_head()
    assert head is not None
    return head


def _revisions() -> int:
    from alembic.script import ScriptDirectory

    return len(list(ScriptDirectory.from_config(db.alembic_config()).walk_revisions()))


# --- downgrade below the first revision ---------------------------------------------------------


def _model_count(url: str) -> int:
    engine = db.make_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("select count(*) from models")).scalar_one())
    finally:
        engine.dispose()


def test_downgrade_below_the_first_revision_is_refused_unless_forced(registry_url: str, tmp_path: Path) -> None:
    sync_models(registry_url, write_catalog(tmp_path / "catalog"))
    before = _model_count(registry_url)
    assert before > 0
    config = db.alembic_config(registry_url)
    revisions = _revisions()  # head is this many steps above base
    for destination in ("base", f"-{revisions}", f"-{revisions + 3}", f"{_head()}-{revisions}"):
        with pytest.raises(CommandError, match="refusing to downgrade below the first revision"):
            command.downgrade(config, destination)
        assert _model_count(registry_url) == before, destination  # nothing ran
    command.downgrade(config, f"-{revisions - 1}")  # to the first revision: allowed
    command.upgrade(config, "head")
    assert _model_count(registry_url) == before
    config.attributes["force"] = True
    command.downgrade(config, "base")
    engine = db.make_engine(registry_url)
    try:
        with engine.connect() as connection:
            assert "models" not in inspect(connection).get_table_names()
    finally:
        engine.dispose()


def test_the_alembic_cli_refuses_downgrade_base_and_says_how_to_force(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    db.upgrade_to_head(url)
    env = {key: value for key, value in os.environ.items() if key != "CAPPLAN_ALLOW_DOWNGRADE_BASE"}
    refused = subprocess.run(
        [str(ALEMBIC), "-x", f"url={url}", "downgrade", "base"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0
    assert "refusing to downgrade below the first revision" in refused.stderr + refused.stdout
    assert "-x force=1" in refused.stderr + refused.stdout
    assert db.registry_exists(url)
    forced = subprocess.run(
        [str(ALEMBIC), "-x", f"url={url}", "-x", "force=1", "downgrade", "base"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert forced.returncode == 0, forced.stderr
    assert not db.registry_exists(url)
