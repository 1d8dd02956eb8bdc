"""The catalog that ships with capplan: `catalog/models.yaml` and its config snapshots.

models.yaml: `{schema_version: 1, models: [{repo_id, revision, family, config, safetensors_index,
published_parameters, gated, source, notes}]}`; `config` and `safetensors_index` are paths relative
to the catalog directory. A bad entry is an `ItemError`, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from models_registry.sources.common import (
    ConfigSnapshot,
    ItemError,
    StageError,
    checkpoint_bytes_from_index,
    excerpt,
    one_line,
    read_bytes,
    short_repr,
)

CATALOG_DIR = Path(__file__).resolve().parent.parent / "catalog"
MODELS_YAML = "models.yaml"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available: 10x faster
SCHEMA_VERSION = 1
MAX_CATALOG_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CatalogModel:
    """One validated entry of models.yaml (paths resolved against the catalog directory)."""

    repo_id: str
    revision: str | None
    family: str | None
    config_path: Path
    index_path: Path | None
    published_parameters: int | None
    gated: bool
    source: str | None
    notes: str | None


def load_yaml(path: Path, *, list_key: str) -> tuple[list[Any], list[ItemError]]:
    """The entries under `list_key` of a catalog YAML file, or one catalog-level error."""
    try:
        raw = read_bytes(path, limit=MAX_CATALOG_BYTES)
    except StageError as exc:
        return [], [ItemError("catalog", path.name, "read", str(exc), str(path))]
    try:
        document = yaml.load(raw, Loader=_LOADER)
    except yaml.YAMLError as exc:
        reason = one_line(f"{path.name} is not valid YAML: {exc}")
        return [], [ItemError("catalog", path.name, "catalog", reason, str(path), excerpt(raw))]
    except RecursionError:
        reason = f"{path.name} is nested too deeply to be a catalog"
        return [], [ItemError("catalog", path.name, "catalog", reason, str(path), excerpt(raw))]
    if not isinstance(document, dict):
        reason = f"{path.name} must be a mapping with schema_version and {list_key}"
        return [], [ItemError("catalog", path.name, "catalog", reason, str(path), excerpt(raw))]
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        reason = f"{path.name}: unsupported schema_version {short_repr(version)} (expected {SCHEMA_VERSION})"
        return [], [ItemError("catalog", path.name, "catalog", reason, str(path))]
    entries = document.get(list_key)
    if entries is None:
        return [], []
    if not isinstance(entries, list):
        reason = f"{path.name}: {list_key} must be a list"
        return [], [ItemError("catalog", path.name, "catalog", reason, str(path))]
    return entries, []


def _optional_str(entry: dict[str, Any], key: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise ValueError(f"{key} must be a string, got {short_repr(value)}")
    return str(value)


def _entry(entry: object, position: int, catalog_dir: Path) -> CatalogModel:
    if not isinstance(entry, dict):
        raise ValueError(f"entry #{position} must be a mapping, got {type(entry).__name__}")
    repo_id = entry.get("repo_id")
    if not isinstance(repo_id, str) or not repo_id.strip():
        raise ValueError(f"entry #{position} has no repo_id")
    config = entry.get("config")
    if not isinstance(config, str) or not config:
        raise ValueError("config (a path relative to the catalog) is missing")
    index = entry.get("safetensors_index")
    if index is not None and not isinstance(index, str):
        raise ValueError(f"safetensors_index must be a path or null, got {short_repr(index)}")
    published = entry.get("published_parameters")
    if published is not None and (isinstance(published, bool) or not isinstance(published, int) or published <= 0):
        raise ValueError(f"published_parameters must be a positive integer or null, got {short_repr(published)}")
    gated = entry.get("gated", False)
    if not isinstance(gated, bool):
        raise ValueError(f"gated must be true or false, got {short_repr(gated)}")
    return CatalogModel(
        repo_id=repo_id.strip(),
        revision=_optional_str(entry, "revision"),
        family=_optional_str(entry, "family"),
        config_path=_inside(catalog_dir, config),
        index_path=_inside(catalog_dir, index) if index else None,
        published_parameters=published,
        gated=gated,
        source=_optional_str(entry, "source"),
        notes=_optional_str(entry, "notes"),
    )


def _inside(root: Path, relative: str) -> Path:
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ValueError(f"path {relative!r} leaves the catalog directory")
    return path


def read_catalog_entries(catalog_dir: Path | None = None) -> tuple[list[CatalogModel], list[ItemError]]:
    """The valid entries of models.yaml and an error for each bad one (cached while the file is unchanged)."""
    path = (catalog_dir or CATALOG_DIR) / MODELS_YAML
    try:
        stat = path.stat()
    except OSError:
        return [], []
    entries, errors = _read_entries(path, stat.st_mtime_ns, stat.st_size)
    return list(entries), list(errors)


@lru_cache(maxsize=16)
def _read_entries(path: Path, _mtime_ns: int, _size: int) -> tuple[tuple[CatalogModel, ...], tuple[ItemError, ...]]:
    root = path.parent
    raw_entries, errors = load_yaml(path, list_key="models")
    entries: list[CatalogModel] = []
    for position, raw in enumerate(raw_entries, start=1):
        key = raw.get("repo_id") if isinstance(raw, dict) else None
        item_key = key if isinstance(key, str) and key else f"{MODELS_YAML}#{position}"
        try:
            entries.append(_entry(raw, position, root))
        except (ValueError, OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop on resolve()
            errors.append(ItemError("model", item_key, "catalog", one_line(exc), str(path), excerpt(short_repr(raw))))
    return tuple(entries), tuple(errors)


def snapshot_of(entry: CatalogModel) -> ConfigSnapshot:
    """Read one catalog entry's files (StageError 'read' / 'index')."""
    config = read_bytes(entry.config_path)
    checkpoint = checkpoint_bytes_from_index(entry.index_path) if entry.index_path else None
    return ConfigSnapshot(
        repo_id=entry.repo_id,
        config_bytes=config,
        source="bundled",
        source_path=str(entry.config_path),
        revision=entry.revision,
        checkpoint_bytes=checkpoint,
        family=entry.family,
        published_parameters=entry.published_parameters,
        gated=entry.gated,
        source_url=entry.source,
        notes=entry.notes,
    )


