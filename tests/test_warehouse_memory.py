"""What keeps the nightly's memory bounded at fleet scale: DuckDB's memory capped on the run's build
(spilling to the run's staging area), and no preview query that would build a join's hash table."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipelines.assets import common
from pipelines.resources import DEFAULT_DUCKDB_MEMORY_LIMIT, DUCKDB_MEMORY_ENV, build_resources, duckdb_connect


def test_the_build_connection_caps_duckdb_memory_and_spills_to_the_stage(tmp_path: Path) -> None:
    spill = tmp_path / "stage" / "duckdb-spill"
    con = duckdb_connect(tmp_path / "w.duckdb", memory_limit="64MB", spill_dir=spill)
    try:
        limit, temp = con.execute("select current_setting('memory_limit'), current_setting('temp_directory')").fetchone()  # type: ignore[misc]
        # a sort larger than the cap completes by spilling
        rows = con.execute("select count(*) from (select i, random() as r from range(8000000) t(i) order by r)").fetchone()
    finally:
        con.close()
    assert limit in ("61.0 MiB", "64.0 MB"), limit  # DuckDB reports 64 MB in MiB
    assert Path(temp) == spill
    assert rows == (8_000_000,)


def test_a_memory_limit_that_is_not_a_size_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"^{DUCKDB_MEMORY_ENV}='lots': not a memory size") as raised:
        duckdb_connect(tmp_path / "w.duckdb", memory_limit="lots")
    assert "\n" not in str(raised.value)


def test_the_default_limit_and_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DUCKDB_MEMORY_ENV, raising=False)
    assert build_resources()["warehouse"].duckdb_memory_limit == DEFAULT_DUCKDB_MEMORY_LIMIT == "1GB"
    monkeypatch.setenv(DUCKDB_MEMORY_ENV, "2GiB")
    assert build_resources()["warehouse"].duckdb_memory_limit.get_value() == "2GiB"


def test_large_views_get_no_preview_but_tables_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "PREVIEW_MAX_VIEW_ROWS", 10)
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    try:
        con.execute("create schema marts")
        con.execute("create table marts.big as select i as x from range(11) t(i)")
        con.execute("create view marts.big_view as select a.x, b.x as y from marts.big a join marts.big b using (x)")
        table = common.relation_metadata(con, "marts", "big")
        view = common.relation_metadata(con, "marts", "big_view")
    finally:
        con.close()
    assert table["dagster/row_count"].value == view["dagster/row_count"].value == 11
    assert table["preview"].value.startswith("| x |")
    assert view["preview"].value == '(no preview of a view of 11 rows: `capplan sql "select * from marts.big_view limit 5"`)'
