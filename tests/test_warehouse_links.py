"""A warehouse reached through a symbolic link (issue 25, item 1), on real files.

Before: the lock was taken on the path as given and the publish renamed over that path, so two
names for one file took two locks, and a run through a link replaced the link by a regular file.
Now the lock, the build, the staging area and the rename are beside the resolved file; a link
that leads nowhere a run can rename into is refused with a one-line reason.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from tests.test_warehouse_fixtures import warehouse_lock_held
from warehouse.lock import WarehouseBusy
from warehouse.publish import Warehouse, WarehouseUnusable


def _publish_toy(store: Warehouse, run_id: str, value: int) -> None:
    started = dt.datetime.now(dt.UTC)
    with store.lock(run_id):
        store.begin(run_id, started)
        store.stage_path(run_id).mkdir()
        with store.connect(run_id) as con:
            con.execute(
                "create or replace table marts.toy as select $run_id::varchar as run_id, $d::date as run_date, "
                "$v::integer as x",
                {"run_id": run_id, "d": started.date(), "v": value},
            )
        store.publish(run_id, {"started_at": started})


def _linked(tmp_path: Path) -> tuple[Path, Path]:
    """`data/warehouse.duckdb` (the file) and `var/warehouse.duckdb` (a link to it)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "var").mkdir()
    target = tmp_path / "data" / "warehouse.duckdb"
    link = tmp_path / "var" / "warehouse.duckdb"
    link.symlink_to(target)  # dangling until the first run: a first run creates the file there
    return target, link


def test_two_names_for_one_file_take_one_lock(tmp_path: Path) -> None:
    target, link = _linked(tmp_path)
    assert Warehouse(link).lock_path == Warehouse(target).lock_path == target.with_name("warehouse.duckdb.lock")
    with warehouse_lock_held(link, "through-the-link", 60) as holder, pytest.raises(WarehouseBusy) as caught:
        Warehouse(target).lock("by-its-own-name").acquire()
    assert f"pid {holder.pid}" in str(caught.value)
    with warehouse_lock_held(target, "by-its-own-name", 60) as holder, pytest.raises(WarehouseBusy) as caught:
        Warehouse(link).lock("through-the-link").acquire()
    assert f"pid {holder.pid}" in str(caught.value)
    assert not (tmp_path / "var" / "warehouse.duckdb.lock").exists(), "no second lock file beside the link"


def test_a_chain_of_links_and_a_linked_directory_share_the_lock(tmp_path: Path) -> None:
    target, link = _linked(tmp_path)
    second = tmp_path / "second.duckdb"
    second.symlink_to(link)
    linked_dir = tmp_path / "alias"
    linked_dir.symlink_to(tmp_path / "data", target_is_directory=True)
    paths = {Warehouse(p).lock_path for p in (target, link, second, linked_dir / "warehouse.duckdb")}
    assert paths == {target.with_name("warehouse.duckdb.lock")}


def test_publishing_through_a_link_keeps_the_link_and_updates_the_target(tmp_path: Path) -> None:
    target, link = _linked(tmp_path)
    store = Warehouse(link)
    assert store.path == target and store.via_link
    assert store.build_path("r1").parent == target.parent, "the build is beside the file it replaces"
    assert store.stage_path("r1").parent == target.parent, "and so is the staging area"
    _publish_toy(store, "r1", 1)
    _publish_toy(Warehouse(target), "r2", 2)  # the file's own name sees, and extends, the same history
    _publish_toy(store, "r3", 3)
    assert link.is_symlink() and os.readlink(link) == str(target), "the link is still a link to the file"
    assert target.is_file() and not target.is_symlink()
    con = duckdb.connect(str(target), read_only=True)
    try:
        assert con.execute("select run_id from marts.runs order by started_at").fetchall() == [
            ("r1",),
            ("r2",),
            ("r3",),
        ]
        assert con.execute("select x from marts.toy").fetchall() == [(3,)]
    finally:
        con.close()
    leftovers = sorted(p.name for p in (tmp_path / "var").iterdir())
    assert leftovers == ["warehouse.duckdb"], "nothing written beside the link"
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["warehouse.duckdb", "warehouse.duckdb.lock"]


@pytest.mark.parametrize("kind", ["loop", "missing_directory", "directory", "unwritable"])
def test_a_link_that_leads_where_a_run_cannot_rename_is_refused_with_a_reason(tmp_path: Path, kind: str) -> None:
    link = tmp_path / "warehouse.duckdb"
    expected = {
        "loop": "symbolic link loop",
        "missing_directory": "leads to a directory that does not exist",
        "directory": "is not a file",
        "unwritable": "is not writable",
    }[kind]
    if kind == "loop":
        other = tmp_path / "other.duckdb"
        link.symlink_to(other)
        other.symlink_to(link)
    elif kind == "missing_directory":
        link.symlink_to(tmp_path / "gone" / "warehouse.duckdb")
    elif kind == "directory":
        (tmp_path / "somedir").mkdir()
        link.symlink_to(tmp_path / "somedir")
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        # root writes anywhere whatever the mode: a kernel file system that is read-only even for root
        directory = locked if not os.access(locked, os.W_OK) else Path("/proc/sys")
        if os.access(directory, os.W_OK):
            pytest.skip("no directory here that this user cannot write")
        link.symlink_to(directory / "warehouse.duckdb")
    before = sorted(p.name for p in tmp_path.iterdir())
    store = Warehouse(link)
    with pytest.raises(WarehouseUnusable, match=expected) as caught:
        store.lock("r1")
    assert "\n" not in str(caught.value)
    with pytest.raises(WarehouseUnusable, match=expected):
        store.begin("r1")
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing was written"
    assert link.is_symlink()


def test_nightly_and_sql_through_a_link_loop_say_why_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = tmp_path / "warehouse.duckdb"
    other = tmp_path / "other.duckdb"
    link.symlink_to(other)
    other.symlink_to(link)
    monkeypatch.setenv("CAPPLAN_WAREHOUSE", str(link))
    monkeypatch.setenv("CAPPLAN_REGISTRY_URL", f"sqlite:///{tmp_path / 'registry.db'}")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for args in (["nightly"], ["sql", "select 1"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        errors = [line for line in result.stderr.splitlines() if line.strip()]
        assert errors == [f"capplan: error: {link} is a symbolic link loop; point it at a file or remove it"]
        assert "Traceback" not in result.output
    assert not (tmp_path / "registry.db").exists(), "the nightly stopped before touching the registry"