def read_catalog(catalog_dir: Path | None = None) -> tuple[list[ConfigSnapshot], list[ItemError]]:
    """Every bundled model as a snapshot, plus an error for each entry that cannot be read."""
    entries, errors = read_catalog_entries(catalog_dir)
    snapshots: list[ConfigSnapshot] = []
    for entry in entries:
        try:
            snapshots.append(snapshot_of(entry))
        except StageError as exc:
            errors.append(ItemError("model", entry.repo_id, exc.stage, str(exc), str(entry.config_path)))
        except Exception as exc:  # whatever one entry provokes, the others are still read
            reason = one_line(f"{entry.repo_id}: cannot read its files: {type(exc).__name__}: {exc}")
            errors.append(ItemError("model", entry.repo_id, "read", reason, str(entry.config_path)))
    return snapshots, errors


def find_entry(repo_id: str, catalog_dir: Path | None = None) -> CatalogModel | None:
    """The catalog entry for `repo_id` (exact, then case-insensitive), or None."""
    entries, _ = read_catalog_entries(catalog_dir)
    for entry in entries:
        if entry.repo_id == repo_id:
            return entry
    folded = repo_id.casefold()
    for entry in entries:
        if entry.repo_id.casefold() == folded:
            return entry
    return None


def bundled_ids(catalog_dir: Path | None = None) -> list[str]:
    entries, _ = read_catalog_entries(catalog_dir)
    return [entry.repo_id for entry in entries]
