"""A corrupt warehouse, found and recovered (issue 25, recovery), on real DuckDB and SQLite files.

- `capplan doctor`: one line per check (warehouse, leftovers, lock, registry, telemetry store,
  disk), the command that fixes each problem, exit code 0 / 1, `--json`.
- Every command that opens a corrupt warehouse (sql, report, export, nightly) says so in one line
  with the recovery command, never a traceback.
- The rebuild's salvage carries over the history the old file still lets us read.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from tests.test_warehouse_fixtures import warehouse_lock_held
from warehouse.publish import Warehouse
from warehouse.recovery import check_warehouse, move_aside, salvage_history

PROJECT_ROOT = Path(__file__).resolve().parent.parent
T0 = dt.datetime(2026, 1, 1, 2, tzinfo=dt.UTC)


def publish_toy(store: Warehouse, run_id: str, day: int, *, big_rows: int = 0) -> None:
    """A run publishing `marts.toy` (history copied per run), and optionally `marts.big` with many rows."""
    started = T0 + dt.timedelta(days=day)
    with store.lock(run_id):
        store.begin(run_id, started)
        with store.connect(run_id) as con:
            con.execute(
                "create or replace table marts.toy as select $r::varchar as run_id, $d::date as run_date, $x::int as x",
                {"r": run_id, "d": started.date(), "x": day},
            )
            if big_rows:
                con.execute(
                    "create or replace table marts.big as select $r::varchar as run_id, $d::date as run_date, "
                    "range as i, random() as v from range($n)",
                    {"r": run_id, "d": started.date(), "n": big_rows},
                )
        store.publish(run_id, {"started_at": started})


def _read(path: Path, sql: str) -> list[tuple[object, ...]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def corrupt(path: Path, how: str) -> None:
    if how == "random":
        path.write_bytes(os.urandom(300_000))
    elif how == "truncated":  # half of it: often still opens, and fails at the first read of a missing block
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "headers":  # the headers only: does not open
        path.write_bytes(path.read_bytes()[:16384])
    elif how == "empty":
        path.write_bytes(b"")
    else:
        raise ValueError(how)


@pytest.fixture(scope="module")
def _two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse of two published runs, published once for the module (`healthy` copies it)."""
    path = tmp_path_factory.mktemp("two-runs") / "warehouse.duckdb"
    store = Warehouse(path)
    publish_toy(store, "run-1", 0)
    publish_toy(store, "run-2", 1)
    return path


