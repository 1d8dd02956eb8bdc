"""One refresh at a time: an exclusive lock file next to the warehouse, naming its owner.

`flock` on `<warehouse>.lock`: the kernel releases it when the holder exits for any reason
(SIGKILL included), so a crashed run never leaves a stale lock behind; the file itself stays and
its content (owner PID, run id, start time) is only informative. A second run either waits up to
`wait_s` seconds or stops with `WarehouseBusy`, naming the owner. Re-entrant within one process:
the CLI takes the lock before it starts the Dagster job, and the job's resource takes it again.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType


class WarehouseBusy(RuntimeError):
    """Another run holds the warehouse lock; the message says who and what to do."""


@dataclass(frozen=True, slots=True)
class LockOwner:
    pid: int | None
    run_id: str | None
    started_at: str | None
    host: str | None

    def describe(self) -> str:
        parts = [f"pid {self.pid}" if self.pid else "pid unknown"]
        if self.host and self.host != socket.gethostname():
            parts.append(f"on {self.host}")
        if self.run_id:
            parts.append(f"run {self.run_id}")
        if self.started_at:
            parts.append(f"since {self.started_at}")
        return ", ".join(parts)


def read_owner(lock_path: Path) -> LockOwner:
    """What the lock file says about its last owner (fields None when unreadable)."""
    try:
        data = json.loads(lock_path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    pid = data.get("pid")
    return LockOwner(
        pid=pid if isinstance(pid, int) else None,
        run_id=data.get("run_id") if isinstance(data.get("run_id"), str) else None,
        started_at=data.get("started_at") if isinstance(data.get("started_at"), str) else None,
        host=data.get("host") if isinstance(data.get("host"), str) else None,
    )


_held: dict[Path, list[int]] = {}  # lock path -> [fd, depth], for this process
_held_guard = threading.Lock()


class RunLock:
    """The warehouse's refresh lock (`with RunLock(path, run_id=...):`)."""

    def __init__(self, lock_path: Path | str, *, run_id: str | None = None, wait_s: float = 0.0) -> None:
        self.path = Path(lock_path).resolve()
        self.run_id = run_id
        self.wait_s = wait_s
        self._acquired = False

    @property
    def held(self) -> bool:
        return self._acquired

    def acquire(self) -> None:
        if self._acquired:
            return
        with _held_guard:
            entry = _held.get(self.path)
            if entry is not None:
                entry[1] += 1
                self._acquired = True
                return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + max(self.wait_s, 0.0)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        owner = read_owner(self.path)
                        waited = f" after waiting {self.wait_s:g} s" if self.wait_s > 0 else ""
                        raise WarehouseBusy(
                            f"another capplan run is refreshing this warehouse ({owner.describe()}; "
                            f"lock file {self.path}){waited}; try again when it ends, or pass --wait SECONDS"
                        ) from None
                    time.sleep(min(0.2, max(deadline - time.monotonic(), 0.01)))
        except BaseException:
            os.close(fd)
            raise
        record = {
            "pid": os.getpid(),
            "run_id": self.run_id,
            "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        with _held_guard:
            _held[self.path] = [fd, 1]
        self._acquired = True

    def release(self) -> None:
        if not self._acquired:
            return
        self._acquired = False
        with _held_guard:
            entry = _held.get(self.path)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _held[self.path]
        fd = entry[0]
        try:
            os.ftruncate(fd, 0)  # no owner any more; the file stays (removing it would race)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
