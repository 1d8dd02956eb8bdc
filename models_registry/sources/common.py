"""What every source hands to the ingest: raw config snapshots and item errors."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from capacity.hf_config import ConfigError

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
EXCERPT_CHARS = 400
REASON_CHARS = 300
MAX_CONFIG_BYTES = 8 * 1024 * 1024  # config.json files are a few KiB; anything this big is not one


def _storable(text: str) -> str:
    """PostgreSQL text cannot hold NUL characters (SQLite can): store them escaped on both."""
    return text.replace("\x00", "\\x00")


def one_line(text: object, limit: int = REASON_CHARS) -> str:
    """Collapse whitespace to single spaces and cut to `limit` characters."""
    line = _storable(re.sub(r"\s+", " ", str(text)).strip())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def excerpt(raw: bytes | str | None, limit: int = EXCERPT_CHARS) -> str | None:
    """The start of a raw input, as text (undecodable bytes replaced), for `ingest_errors`."""
    if raw is None:
        return None
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    return _storable(text[:limit])


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class ConfigSnapshot:
    """One config.json exactly as a source read it (bytes: the sha256 is over the file)."""

    repo_id: str
    config_bytes: bytes
    source: str  # bundled | local | hf-cache | hub
    source_path: str | None = None
    revision: str | None = None
    checkpoint_bytes: int | None = None
    family: str | None = None
    published_parameters: int | None = None
    gated: bool = False
    source_url: str | None = None
    notes: str | None = None

    @property
    def config_sha256(self) -> str:
        return sha256_hex(self.config_bytes)


@dataclass(frozen=True, slots=True)
class ItemError:
    """An input that was rejected: which item, at which stage, why (one line)."""

    item_kind: str  # model | gpu | catalog
    item_key: str
    stage: str  # read | catalog | index | json | config | validate | store
    reason: str
    source_path: str | None = None
    raw_excerpt: str | None = None


class StageError(ConfigError):
    """A ConfigError that knows which ingest stage raised it."""

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(one_line(reason))
        self.stage = stage


def read_bytes(path: Path, *, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """Read a small file; StageError('read') with a one-line reason otherwise."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise StageError("read", f"{path.name} is {size:,} bytes; a config is at most {limit:,}")
        return path.read_bytes()
    except FileNotFoundError:
        raise StageError("read", f"file not found: {path}") from None
    except IsADirectoryError:
        raise StageError("read", f"not a file: {path}") from None
    except OSError as exc:
        raise StageError("read", f"cannot read {path}: {exc.strerror or exc}") from None


def checkpoint_bytes_from_index(path: Path) -> int:
    """`metadata.total_size` of a `model.safetensors.index.json` (bytes of all shards' tensors)."""
    raw = read_bytes(path)
    try:
        index = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise StageError("index", f"{path.name} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise StageError(
            "index", f"{path.name} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    metadata = index.get("metadata") if isinstance(index, dict) else None
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if total is None:
        raise StageError("index", f"{path.name} has no metadata.total_size")
    if isinstance(total, float) and math.isfinite(total) and total.is_integer():
        total = int(total)
    if isinstance(total, bool) or not isinstance(total, int):
        raise StageError("index", f"{path.name}: metadata.total_size must be an integer, got {total!r}")
    if not 0 < total < 2**50:
        raise StageError("index", f"{path.name}: metadata.total_size {total} is not a plausible size in bytes")
    return total
