"""One bounded, iterative walk of a folder tree, and one bounded read of a file it found, shared by
`registry ingest --dir` (`sources.local`, `sources.common.read_bytes`) and the telemetry drop folder
(`telemetry.files`).

- Iterative (an explicit stack): a tree 100,000 levels deep is no RecursionError.
- Never follows a symbolic link to a directory (the policy `Path.rglob` had in Python 3.11, kept):
  a link is listed as an entry, and whoever reads it decides whether its target is inside the root.
- Bounded: folders deeper than `max_depth` below the root are not entered, the walk stops after
  `max_entries` entries or `max_seconds`; what the limits left out is one line in `Walk.limited`,
  and everything found before is still returned (the good configs beside a hostile subtree are read).
- A folder that cannot be listed is one `(path, reason)` in `Walk.unreadable`, not a silent gap.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

MAX_DEPTH = 64  # model repos and drop folders nest 2 to 5 levels; 64 leaves room for any layout
MAX_ENTRIES = 200_000  # files and folders seen in one walk
MAX_SECONDS = 60.0


class Refusal(Enum):
    """Why `read_open_file` did not return a file's bytes."""

    NOT_REGULAR = "not a regular file"  # a FIFO, device, socket or directory swapped in after the path check
    TOO_LARGE = "above the limit"  # by its size on the descriptor
    GREW = "grew past the limit"  # while being read


class FileRefused(Exception):
    """`read_open_file` refused the file: `refusal` says why, `info` is the descriptor's fstat."""

    def __init__(self, refusal: Refusal, info: os.stat_result) -> None:
        super().__init__(refusal.value)
        self.refusal = refusal
        self.info = info


def read_open_file(fd: int, limit_bytes: int) -> tuple[bytes, os.stat_result]:
    """The bytes (at most `limit_bytes`) and fstat of the regular file open on `fd`; FileRefused otherwise.

    Checked on the open descriptor and bounded while reading, so a file replaced or grown after its
    path was checked cannot make the read block or grow without end (the caller opens it O_NONBLOCK)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise FileRefused(Refusal.NOT_REGULAR, info)
    if info.st_size > limit_bytes:
        raise FileRefused(Refusal.TOO_LARGE, info)
    chunks: list[bytes] = []
    size_bytes = 0
    while size_bytes <= limit_bytes:
        chunk = os.read(fd, min(1 << 20, limit_bytes + 1 - size_bytes))
        if not chunk:
            break
        chunks.append(chunk)
        size_bytes += len(chunk)
    if size_bytes > limit_bytes:
        raise FileRefused(Refusal.GREW, info)
    return b"".join(chunks), info


@dataclass
class Walk:
    """What one walk found: the non-directory entries (files, links, FIFOs...) sorted by their
    path's parts, the folders it could not list, and the one line saying what the limits left out."""

    files: list[Path] = field(default_factory=list)
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    limited: str | None = None
    limited_at: str | None = None  # the first folder left out, relative to the root ("." if none)


@dataclass
class _Limits:
    max_depth: int
    max_entries: int
    deadline: float
    too_deep: int = 0
    first_too_deep: str | None = None
    stopped: str | None = None


def walk_tree(
    root: Path,
    *,
    skip_hidden_dirs: bool = False,
    name: str | None = None,
    max_depth: int = MAX_DEPTH,
    max_entries: int = MAX_ENTRIES,
    max_seconds: float = MAX_SECONDS,
) -> Walk:
    """Every non-directory entry under `root`; with `name`, only the entries called `name` (a
    folder too, so the caller can say it is not a file). `skip_hidden_dirs`: folders whose name
    starts with "." are not entered. See the module docstring for the bounds."""
    result = Walk()
    if not root.is_dir():
        return result
    limits = _Limits(max_depth, max_entries, time.monotonic() + max_seconds)
    seen = 0
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack and limits.stopped is None:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda e: e.name, reverse=True)
        except OSError as exc:
            result.unreadable.append((folder, f"cannot list folder: {exc.strerror or exc}"))
            continue
        for entry in listed:
            seen += 1
            if seen > limits.max_entries:
                limits.stopped = f"stopped after {limits.max_entries:,} entries"
                break
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if entry.name == name or (name is None and not is_dir):  # a folder called `name` too, as rglob
                result.files.append(Path(entry.path))
            if not is_dir or (skip_hidden_dirs and entry.name.startswith(".")):
                continue
            if depth + 1 > limits.max_depth:
                limits.too_deep += 1
                if limits.first_too_deep is None:
                    limits.first_too_deep = _rel(Path(entry.path), root)
                    result.limited_at = limits.first_too_deep
            else:
                stack.append((Path(entry.path), depth + 1))
        if limits.stopped is None and time.monotonic() > limits.deadline:
            limits.stopped = f"stopped after {max_seconds:g} s"
    result.files.sort(key=lambda p: p.parts)
    result.limited = _limited_line(limits, root)
    if result.limited is not None and result.limited_at is None:
        result.limited_at = "."
    return result


def _rel(path: Path, root: Path) -> str:
    return os.fsencode(path.relative_to(root).as_posix()).decode("utf-8", "backslashreplace")  # bytes as \xNN


def _short(text: str | None) -> str:
    text = text or "."
    return text if len(text) <= 80 else text[:38] + "…" + text[-38:]


def _limited_line(limits: _Limits, root: Path) -> str | None:
    parts = []
    if limits.too_deep:
        parts.append(
            f"{limits.too_deep:,} folder(s) nested more than {limits.max_depth} levels below {root.name or root} "
            f"not searched (first: {_short(limits.first_too_deep)})"
        )
    if limits.stopped is not None:
        parts.append(f"the walk {limits.stopped}; the rest of the tree not searched")
    return "; ".join(parts) or None
