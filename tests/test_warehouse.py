"""The warehouse without Dagster: SQL files, atomic publish, history, the refresh lock, and what a
SIGKILL at the worst moment leaves behind."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import duckdb
import pytest

from warehouse.lock import RunLock, WarehouseBusy, read_owner
from warehouse.publish import Warehouse, WarehouseMissing, mart_tables
from warehouse.sql import (
    LAYERS,
    WAREHOUSE_DIR,
    WarehouseSqlError,
    column_set,
    example_queries,
    execute_sql,
    header_comment,
    ident,
    keyed_append,
    read_sql,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _relation_files() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (WAREHOUSE_DIR / layer).glob("*.sql"))


# --- SQL files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", _relation_files(), ids=lambda p: f"{p.parent.name}.{p.stem}")
def test_each_sql_file_defines_its_own_relation_with_a_header(path: Path) -> None:
    layer, table = path.parent.name, path.stem
    sql = read_sql(layer, table)  # as run: with an `append incoming` line written out
    header = header_comment(sql)
    assert header.startswith(f"{layer}.{table}:"), "the header names the relation first"
    assert "grain:" in header and "columns:" in header
    created = re.findall(r"create (?:or replace )?(?:table|view)(?: if not exists)? ([a-z_]+\.[a-z_]+)", sql)
    assert created == [f"{layer}.{table}"], "one relation per file, named after the file"
    assert "{" not in sql, "no Python formatting in SQL files"


def test_execute_sql_binds_named_parameters_per_statement() -> None:
    con = duckdb.connect()
    execute_sql(
        con,
        "create table t as select $a::integer as a; insert into t select $a + $b; -- done",
        {"a": 1, "b": 41, "unused": "x"},
    )
    assert con.execute("select list(a order by a) from t").fetchone() == ([1, 42],)
    with pytest.raises(WarehouseSqlError, match="no value for parameter"):
        execute_sql(con, "select $missing", {}, name="q.sql")
    with pytest.raises(WarehouseSqlError, match=r"q\.sql: .*nope"):
        execute_sql(con, "select * from nope", name="q.sql")


def test_an_append_incoming_line_is_written_out_as_its_three_statements() -> None:
    sql = read_sql("raw", "context_limits")
    assert "append incoming" not in sql
    assert (
        "create table if not exists raw.context_limits as\nselect $part_id::bigint as part_id, * from incoming\n"
        "with no data;\n\ndelete from raw.context_limits where part_id = $part_id;\n\n"
        "insert into raw.context_limits by name\nselect $part_id::bigint as part_id, * from incoming\n"
        "order by concurrency, deployment_id;"
    ) in sql
    assert "select $run_id::varchar as run_id, $run_date::date as run_date, * from incoming;" in read_sql(
        "raw", "grid_partitions"
    )
    with pytest.raises(WarehouseSqlError, match=r"appends to raw\.other, not to its own table"):
        keyed_append("raw", "deployments", "raw", "other", "part_id")


def test_a_columns_line_is_written_out_one_column_a_line() -> None:
    # the expected lines are the ones the files held by hand before `@columns` (git history), typed as
    # the DuckDB docs name the types
    assert column_set("f.sql", "    ", "columns", "deployment_keys", "d", ",").splitlines()[:2] == [
        "    d.model,",
        "    d.model_family,",
    ]
    casts = column_set("f.sql", "  ", "casts", "deployment_keys", None, "").splitlines()
    assert casts[-3:] == ["  dp::integer as dp,", "  ep::integer as ep,", "  num_gpus::integer as num_gpus"]
    sql = read_sql("marts", "release_diff")
    assert not [line for line in sql.splitlines() if line.lstrip().startswith("@")]
    assert "    context,\n    num_gpus,\n    engine_version_before,\n    engine_version_after,\n" in sql
    with pytest.raises(WarehouseSqlError, match=r"^f\.sql: unknown column set 'nope'"):
        column_set("f.sql", "", "columns", "nope", None, ",")


def test_a_typed_set_casts_to_its_own_types() -> None:
    # the telemetry staging views' casts, as the files held them by hand before `@casts observed_*`
    settings = column_set("f.sql", "  ", "casts", "observed_settings", None, ",").splitlines()
    assert settings[:2] == ["  tp::integer as tp,", "  pp::integer as pp,"]
    assert "  block_size::integer as block_size," in settings  # the grid dictionary's is bigint
    memory = column_set("f.sql", "  ", "casts", "observed_memory_terms", None, "").splitlines()
    assert memory[0] == "  total_gpu_memory_bytes::bigint as total_gpu_memory_bytes,"
    assert memory[-1] == "  cuda_graph_bytes::bigint as cuda_graph_bytes"
    for table in ("telemetry_observations", "telemetry_deployments"):
        assert not [line for line in read_sql("staging", table).splitlines() if line.lstrip().startswith("@")]


def test_ident_quotes_identifiers() -> None:
    con = duckdb.connect()
    name = ident('we"ird')
    assert name == '"we""ird"'
    con.execute(f"create table {name} as select 1 as x")
    assert con.execute(f"select x from {name}").fetchone() == (1,)


def test_example_queries_exist_and_read_only_marts() -> None:
    queries = example_queries()
    assert {"b_max_by_gpu", "cheapest_deployment", "max_context_at_concurrency"} <= set(queries)
    for name, sql in queries.items():
        assert sql.lstrip().startswith("--"), f"{name}: starts with a comment saying what it answers"
        assert '"' not in sql, f'{name}: no double quotes, so the query pastes into capplan sql "..."'
        assert re.search(r"\bfrom marts\.", sql), f"{name}: queries the marts"


# --- publish -------------------------------------------------------------------------------------


def _publish_toy(store: Warehouse, run_id: str, values: list[int], *, started: dt.datetime | None = None) -> None:
    """One run that writes `marts.toy` (with run_id) and publishes."""
    started = started or dt.datetime.now(dt.UTC)
    store.begin(run_id)
    with store.connect(run_id) as con:
        con.execute(
            "create or replace table marts.toy as "
            "select $run_id::varchar as run_id, $run_date::date as run_date, unnest($values)::integer as x",
            {"run_id": run_id, "run_date": started.date(), "values": values},
        )
        con.execute("comment on column marts.toy.x is 'a toy value'")
    store.publish(run_id, {"started_at": started})


def _read(store: Warehouse, sql: str) -> list[tuple[object, ...]]:
    con = store.connect_read_only()
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_publish_replaces_the_snapshot_and_keeps_history(tmp_path: Path) -> None:
    store = Warehouse(tmp_path / "wh.duckdb", history_runs=2)
    with pytest.raises(WarehouseMissing):
        store.connect_read_only()
    t0 = dt.datetime(2026, 1, 1, 2, tzinfo=dt.UTC)
    for day, run_id in enumerate(("run-a", "run-b", "run-c")):
        with store.lock(run_id):
            _publish_toy(store, run_id, [day, day + 10], started=t0 + dt.timedelta(days=day))

    assert _read(store, "select run_id, x from marts.toy order by x") == [("run-c", 2), ("run-c", 12)]
    history = _read(store, "select run_id, run_date, count(*) from marts.toy_history group by all order by 1")
    assert history == [("run-b", dt.date(2026, 1, 2), 2), ("run-c", dt.date(2026, 1, 3), 2)], "trimmed to 2 runs"
    runs = _read(store, "select run_id, run_date, status, row_counts::varchar from marts.runs order by started_at")
    assert [r[0] for r in runs] == ["run-a", "run-b", "run-c"], "marts.runs keeps every run"
    assert runs[-1][1:] == (dt.date(2026, 1, 3), "published", '{"toy": 2}')
    comment = _read(
        store,
        "select comment from duckdb_columns() where table_name = 'toy_history' and column_name = 'x'",
    )
    assert comment == [("a toy value",)], "history tables carry the marts' column comments"
    assert store.builds() == [], "no build file is left after a publish"


def test_republishing_a_run_does_not_duplicate_history(tmp_path: Path) -> None:
    store = Warehouse(tmp_path / "wh.duckdb")
    with store.lock("r1"):
        _publish_toy(store, "r1", [1, 2, 3])
        _publish_toy(store, "r1", [1, 2, 3])
    assert _read(store, "select count(*) from marts.toy_history") == [(3,)]
    assert _read(store, "select count(*) from marts.runs") == [(1,)]


def test_history_widens_when_a_mart_gains_a_column(tmp_path: Path) -> None:
    store = Warehouse(tmp_path / "wh.duckdb")
    with store.lock("r1"):
        _publish_toy(store, "r1", [1])
        store.begin("r2")
        with store.connect("r2") as con:
            con.execute(
                "create or replace table marts.toy as select 'r2' as run_id, current_date as run_date, 5 as x, 'new' as y"
            )
        store.publish("r2", {"started_at": dt.datetime.now(dt.UTC)})
    assert _read(store, "select run_id, x, y from marts.toy_history order by run_id") == [
        ("r1", 1, None),
        ("r2", 5, "new"),
    ]


def test_run_keyed_raw_tables_keep_history_in_place_and_carry_forward(tmp_path: Path) -> None:
    """Big raw tables keep every retained run's rows (no copy at publish); a run that did not
    write one publishes the previous rows under its own id; publishing trims the oldest runs."""
    store = Warehouse(tmp_path / "wh.duckdb", history_runs=2)
    t0 = dt.datetime(2026, 3, 1, 2, tzinfo=dt.UTC)

    def run(run_id: str, values: list[int] | None, day: int) -> list[tuple[object, ...]]:
        started = t0 + dt.timedelta(days=day)
        with store.lock(run_id):
            store.begin(run_id, started)
            with store.connect(run_id) as con:
                con.execute("create table if not exists raw.keyed (run_id varchar, run_date date, x integer)")
                if values is not None:
                    con.execute(
                        "insert into raw.keyed select $r, $d, unnest($v)",
                        {"r": run_id, "d": started.date(), "v": values},
                    )
            store.publish(run_id, {"started_at": started})
        return _read(store, "select run_id, run_date, x from raw.keyed order by run_date, x")

    assert run("a", [1, 2], 0) == [("a", dt.date(2026, 3, 1), 1), ("a", dt.date(2026, 3, 1), 2)]
    carried = run("b", None, 1)  # b wrote nothing: a's rows again, as b's
    assert carried[2:] == [("b", dt.date(2026, 3, 2), 1), ("b", dt.date(2026, 3, 2), 2)] and len(carried) == 4
    assert run("c", [3], 2) == [
        ("b", dt.date(2026, 3, 2), 1),
        ("b", dt.date(2026, 3, 2), 2),
        ("c", dt.date(2026, 3, 3), 3),
    ]


def test_readers_see_the_previous_snapshot_until_the_swap_then_the_new_one(tmp_path: Path) -> None:
    store = Warehouse(tmp_path / "wh.duckdb")
    with store.lock("old"):
        _publish_toy(store, "old", [1, 2])
    early = store.connect_read_only()  # opened before the next run
    with store.lock("new"):
        store.begin("new")
        with store.connect("new") as con:  # the build is open read-write: readers are not blocked
            con.execute("create or replace table marts.toy as select 'new' as run_id, current_date as run_date, 7 as x")
            during = _read(store, "select run_id, x from marts.toy")
            assert during == [("old", 1), ("old", 2)]
        store.publish("new", {"started_at": dt.datetime.now(dt.UTC)})
    assert early.execute("select run_id, count(*) from marts.toy group by 1").fetchall() == [("old", 2)]
    early.close()
    assert _read(store, "select run_id, x from marts.toy") == [("new", 7)]


def test_mart_tables_are_those_with_a_run_id(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "x.duckdb"))
    con.execute("create schema marts")
    con.execute("create table marts.a (run_id varchar, v int)")
    con.execute("create table marts.a_history (run_id varchar, v int)")
    con.execute("create table marts.runs (run_id varchar)")
    con.execute("create table marts.lookup (v int)")
    assert mart_tables(con) == ["a"]


# --- the refresh lock ------------------------------------------------------------------------------

HOLD_LOCK = textwrap.dedent(
    """
    import sys, time
    from warehouse.lock import RunLock
    lock = RunLock(sys.argv[1], run_id="holder-run")
    lock.acquire()
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    lock.release()
    print("released", flush=True)
    """
)


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True, env=env, cwd=PROJECT_ROOT
    )


def _wait_for(process: subprocess.Popen[str], word: str, timeout: float = 30.0) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if word in line:
            return
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"the subprocess never printed {word!r} (exit code {process.poll()})")


def test_a_second_run_stops_with_a_message_naming_the_owner(tmp_path: Path) -> None:
    lock_path = tmp_path / "wh.duckdb.lock"
    holder = _spawn(HOLD_LOCK, str(lock_path), "60")
    try:
        _wait_for(holder, "locked")
        assert read_owner(lock_path).pid == holder.pid
        with pytest.raises(WarehouseBusy) as caught:
            RunLock(lock_path, run_id="second").acquire()
        message = str(caught.value)
        assert f"pid {holder.pid}" in message and "run holder-run" in message and "--wait" in message
        start = time.monotonic()
        with pytest.raises(WarehouseBusy, match=r"after waiting 1 s"):
            RunLock(lock_path, wait_s=1).acquire()
        assert time.monotonic() - start >= 0.9
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with RunLock(lock_path, run_id="after-kill") as lock:  # the kernel released the dead holder's lock
        assert lock.held
        assert read_owner(lock_path).run_id == "after-kill"
    assert read_owner(lock_path).pid is None, "a released lock names no owner"


def test_a_waiting_run_gets_the_lock_when_the_holder_ends(tmp_path: Path) -> None:
    lock_path = tmp_path / "wh.duckdb.lock"
    holder = _spawn(HOLD_LOCK, str(lock_path), "1.0")
    try:
        _wait_for(holder, "locked")
        with RunLock(lock_path, run_id="waiter", wait_s=30) as lock:
            assert lock.held
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_reentrant_within_a_process(tmp_path: Path) -> None:
    lock_path = tmp_path / "wh.duckdb.lock"
    outer = RunLock(lock_path, run_id="cli")
    outer.acquire()
    inner = RunLock(lock_path, run_id="job")
    inner.acquire()  # the job's resource, under the CLI's lock
    inner.release()
    assert read_owner(lock_path).run_id == "cli", "still held by the outer owner"
    outer.release()
    seen: list[bool] = []
    thread = threading.Thread(target=lambda: seen.append(RunLock(lock_path).__enter__().held))
    thread.start()
    thread.join()
    assert seen == [True]


# --- SIGKILL while publishing ----------------------------------------------------------------------

KILLABLE_RUN = textwrap.dedent(
    """
    import datetime as dt, os, sys, time
    import warehouse.publish as publish
    from warehouse.publish import Warehouse

    path, run_id, stop_at = sys.argv[1], sys.argv[2], sys.argv[3]
    store = Warehouse(path)
    lock = store.lock(run_id)
    lock.acquire()
    store.begin(run_id)
    with store.connect(run_id) as con:
        con.execute(
            "create or replace table marts.toy as select $r::varchar as run_id, current_date as run_date, "
            "range::integer as x from range(200000)", {"r": run_id}
        )
        if stop_at == "build":
            print("building", flush=True)
            while True:  # keep writing into the build until killed
                con.execute("insert into marts.toy select $r, current_date, range from range(100000)", {"r": run_id})
    def stuck_replace(src, dst):
        print("replacing", flush=True)
        time.sleep(600)
    publish.os.replace = stuck_replace
    store.publish(run_id, {"started_at": dt.datetime.now(dt.UTC)})
    """
)


@pytest.mark.parametrize("stop_at", ["build", "replace"])
def test_sigkill_while_publishing_leaves_the_previous_snapshot_intact(tmp_path: Path, stop_at: str) -> None:
    store = Warehouse(tmp_path / "wh.duckdb")
    with store.lock("previous"):
        _publish_toy(store, "previous", [1, 2, 3])
    before = store.path.read_bytes()

    victim = _spawn(KILLABLE_RUN, str(store.path), "doomed", stop_at)
    try:
        _wait_for(victim, "building" if stop_at == "build" else "replacing")
        time.sleep(0.3)
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=30) == -signal.SIGKILL
    finally:
        if victim.poll() is None:
            victim.kill()

    assert store.path.read_bytes() == before, "the published file was never touched"
    assert _read(store, "select run_id, count(*) from marts.toy group by 1") == [("previous", 3)]
    assert _read(store, "select list(run_id) from marts.runs") == [(["previous"],)]
    assert store.builds(), "the killed run's build is still there"
    with store.lock("next"):  # the lock died with its holder; the next run cleans up and publishes
        _publish_toy(store, "next", [9])
    assert store.builds() == []
    assert _read(store, "select run_id, x from marts.toy") == [("next", 9)]
