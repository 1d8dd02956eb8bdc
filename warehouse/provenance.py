"""Provenance of a nightly run for `marts.runs`: code, formulas, engine profiles, input hashes.

Everything here is computed from files and modules, never from the clock, so two runs on the same
inputs and code record the same hashes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import subprocess
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import polars as pl

import capacity
from capacity import engine_constants

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CAPACITY_DIR = Path(capacity.__file__).resolve().parent
# the modules whose rules size a deployment: the estimate, the pool, the layer kinds, the engine profiles
# and the grid (packages by every module in them)
FORMULA_FILES = (
    "estimate.py", "pool.py", "kv_bytes.py", "weights.py", "overhead.py", "dtypes.py", "parallel.py", "numeric.py",
    "spec.py", "engine_constants.py", "columns.py",
    *sorted(str(path.relative_to(CAPACITY_DIR)) for package in ("kv", "engines", "grid")
            for path in (CAPACITY_DIR / package).rglob("*.py")),
)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    try:
        return sha256_bytes(path.read_bytes())
    except OSError:
        return None


def sha256_tree(root: Path, pattern: str = "**/*") -> str | None:
    """sha256 over (relative path, file sha256) of every file under `root`, in path order."""
    if not root.is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(p for p in root.glob(pattern) if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update((sha256_file(path) or "").encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git_state(root: Path = PROJECT_ROOT) -> tuple[str | None, bool | None]:
    """(HEAD commit, dirty?) of the checkout the code runs from; (None, None) outside one."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return (sha or None), bool(status.strip())


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def engine_profiles() -> dict[str, Any]:
    """Every public constant of `capacity.engine_constants` (releases, defaults, coefficients)."""
    profiles: dict[str, Any] = {}
    for name in sorted(vars(engine_constants)):
        if not name.isupper():
            continue
        value = getattr(engine_constants, name)
        if isinstance(value, int | float | str | tuple | list | dict) or dataclasses.is_dataclass(value):
            profiles[name] = _plain(value)
    return profiles


def formula_version() -> str:
    """A version of the capacity formulas: an explicit FORMULA_VERSION if the engine declares one,
    else the first 16 hex of the sha256 over the formula modules' sources."""
    declared = getattr(engine_constants, "FORMULA_VERSION", None)
    digest = hashlib.sha256()
    for name in FORMULA_FILES:
        digest.update(name.encode() + b"\0" + (sha256_file(CAPACITY_DIR / name) or "missing").encode())
    hashed = digest.hexdigest()[:16]
    return f"{declared}+{hashed}" if declared else hashed


def frame_sha256(frame: pl.DataFrame, columns: Iterable[str]) -> str:
    """sha256 over the given columns of a frame, rows in sorted order (stable across runs)."""
    wanted = [c for c in columns if c in frame.columns]
    rows = sorted(json.dumps(r, sort_keys=True, default=str) for r in frame.select(wanted).iter_rows(named=True))
    return sha256_bytes("\n".join(rows).encode())


def catalog_hashes(catalog_dir: Path, user_catalog: Path | None = None) -> dict[str, str | None]:
    """sha256 of each catalog input, the user catalog (`CAPPLAN_USER_CATALOG`) included: a price change shows."""
    return {
        "catalog_models_yaml": sha256_file(catalog_dir / "models.yaml"),
        "catalog_gpus_yaml": sha256_file(catalog_dir / "gpus.yaml"),
        "catalog_configs": sha256_tree(catalog_dir / "configs"),
        "user_catalog_yaml": sha256_file(user_catalog) if user_catalog else None,
    }


def run_provenance(catalog_dir: Path, user_catalog: Path | None = None) -> dict[str, Any]:
    """The provenance columns of `marts.runs` that do not depend on the run's data."""
    sha, dirty = git_state()
    profiles = engine_profiles()
    profiles_json = json.dumps(profiles, sort_keys=True, default=str)
    return {
        "capplan_version": _version("capplan"),
        "git_sha": sha,
        "git_dirty": dirty,
        "formula_version": formula_version(),
        "engine_profiles_sha256": sha256_bytes(profiles_json.encode()),
        "engine_profiles": profiles,
        "python_version": platform.python_version(),
        "duckdb_version": _version("duckdb"),
        "polars_version": _version("polars"),
        "dagster_version": _version("dagster"),
        "input_hashes": catalog_hashes(catalog_dir, user_catalog),
    }