@pytest.fixture
def healthy(tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch, _two_runs: Path) -> Path:
    """A published warehouse of two runs (a copy of `_two_runs`), a migrated registry, exported in the environment."""
    path = tmp_path / "var" / "warehouse.duckdb"
    shutil.copyfile(_two_runs, path)
    monkeypatch.setenv("CAPPLAN_WAREHOUSE", str(path))
    monkeypatch.delenv("CAPPLAN_TELEMETRY_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    return path


def _doctor(*args: str) -> tuple[int, dict[str, dict[str, object]], str]:
    result = CliRunner().invoke(app, ["doctor", *args])
    as_json = CliRunner().invoke(app, ["doctor", "--json", *args])
    assert as_json.exit_code == result.exit_code
    checks = {c["name"]: c for c in json.loads(as_json.stdout)}
    assert "Traceback" not in result.output
    return result.exit_code, checks, result.stdout


def test_doctor_on_a_good_warehouse_says_ok_line_by_line(healthy: Path) -> None:
    code, checks, text = _doctor()
    assert code == 0, text
    assert set(checks) == {"warehouse", "leftovers", "lock", "registry", "telemetry", "disk"}
    assert all(c["ok"] for c in checks.values()), checks
    assert len(text.strip().splitlines()) == 6 and all(line.startswith("ok") for line in text.splitlines())
    code, checks, text = _doctor("--deep")
    assert code == 0 and "every table read" in str(checks["warehouse"]["detail"])


@pytest.mark.parametrize("how", ["random", "truncated", "headers", "empty"])
def test_doctor_on_a_corrupt_warehouse_names_the_cause_and_the_fix(healthy: Path, how: str) -> None:
    corrupt(healthy, how)
    code, checks, text = _doctor()
    assert code == 1
    warehouse = checks["warehouse"]
    assert not warehouse["ok"] and warehouse["fix"] == "capplan nightly --rebuild"
    cause = {
        "random": "not a DuckDB database file",
        "empty": "not a DuckDB database file",
        "truncated": "is truncated",
        "headers": "does not open",
    }
    assert cause[how] in str(warehouse["detail"])
    problem = [line for line in text.splitlines() if line.startswith("problem")]
    assert len(problem) == 1 and problem[0].endswith("-> capplan nightly --rebuild")
    assert all(checks[name]["ok"] for name in ("lock", "registry", "telemetry", "disk"))


def test_doctor_deep_finds_a_damaged_block_that_opening_does_not(healthy: Path) -> None:
    publish_toy(Warehouse(healthy), "run-3", 2, big_rows=2_000_000)
    size = healthy.stat().st_size
    with healthy.open("r+b") as handle:  # zeros over the middle: marts.big's data blocks
        handle.seek(size // 2)
        handle.write(b"\0" * (1 << 20))
    code, checks, _text = _doctor()
    assert code == 0, "opening and marts.runs are fine"
    code, checks, _text = _doctor("--deep")
    assert code == 1 and "Corrupt database file" in str(checks["warehouse"]["detail"])


def test_doctor_on_the_lock_leftovers_registry_and_telemetry(
    healthy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Warehouse(healthy)
    with warehouse_lock_held(healthy, "busy-run", 60) as holder:
        code, checks, _ = _doctor()
        assert code == 0 and f"held by a running nightly (pid {holder.pid}" in str(checks["lock"]["detail"])
    stuck = """
import json, sys, time
from warehouse.publish import Warehouse
lock = Warehouse(sys.argv[1]).lock("stuck-run")
lock.acquire()
lock.path.write_text(json.dumps({"pid": __import__("os").getpid(), "run_id": "stuck-run",
                                 "started_at": "2026-01-01T00:00:00+00:00"}))
print("locked", flush=True)
time.sleep(60)
"""
    holder = subprocess.Popen(
        [sys.executable, "-c", stuck, str(healthy)], stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        code, checks, _ = _doctor()
        assert code == 1 and checks["lock"]["fix"] == f"if that run is stuck: kill {holder.pid} (the lock is released when it exits)"
    finally:
        holder.kill()
        holder.wait()
    store.lock_path.write_text(json.dumps({"pid": 2**22 + 12345, "run_id": "dead-run"}), encoding="utf-8")
    code, checks, _ = _doctor()
    assert code == 0 and "a run that died" in str(checks["lock"]["detail"]), checks["lock"]

    store.build_path("crashed").write_bytes(b"x" * 1000)
    code, checks, text = _doctor()
    assert code == 1 and not checks["leftovers"]["ok"] and "the next capplan nightly removes them" in text
    store.build_path("crashed").unlink()

    samples = tmp_path / "telemetry" / "samples" / "day=2026-01-01"
    samples.mkdir(parents=True)
    orphan = samples / ".part-0123.tmp"
    orphan.write_bytes(b"half a parquet file")
    os.utime(orphan, (0, 0))
    monkeypatch.setenv("CAPPLAN_TELEMETRY_STORE", str(tmp_path / "telemetry"))
    code, checks, _ = _doctor()
    assert code == 1 and not checks["telemetry"]["ok"] and "-name '.part-*.tmp'" in str(checks["telemetry"]["fix"])
    orphan.unlink()
    code, checks, _ = _doctor()
    assert code == 0 and "1 days" in str(checks["telemetry"]["detail"])

    registry = tmp_path / "var" / "registry.db"
    registry.write_bytes(b"SQLite format 3\0" + os.urandom(8192))
    code, checks, _ = _doctor()
    assert code == 1 and not checks["registry"]["ok"] and "When something breaks" in str(checks["registry"]["fix"])


def test_doctor_says_the_registry_needs_an_upgrade(healthy: Path, sqlite_url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(sqlite_url)
    with engine.begin() as con:
        con.execute(text("update alembic_version set version_num = 'an-older-one'"))
    engine.dispose()
    code, checks, _ = _doctor()
    assert code == 1 and checks["registry"]["fix"] == "capplan registry upgrade"


@pytest.mark.parametrize("how", ["random", "truncated", "headers"])
@pytest.mark.parametrize(
    "args",
    [["sql", "select 1"], ["report", "--out", "r.html"], ["export", "admission"], ["sql", "--describe", "marts.runs"]],
)
def test_every_reader_says_corrupt_in_one_line_with_the_recovery(healthy: Path, how: str, args: list[str]) -> None:
    corrupt(healthy, how)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    said = {"random": "does not open: ", "truncated": "is truncated: ", "headers": "does not open: "}[how]
    assert lines[0].startswith(f"capplan: error: the warehouse {healthy} {said}"), lines[0]
    assert "capplan doctor" in lines[0] and "capplan nightly --rebuild" in lines[0]


def test_the_nightly_refuses_a_corrupt_warehouse_in_one_line_and_leaves_it(healthy: Path) -> None:
    corrupt(healthy, "random")
    before = healthy.read_bytes()
    result = CliRunner().invoke(app, ["nightly"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "not a DuckDB database file" in lines[0] and "capplan nightly --rebuild" in lines[0]
    assert healthy.read_bytes() == before, "nothing moved without --rebuild"


# --- salvage -------------------------------------------------------------------------------------


def test_rebuild_salvage_keeps_the_history_of_a_readable_file(healthy: Path) -> None:
    store = Warehouse(healthy)
    assert check_warehouse(store) is None
    aside = move_aside(store, "before-rebuild")
    assert not healthy.exists() and aside.name.startswith("warehouse.duckdb.before-rebuild-")
    lines = salvage_history(aside, store)
    assert lines[0] == "carried over marts.runs (2 runs)" and "toy_history" in lines[1], lines
    assert _read(healthy, "select run_id from marts.toy_history order by 1") == [("run-1",), ("run-2",)]
    publish_toy(store, "run-3", 2)  # the rebuild's run appends to the history carried over
    assert _read(healthy, "select run_id from marts.runs order by started_at") == [("run-1",), ("run-2",), ("run-3",)]
    assert _read(healthy, "select count(distinct run_id) from marts.toy_history") == [(3,)]
    assert store.builds() == []


def test_rebuild_salvage_keeps_what_is_readable_and_says_what_is_lost(healthy: Path) -> None:
    store = Warehouse(healthy)
    publish_toy(store, "run-3", 2, big_rows=2_000_000)
    size = healthy.stat().st_size
    with healthy.open("r+b") as handle:
        handle.seek(size // 2)
        handle.write(b"\0" * (1 << 20))
    problem = check_warehouse(store, deep=True)
    assert problem is not None and "marts.big" in problem
    aside = move_aside(store, "corrupt")
    lines = salvage_history(aside, store)
    assert "carried over marts.runs (3 runs)" in lines
    assert any(line.startswith("history lost: marts.big_history (") for line in lines), lines
    assert _read(healthy, "select count(distinct run_id) from marts.toy_history") == [(3,)]
    assert check_warehouse(store) is None


@pytest.mark.parametrize("how", ["random", "headers"])
def test_rebuild_salvage_of_an_unreadable_file_says_so_in_one_line(healthy: Path, how: str) -> None:
    corrupt(healthy, how)
    store = Warehouse(healthy)
    aside = move_aside(store, "corrupt")
    lines = salvage_history(aside, store)
    assert len(lines) == 1 and lines[0].startswith(f"history not carried over: {aside.name} does not open ("), lines
    assert not healthy.exists() and store.builds() == [], "nothing published, nothing left behind"
    assert aside.exists(), "the corrupt file is kept for a post-mortem"


def test_the_lock_file_of_a_moved_warehouse_stays_usable(healthy: Path) -> None:
    store = Warehouse(healthy)
    aside = move_aside(store, "corrupt")
    shutil.copyfile(aside, healthy)
    publish_toy(store, "run-3", 2)
    assert _read(healthy, "select count(*) from marts.runs") == [(3,)]


def test_rebuild_salvage_of_a_truncated_file_keeps_what_it_can_read(healthy: Path) -> None:
    store = Warehouse(healthy)
    publish_toy(store, "run-3", 2, big_rows=1_000_000)
    corrupt(healthy, "truncated")
    assert "is truncated" in str(check_warehouse(store))
    aside = move_aside(store, "corrupt")
    lines = salvage_history(aside, store)
    known = ("carried over ", "history lost: ", "history not carried over: ", "raw history lost", "no raw history")
    assert lines and all(line.startswith(known) and "\n" not in line for line in lines), lines
    if healthy.exists():  # what was published is a whole warehouse
        assert check_warehouse(store, deep=True) is None
    assert store.builds() == []


def test_moving_aside_twice_in_one_second_keeps_both_files(healthy: Path) -> None:
    store = Warehouse(healthy)
    now = dt.datetime(2026, 12, 4, 23, 0, tzinfo=dt.UTC)
    first = move_aside(store, "corrupt", now)
    healthy.write_bytes(b"second")
    second = move_aside(store, "corrupt", now)
    assert first != second and first.exists() and second.read_bytes() == b"second"


def test_a_warehouse_held_by_a_writer_is_not_called_corrupt(healthy: Path) -> None:
    """Only a damaged file gets the rebuild hint: a file another process holds read-write is not one."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('open', flush=True); time.sleep(60)",
            str(healthy),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        result = CliRunner().invoke(app, ["sql", "select 1"])
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "does not open" in lines[0] and "lock" in lines[0].lower(), lines
    assert "--rebuild" not in lines[0] and lines[0].endswith("check it: capplan doctor")


@pytest.mark.slow
def test_readers_racing_publishes_never_call_the_warehouse_truncated(tmp_path: Path) -> None:
    """A publish alternating a big and an empty mart (one run of history) makes the file grow and
    shrink; a reader that opened the big one and then measured the small one renamed in meanwhile
    would call it truncated (it did, 5 times in 20 s, before the check compared the same inode)."""
    import threading
    import time

    from warehouse.publish import WarehouseCorrupt

    store = Warehouse(tmp_path / "w.duckdb", history_runs=1)
    publish_toy(store, "run-0", 0)
    done = threading.Event()
    sizes: set[int] = set()

    def writer() -> None:
        day = 1
        while not done.is_set():
            publish_toy(store, f"run-{day}", day % 300, big_rows=400_000 if day % 2 else 0)
            sizes.add(store.path.stat().st_size)
            day += 1

    thread = threading.Thread(target=writer)
    thread.start()
    false_verdicts: list[str] = []
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            try:
                store.connect_read_only().close()
            except WarehouseCorrupt as exc:
                false_verdicts.append(str(exc))
    finally:
        done.set()
        thread.join()
    assert len(sizes) >= 2, "the file grew and shrank"
    assert false_verdicts == []


def test_rebuild_with_partitions_is_refused_in_one_line(healthy: Path) -> None:
    result = CliRunner().invoke(app, ["nightly", "--rebuild", "--partition", "llama"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "capplan: error: --rebuild recomputes every partition (the old grid may be unreadable): drop --partition"
    )
