"""Alembic is the only way the registry schema changes: one head, dated files, real downgrades,
a round trip with data present, and no drift between the ORM and the migrated schema; on SQLite
and (marked `postgres`) on PostgreSQL."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import func, inspect, select

from models_registry import db, orm
from models_registry.ingest import ingest_catalog, ingest_dir

FIXTURES = Path(__file__).parent / "fixtures"
TABLES = {"models", "model_layers", "gpu_skus", "gpu_aliases", "ingest_runs", "ingest_errors"}


def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(db.alembic_config())


def test_exactly_one_head() -> None:
    assert len(_script().get_heads()) == 1


def test_migration_files_are_dated_and_have_real_downgrades() -> None:
    versions = db.MIGRATIONS_DIR / "versions"
    files = sorted(versions.glob("*.py"))
    assert files
    for path in files:
        assert re.match(r"^\d{8}_[0-9a-z]+_[0-9a-z_]+\.py$", path.name), path.name
        body = path.read_text().split("def downgrade() -> None:", 1)[1]
        assert "op." in body, f"{path.name}: downgrade does nothing"


def _tables(url: str) -> set[str]:
    engine = db.make_engine(url)
    try:
        with engine.connect() as connection:
            return set(inspect(connection).get_table_names())
    finally:
        engine.dispose()


def _drift(url: str) -> list[object]:
    engine = db.make_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, orm.Base.metadata))
    finally:
        engine.dispose()


def _ingest_sample(url: str) -> None:
    """Rows in every table: models and layers, GPUs and aliases, runs and errors."""
    engine = db.make_engine(url)
    try:
        with db.make_sessionmaker(engine)() as session:
            ingest_dir(session, FIXTURES / "broken_configs")
            ingest_catalog(session, FIXTURES / "broken_configs")  # its gpus.yaml: 2 good SKUs, many bad
    finally:
        engine.dispose()


def _count_models(url: str) -> int:
    engine = db.make_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.scalar(select(func.count()).select_from(orm.Model)) or 0)
    finally:
        engine.dispose()


def test_round_trip_with_data_and_no_drift(registry_url: str) -> None:
    # registry_url is already at head (upgrade_to_head); nothing differs from the ORM.
    assert _tables(registry_url) >= TABLES
    assert _drift(registry_url) == []
    command.check(db.alembic_config(registry_url))

    _ingest_sample(registry_url)
    assert _count_models(registry_url) > 0

    config = db.alembic_config(registry_url)
    config.attributes["force"] = True  # below the first revision is refused unless forced (test_locks.py)
    command.downgrade(config, "base")
    assert _tables(registry_url) & TABLES == set()

    db.upgrade_to_head(registry_url)
    assert _drift(registry_url) == []
    _ingest_sample(registry_url)
    assert _count_models(registry_url) > 0


def test_every_revision_steps_down_and_up_with_data(registry_url: str) -> None:
    """Each downgrade, then each upgrade, one step at a time, with rows present (SQLite batch
    mode recreates tables: data, check constraints and the partial unique index must survive)."""
    _ingest_sample(registry_url)
    before = _count_models(registry_url)
    config = db.alembic_config(registry_url)
    steps = len(list(_script().walk_revisions("base", "heads")))
    for _ in range(steps - 1):
        command.downgrade(config, "-1")
        assert _count_models(registry_url) == before
    for _ in range(steps - 1):
        command.upgrade(config, "+1")
    assert _count_models(registry_url) == before
    assert _drift(registry_url) == []
    engine = db.make_engine(registry_url)
    try:
        with engine.connect() as connection:
            indexes = {ix["name"]: ix for ix in inspect(connection).get_indexes("models")}
            checks = {ck["name"] for ck in inspect(connection).get_check_constraints("models")}
    finally:
        engine.dispose()
    assert indexes["uq_models_repo_id_current"]["unique"]
    assert {"ck_models_source", "ck_models_positive_sizes"} <= checks
    config.attributes["force"] = True
    command.downgrade(config, "base")
    assert _tables(registry_url) & TABLES == set()


def test_upgrade_to_head_creates_var_dir_and_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nested' / 'var' / 'registry.db'}"
    db.upgrade_to_head(url)
    db.upgrade_to_head(url)
    assert (tmp_path / "nested" / "var" / "registry.db").is_file()
    assert db.registry_exists(url)


def test_registry_exists_never_creates_anything(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'var' / 'registry.db'}"
    assert not db.registry_exists(url)
    assert not (tmp_path / "var").exists()


def test_bad_url_is_a_one_line_registry_error() -> None:
    with pytest.raises(db.RegistryError) as excinfo:
        db.upgrade_to_head("nosuchdriver://x/y")
    assert "\n" not in str(excinfo.value)


def test_env_takes_the_url_from_x_argument_then_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from alembic.config import Config

    def bare_config() -> Config:
        config = Config(str(db.ALEMBIC_INI))
        config.attributes["configure_logger"] = False
        return config

    from_x = f"sqlite:///{tmp_path / 'from-x.db'}"
    from_env = f"sqlite:///{tmp_path / 'from-env.db'}"
    monkeypatch.setenv(db.URL_ENV, from_env)
    config = bare_config()
    config.cmd_opts = argparse.Namespace(x=[f"url={from_x}"])  # `alembic -x url=...`
    command.upgrade(config, "head")
    assert db.registry_exists(from_x) and not db.registry_exists(from_env)
    command.upgrade(bare_config(), "head")
    assert db.registry_exists(from_env)
