"""Finding and reading the drop folder's files without being led out of it, hung or flooded.

- `walk(root)`: every entry under `root`, sorted, never following a symbolic link to a directory,
  bounded in depth, entries and time (`models_registry.walk`, the walk `registry ingest --dir` uses). A link to a file is read only when its target (fully resolved) is a regular file
  inside the drop folder; a link out of it is listed and rejected (`outside_folder`) without being
  opened, so nothing outside the folder (`/etc/passwd`, `/dev/zero`) is ever read.
- `read_bounded(path, limit)`: regular files only, checked before opening (`lstat`) and again on
  the open descriptor (`fstat`: the file cannot be swapped in between); opened non-blocking and
  without following links (a FIFO or a device never blocks the run); at most `limit` bytes.
- `display_name(rel)`: a path as text that any column can hold (bytes that are not UTF-8 shown as
  `\\xff` escapes).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from models_registry.walk import FileRefused, Refusal, read_open_file, walk_tree
from telemetry.normalize import RowError

MAX_FILE_BYTES = 256 << 20  # a day of scrapes of a large fleet fits; more is split by whoever exports it
MAX_SIDECAR_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class FoundFile:
    """One entry of the drop folder: its path relative to the folder (display-safe), the path to
    open (a link's resolved target), and why it cannot be read, when it cannot."""

    rel: str
    path: Path
    problem: RowError | None = None
    link_target: str | None = None


def display_name(name: str) -> str:
    """`name` with undecodable bytes (surrogate escapes from the file system) shown as `\\xNN`."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")


def _inside(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


def walk(root: Path) -> list[FoundFile]:
    """Every file (and every link or special file) under `root`, sorted by relative path.

    The walk is `models_registry.walk.walk_tree` (shared with `registry ingest --dir`): iterative,
    bounded in depth (`MAX_DEPTH` levels), entries and time, never following a link to a folder.
    A folder that cannot be listed is one entry with its reason (`unreadable`), and what the
    limits left out is one entry (`too_large`) whose reason says what was not searched."""
    if not root.is_dir():
        return []
    real_root = os.path.realpath(root)
    tree = walk_tree(root)
    found = [_entry(path, root, real_root) for path in tree.files]
    for folder, problem in tree.unreadable:
        rel = display_name(folder.relative_to(root).as_posix())
        found.append(FoundFile(rel, folder, RowError("unreadable", problem)))
    if tree.limited is not None:
        rel = tree.limited_at or "."
        found.append(FoundFile(rel, root, RowError("too_large", f"folder tree past the walk's limits: {tree.limited}")))
    return sorted(found, key=lambda f: f.rel)


def _entry(path: Path, root: Path, real_root: str) -> FoundFile:
    rel = display_name(path.relative_to(root).as_posix())
    try:
        info = os.lstat(path)
    except OSError as exc:
        return FoundFile(rel, path, RowError("unreadable", f"cannot stat: {exc.strerror}"))
    if stat.S_ISLNK(info.st_mode):
        target = os.path.realpath(path)
        shown = display_name(os.readlink(path))
        if not _inside(target, real_root):
            return FoundFile(
                rel,
                path,
                RowError("outside_folder", f"symbolic link to {shown}, outside the drop folder: not read"),
                shown,
            )
        try:
            info = os.stat(target)
        except OSError:
            return FoundFile(rel, path, RowError("unreadable", f"broken symbolic link to {shown}"), shown)
        if not stat.S_ISREG(info.st_mode):
            return FoundFile(
                rel, path, RowError("not_a_file", f"symbolic link to {_what(info.st_mode)}: not read"), shown
            )
        return FoundFile(rel, Path(target), None, shown)
    if not stat.S_ISREG(info.st_mode):
        return FoundFile(rel, path, RowError("not_a_file", f"{_what(info.st_mode)}, not a regular file: not read"))
    return FoundFile(rel, path)


def _what(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _refused_error(refused: FileRefused, limit: int) -> RowError:
    """`read_bounded`'s row error for a file `read_open_file` refused."""
    match refused.refusal:
        case Refusal.NOT_REGULAR:
            return RowError("not_a_file", f"{_what(refused.info.st_mode)}, not a regular file: not read")
        case Refusal.TOO_LARGE:
            return RowError("too_large", f"{refused.info.st_size:,} bytes, above the {limit:,}-byte limit: not read")
        case Refusal.GREW:
            return RowError("too_large", f"grew above the {limit:,}-byte limit while read: not read")


def read_bounded(path: Path, limit: int = MAX_FILE_BYTES) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at `path` (at most `limit`) and its fstat; RowError otherwise."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        before = os.lstat(path)
        if not stat.S_ISREG(before.st_mode):
            raise RowError("not_a_file", f"{_what(before.st_mode)}, not a regular file: not read")
        fd = os.open(path, flags)
    except OSError as exc:
        raise RowError("unreadable", f"cannot open: {exc.strerror}") from None
    try:
        return read_open_file(fd, limit)
    except FileRefused as refused:
        raise _refused_error(refused, limit) from None
    except OSError as exc:
        raise RowError("unreadable", f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
