"""`capplan doctor`: is everything a run needs in order? One line per check, with the fix.

Checks, in order: the warehouse file (a DuckDB file that opens read-only, with the `raw`,
`staging` and `marts` schemas and a readable `marts.runs`; `--deep` reads every table), builds and
staging areas left by crashed runs, the refresh lock (held by a live run, or a record left by a
dead one), the registry (it connects, SQLite's `quick_check`, its Alembic revision is the head),
the telemetry store (readable, temporary files left by a crashed writer) and the free disk space
next to the warehouse. Exit code 0 when every check is ok, 1 otherwise; `--json` prints the
checks as a JSON list instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer

from pipelines.commands.common import WarehouseOption, fail

MIN_FREE_BYTES = 1 << 30  # and at least twice the warehouse: a run writes a full copy before the rename
STUCK_AFTER_S = 6 * 3600  # a lock held this long is a stuck run's (a nightly takes minutes)
ORPHAN_AGE_S = 3600  # a telemetry temporary file older than this is no writer's any more


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None

    def line(self) -> str:
        mark = "ok     " if self.ok else "problem"
        fix = f" -> {self.fix}" if self.fix else ""
        return f"{mark} {self.name:<10} {self.detail}{fix}"


def check_warehouse_file(path: Path | None, deep: bool) -> Check:
    from warehouse.publish import Warehouse
    from warehouse.recovery import check_warehouse

    store = Warehouse(path)
    try:
        store.check_writable()
    except ValueError as exc:
        return Check("warehouse", False, str(exc), "point CAPPLAN_WAREHOUSE (or --warehouse) at a writable file")
    if not store.exists:
        return Check("warehouse", False, f"no warehouse at {store.given} yet", "capplan nightly")
    problem = check_warehouse(store, deep=deep)
    if problem:
        return Check("warehouse", False, problem, "capplan nightly --rebuild")
    shown = f"{store.given} -> {store.path}" if store.via_link else str(store.given)
    return Check(
        "warehouse", True, f"{shown} opens, schemas and marts.runs readable{' (every table read)' if deep else ''}"
    )


def check_leftovers(path: Path | None) -> Check:
    from warehouse.publish import Warehouse

    store = Warehouse(path)
    left = [*store.builds(), *store.stages()]
    if not left:
        return Check("leftovers", True, "no builds or staging areas left by crashed runs")
    size = sum(_size(p) for p in left)
    return Check(
        "leftovers",
        False,
        f"{len(left)} build file(s)/staging area(s) of crashed runs ({size / 1e6:,.1f} MB) in {store.path.parent}",
        "the next capplan nightly removes them",
    )


def check_lock(path: Path | None) -> Check:
    from warehouse.lock import read_owner
    from warehouse.publish import Warehouse

    store = Warehouse(path)
    lock = store.lock_path
    if not lock.exists():
        return Check("lock", True, "free (no lock file yet)")
    owner = read_owner(lock)
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError as exc:
        return Check("lock", False, f"cannot open {lock}: {exc.strerror}", f"check the permissions of {lock}")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            held_s = _age_s(owner.started_at)
            if held_s is not None and held_s > STUCK_AFTER_S and owner.pid:
                return Check(
                    "lock",
                    False,
                    f"held for {held_s / 3600:,.1f} h by {owner.describe()}: longer than any nightly should take",
                    f"if that run is stuck: kill {owner.pid} (the lock is released when it exits)",
                )
            return Check("lock", True, f"held by a running nightly ({owner.describe()})")
    finally:
        os.close(fd)
    if owner.pid and not _alive(owner.pid):
        return Check(
            "lock",
            True,
            f"free; the record of a run that died is left in it ({owner.describe()}); the kernel released the lock",
        )
    return Check("lock", True, "free")


def check_registry() -> Check:
    from models_registry import db

    url = db.registry_url()
    shown = db.safe_url(url)
    path = db.sqlite_path(url)
    if path is not None and not path.exists():
        return Check("registry", False, f"no registry at {shown} yet", "capplan nightly (creates and migrates it)")
    try:
        return _registry_state(url, shown, path)
    except Exception as exc:  # any failure to reach the registry is the answer
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())[:300] or type(exc).__name__
        fix = "restore it from a backup, or move it aside and run capplan nightly (see README: When something breaks)"
        return Check("registry", False, f"{shown} does not open: {reason}", fix)


def _registry_state(url: str, shown: str, path: Path | None) -> Check:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlalchemy import text

    from models_registry import db

    engine = db.make_engine(url)
    try:
        with engine.connect() as connection:
            if path is not None:
                verdict = [str(r[0]) for r in connection.execute(text("pragma quick_check")).fetchall()]
                if verdict != ["ok"]:
                    fix = "restore it from a backup, or move it aside and run capplan nightly (see README: When something breaks)"
                    return Check("registry", False, f"{shown} is damaged: {'; '.join(verdict)[:300]}", fix)
            current = MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
    head = ScriptDirectory.from_config(db.alembic_config(url)).get_current_head()
    if current != head:
        return Check("registry", False, f"{shown} is at revision {current}, not {head}", "capplan registry upgrade")
    return Check("registry", True, f"{shown} at revision {head}")


def check_telemetry() -> Check:
    from telemetry.store import STORE_ENV, StoreError, store_from_env

    try:
        store = store_from_env()
    except StoreError as exc:
        return Check("telemetry", False, str(exc), f"fix {STORE_ENV}")
    if store is None:
        return Check("telemetry", True, f"no sample store ({STORE_ENV} unset)")
    shown = store.display_url()
    try:
        days = store.days()
    except Exception as exc:  # an unreadable store is the answer
        return Check(
            "telemetry", False, f"{shown} cannot be read: {' '.join(str(exc).split())[:200]}", f"check {STORE_ENV}"
        )
    if not store.local:
        return Check("telemetry", True, f"{shown}: {len(days)} days")
    now = time.time()
    orphans = [
        p for p in Path(store.root).glob("**/.part-*.tmp") if p.is_file() and now - p.stat().st_mtime > ORPHAN_AGE_S
    ]
    if orphans:
        return Check(
            "telemetry",
            False,
            f"{shown}: {len(orphans)} temporary file(s) left by a crashed writer (never read)",
            f"remove them: find {store.root} -name '.part-*.tmp' -mmin +60 -delete",
        )
    return Check("telemetry", True, f"{shown}: {len(days)} days, no temporary files left")


def check_disk(path: Path | None) -> Check:
    from warehouse.publish import Warehouse

    store = Warehouse(path)
    directory = store.path.parent
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    free = shutil.disk_usage(directory).free
    size = store.path.stat().st_size if store.exists else 0
    need = max(MIN_FREE_BYTES, 2 * size)
    detail = f"{free / 1e9:,.1f} GB free in {directory} (a run needs about {need / 1e9:,.1f} GB)"
    if free < need:
        return Check("disk", False, detail, f"free space in {directory} (old *.corrupt-* files, var/dagster logs)")
    return Check("disk", True, detail)


def _age_s(started_at: str | None) -> float | None:
    import datetime as dt

    try:
        started = dt.datetime.fromisoformat(started_at or "")
    except ValueError:
        return None
    if started.tzinfo is None:
        started = started.replace(tzinfo=dt.UTC)
    return (dt.datetime.now(dt.UTC) - started).total_seconds()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def doctor(
    warehouse: WarehouseOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
    deep: Annotated[bool, typer.Option("--deep", help="Read every table of the warehouse (slower).")] = False,
) -> None:
    """Check the warehouse, the registry, the telemetry store, the lock and the disk; say how to fix each."""
    try:
        checks = [
            check_warehouse_file(warehouse, deep),
            check_leftovers(warehouse),
            check_lock(warehouse),
            check_registry(),
            check_telemetry(),
            check_disk(warehouse),
        ]
    except OSError as exc:
        fail(f"doctor could not look: {exc.strerror or exc}")
    if as_json:
        typer.echo(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        for check in checks:
            typer.echo(check.line())
    if not all(c.ok for c in checks):
        raise typer.Exit(1)
