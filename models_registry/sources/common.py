"""What every source hands to the ingest: raw config snapshots and item errors."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import reprlib
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from capacity.hf_config import ConfigError
from models_registry.walk import FileRefused, Refusal, read_open_file

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
EXCERPT_CHARS = 400
REASON_CHARS = 300
MAX_CONFIG_BYTES = 8 * 1024 * 1024  # config.json files are a few KiB; anything this big is not one
MAX_INDEX_BYTES = 64 * 1024 * 1024  # a safetensors index lists every tensor: a few MiB for the largest models


def _storable(text: str) -> str:
    """Text any registry backend stores: NUL characters (PostgreSQL refuses them) and lone
    surrogates (from a JSON `\\ud800` or an undecodable file name; no driver can encode them)
    are escaped."""
    text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def storable(text: str | None) -> str | None:
    """`_storable` for optional fields (item keys, paths) of an ingest error."""
    return None if text is None else _storable(text)


def one_line(text: object, limit: int = REASON_CHARS) -> str:
    """Collapse whitespace to single spaces and cut to `limit` characters."""
    line = _storable(re.sub(r"\s+", " ", str(text)).strip())
    return line if len(line) <= limit else line[: limit - 1] + "…"


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 6, 6, 6
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 80, 80, 40


def short_repr(value: object) -> str:
    """A bounded repr for reasons and excerpts: a YAML alias bomb (`&a [*a, *a, ...]`) is a small
    document whose full repr has billions of items; this one stops at a few levels and items."""
    try:
        return _REPR.repr(value)
    except (RecursionError, ValueError):  # ValueError: an int too long to convert
        return f"<{type(value).__name__}>"


def excerpt(raw: bytes | str | None, limit: int = EXCERPT_CHARS) -> str | None:
    """The start of a raw input, as text (undecodable bytes replaced), for `ingest_errors`."""
    if raw is None:
        return None
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    return _storable(text[:limit])


def json_value_error(exc: ValueError) -> str:
    """A ValueError from `json.loads` as a reason (an integer literal longer than Python converts
    says so, instead of advising `sys.set_int_max_str_digits`)."""
    if "integer string conversion" in str(exc):
        return f"an integer has more than {sys.get_int_max_str_digits():,} digits"
    return one_line(exc, 120)


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


def read_bytes(path: Path, *, limit: int = MAX_CONFIG_BYTES, root: Path | None = None) -> bytes:
    """Read a small regular file; StageError('read') with a one-line reason otherwise.

    Hostile folders hold links to `/dev/zero`, FIFOs and huge files: the kind is checked before
    opening (a FIFO is never opened for a blocking read), the file is opened O_NONBLOCK, and its
    size is checked again on the open descriptor (fstat) and bounded while reading, so a file that
    changes in between cannot make the read unbounded. With `root`, a path whose real location
    (symlinks resolved) is outside `root` is refused.
    """
    try:
        if root is not None and not path.resolve().is_relative_to(root.resolve()):
            raise StageError("read", f"{path.name} leads out of {root} (a symlink to {path.resolve()})")
        kind = _file_kind(path.stat().st_mode)
        if kind != "regular file":
            raise StageError("read", f"not a file: {path} is a {kind}, not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            data, _ = read_open_file(fd, limit)
        except FileRefused as refused:
            raise StageError("read", _refused_line(path, refused, limit)) from None
        finally:
            os.close(fd)
        return data
    except StageError:
        raise
    except FileNotFoundError:
        raise StageError("read", f"file not found: {path}") from None
    except IsADirectoryError:
        raise StageError("read", f"not a file: {path}") from None
    except (OSError, RuntimeError, ValueError) as exc:  # RuntimeError: a symlink loop on resolve()
        raise StageError("read", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _refused_line(path: Path, refused: FileRefused, limit: int) -> str:
    """`read_bytes`'s reason for a file `read_open_file` refused."""
    match refused.refusal:
        case Refusal.NOT_REGULAR:
            return f"{path.name} is a {_file_kind(refused.info.st_mode)}, not a regular file"
        case Refusal.TOO_LARGE:
            return f"{path.name} is {refused.info.st_size:,} bytes; a config is at most {limit:,}"
        case Refusal.GREW:
            return f"{path.name} grew past {limit:,} bytes while being read"


def _file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def checkpoint_bytes_from_index(path: Path, *, root: Path | None = None) -> int:
    """`metadata.total_size` of a `model.safetensors.index.json` (bytes of all shards' tensors)."""
    raw = read_bytes(path, limit=MAX_INDEX_BYTES, root=root)
    try:
        index = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise StageError("index", f"{path.name} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise StageError(
            "index", f"{path.name} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise StageError("index", f"{path.name} is nested too deeply to be a safetensors index") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise StageError("index", f"{path.name} is not valid JSON: {json_value_error(exc)}") from None
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
