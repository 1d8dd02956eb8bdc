"""Shared fixtures: registry databases made by `upgrade head` (SQLite per test, PostgreSQL per
test schema), and a hub-layout Hugging Face cache in tmp_path. Keep this file small and general.

PostgreSQL: tests marked `postgres` use CAPPLAN_TEST_PG_URL. When it is unset they fail under CI
(CI=true) and are skipped, with the reason, on a developer machine. Tests of an optional extra
(`report`, `solver`, `oracle`) call `require_extra` the same way: skipped without it, failed under CI.

Slow tests (marker `slow`: whole-pipeline runs, engine-oracle subprocesses, large sweeps) are deselected
by pyproject's addopts (`-m "not slow"`) and run by `.venv/bin/pytest -m slow`; CI (.ci/run) runs both.
Every `engine_oracle` test is also `slow` (the hook below): each starts vLLM or SGLang in .venv-oracle.
"""

from __future__ import annotations

import compileall
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from models_registry import db

ROOT = Path(__file__).resolve().parent.parent  # the repository
FIXTURES = Path(__file__).parent / "fixtures"
PG_ENV = "CAPPLAN_TEST_PG_URL"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


# the folders of the project's code that the tests' own interpreters import (the CLI, `python -m tools...`,
# the grid's second process)
CODE_FOLDERS = (
    "capacity", "models_registry", "telemetry", "evaluation", "warehouse", "recommendations", "pipelines", "tools",
    "benchmarks",
)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Where no interpreter writes bytecode (PYTHONDONTWRITEBYTECODE, as CI's machines set it), every interpreter a
    test starts would compile the project's modules from source again (about half a second per CLI call): they
    are compiled once here, into the usual `__pycache__` folders, which those interpreters read."""
    if not sys.dont_write_bytecode:
        return  # this interpreter writes the caches as it imports; the others find them
    for folder in CODE_FOLDERS:
        if (ROOT / folder).is_dir():
            compileall.compile_dir(ROOT / folder, quiet=2, workers=1)


ORACLE_PYTHON = Path(
    os.environ.get("ENGINE_ORACLE_PYTHON", str(ROOT / ".venv-oracle" / "bin" / "python"))
)


# Run first in an SGLang oracle subprocess: torchvision (imported by SGLang's image-model configs) is the CUDA
# build on the package index; its C++ ops do not load against the CPU torch, and it must then not register meta
# kernels for them
SGLANG_CPU_PREAMBLE = r"""
import torch
# torchvision (imported by SGLang's image-model configs) is the CUDA build on the package index: its C++
# ops do not load against the CPU torch, and it must then not register meta kernels for them
_load_library = torch.ops.load_library
def _without_vision_ops(path):
    if "torchvision" in str(path):
        raise OSError("torchvision C++ ops are not needed for pool sizing")
    return _load_library(path)
torch.ops.load_library = _without_vision_ops
_register_fake = torch.library.register_fake
def _fake_unless_vision(op, *args, **kwargs):
    if isinstance(op, str) and op.startswith("torchvision::"):
        return lambda fn: fn
    return _register_fake(op, *args, **kwargs)
torch.library.register_fake = _fake_unless_vision
"""


def require_oracle_venv() -> None:
    """Skip (a developer machine) or fail (CI) when the engine-oracle venv (vLLM, SGLang) is missing."""
    if ORACLE_PYTHON.exists():
        return
    message = f"the engine-oracle venv is missing ({ORACLE_PYTHON}): bash tools/engine_oracle/setup_venv.sh"
    if _in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def run_in_oracle_venv(script: Path, payload: object, timeout_s: int) -> subprocess.CompletedProcess[str]:
    """Run `script` in the engine-oracle venv with `payload` as JSON on stdin: the one way tests reach the
    engines' own code; each caller judges the exit status and reads its reply."""
    return subprocess.run(
        [str(ORACLE_PYTHON), str(script)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def run_sglang_in_oracle_venv(code: str, payload: object, timeout_s: int) -> subprocess.CompletedProcess[str]:
    """Run SGLang `code` (python -c) in the engine-oracle venv as `run_in_oracle_venv` runs a script, with the
    venv's `sglang-extra` folder on PYTHONPATH: what SGLang imports beyond the oracle's requirements."""
    env = {**os.environ, "PYTHONPATH": str(ORACLE_PYTHON.parent.parent / "sglang-extra")}
    return subprocess.run(
        [str(ORACLE_PYTHON), "-c", code],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


def measurement_entries(path: Path) -> list[dict[str, object]]:
    """The `measurements` list of a schema-1 measurements file, as written (before any loader's checks)."""
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert document["schema_version"] == 1
    entries = document["measurements"]
    assert isinstance(entries, list)
    return entries


def compressed_tensors_int4(group_size: int, symmetric: bool, ignore: list[str]) -> dict[str, Any]:
    """A compressed-tensors `pack-quantized` INT4 block as llm-compressor writes one."""
    weights = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": group_size, "symmetric": symmetric}
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
        "ignore": ignore,
    }


def require_extra(extra: str, *modules: str) -> None:
    """Skip (a developer machine) or fail (CI) when the optional extra's modules are not installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    message = f"needs the extra '{extra}' ({', '.join(missing)} missing): .venv/bin/pip install -e '.[{extra}]'"
    if _in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)


# A developer's own fleet must not change what the tests expect: their catalog layers are dropped for
# the whole run (subprocesses included); tests that want one set it themselves.
_USER_LAYERS = ("CAPPLAN_USER_CATALOG", "CAPPLAN_CATALOG_DIR")


def pytest_configure(config: pytest.Config) -> None:
    for name in _USER_LAYERS:
        os.environ.pop(name, None)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("engine_oracle") is not None:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite registry migrated to head; each test gets a copy (migrating costs ~0.3 s)."""
    path = tmp_path_factory.mktemp("registry-template") / "registry.db"
    db.upgrade_to_head(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path, _sqlite_template: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh migrated SQLite registry, also exported as CAPPLAN_REGISTRY_URL."""
    path = tmp_path / "var" / "registry.db"
    path.parent.mkdir()
    shutil.copyfile(_sqlite_template, path)
    url = f"sqlite:///{path}"
    monkeypatch.setenv(db.URL_ENV, url)
    return url


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    url = os.environ.get(PG_ENV)
    if not url:
        message = f"{PG_ENV} is not set: the postgres tests need a PostgreSQL server (see .ci/run)"
        if _in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    engine = db.make_engine(url)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # unreachable server: always loud, the URL was given on purpose
        pytest.fail(f"{PG_ENV} is set but PostgreSQL is unreachable: {exc}".splitlines()[0], pytrace=False)
    finally:
        engine.dispose()
    return url


@pytest.fixture
def pg_url(pg_admin_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An empty schema of its own on the test server (search_path set in the URL); dropped after."""
    schema = f"capplan_test_{uuid.uuid4().hex[:12]}"
    with pg_scratch(pg_admin_url, f'CREATE SCHEMA "{schema}"', f'DROP SCHEMA "{schema}" CASCADE'):
        url = make_url(pg_admin_url).update_query_dict({"options": f"-csearch_path={schema}"})
        rendered = url.render_as_string(hide_password=False)
        monkeypatch.setenv(db.URL_ENV, rendered)
        yield rendered


@contextmanager
def pg_scratch(admin_url: str, create: str, drop: str) -> Iterator[None]:
    """Something of a test's own on the PostgreSQL test server (`create`), dropped afterwards (`drop`)."""
    admin = db.make_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(create))
    try:
        yield
    finally:
        with admin.connect() as connection:
            connection.execute(text(drop))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def registry_url(request: pytest.FixtureRequest) -> str:
    """A migrated registry on each backend (exported as CAPPLAN_REGISTRY_URL)."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    url = str(request.getfixturevalue("pg_url"))
    db.upgrade_to_head(url)
    return url


@pytest.fixture
def registry_engine(registry_url: str) -> Iterator[Engine]:
    engine = db.make_engine(registry_url)
    yield engine
    engine.dispose()


@pytest.fixture
def registry_session(registry_engine: Engine) -> Iterator[Session]:
    """A session on a migrated registry, once per backend (SQLite; PostgreSQL marked `postgres`)."""
    with db.make_sessionmaker(registry_engine)() as session:
        yield session


class HubCache:
    """A directory in the Hugging Face hub-cache layout (`models--org--name/refs/main`,
    `snapshots/<commit>/...`), as `hf_hub_download(..., cache_dir=path)` reads it offline."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, repo_id: str, files: dict[str, dict[str, object] | bytes], commit: str | None = None) -> str:
        """Write one snapshot of `repo_id` and point refs/main at it; returns its commit hash."""
        commit = commit or (uuid.uuid4().hex + uuid.uuid4().hex)[:40]
        repo = self.path / f"models--{repo_id.replace('/', '--')}"
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
        for name, content in files.items():
            data = content if isinstance(content, bytes) else json.dumps(content, indent=2).encode()
            (snapshot / name).write_bytes(data)
        return commit


@pytest.fixture
def hub_cache(tmp_path: Path) -> HubCache:
    """An empty hub-layout cache under tmp_path."""
    path = tmp_path / "hf-cache"
    path.mkdir()
    return HubCache(path)
