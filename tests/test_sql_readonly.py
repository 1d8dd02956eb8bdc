"""`capplan sql` (and every reader of the published warehouse) cannot change a byte on disk.

Each escape route a hostile or careless user might type is run through the real CLI against a
real DuckDB file; every file under the test's directory (the warehouse, a second database, a CSV,
a home directory where DuckDB would install extensions or store secrets) is hashed before and
after, and the route must fail with one line on stderr (or, for harmless reads, succeed) without
leaking what it tried to read.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from warehouse.publish import Warehouse
from warehouse.sql import ReadOnlyViolation, connect_reader, reader_statements

SECRET_LINE = "root:$6$planted-secret-hash"


def _tree(root: Path) -> dict[str, str]:
    """sha256 of every file under `root`, and every directory (as 'dir'), by relative path."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        found[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A published-looking warehouse with a documented table and view, plus files around it."""
    var = tmp_path / "var"
    var.mkdir()
    con = duckdb.connect(str(var / "warehouse.duckdb"))
    con.execute("create schema marts")
    con.execute("create table marts.runs as select 'r1' as run_id, 3 as models")
    con.execute("comment on column marts.runs.models is 'models published by the run'")
    con.execute("create view marts.models as select 'meta-llama/Llama-3.1-8B' as model, 8030261248 as params")
    con.execute("comment on view marts.models is 'one row per current model revision'")
    con.execute("comment on column marts.models.params is 'parameters, counted from the config'")
    con.close()
    other = duckdb.connect(str(tmp_path / "other.duckdb"))
    other.execute("create table t as select 1 as a")
    other.close()
    (tmp_path / "secret.csv").write_text(f"line\n{SECRET_LINE}\n", encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CAPPLAN_WAREHOUSE", str(var / "warehouse.duckdb"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _routes(root: Path) -> list[str]:
    warehouse = root / "var" / "warehouse.duckdb"
    secret = root / "secret.csv"
    return [
        f"copy (select 1) to '{warehouse}'",
        "copy (select 1) to 'var/warehouse.duckdb'",
        f"copy (select 1) to '{root}/out.csv'",
        f"copy marts.runs to '{root}/out.parquet' (format parquet)",
        f"copy marts.runs from '{secret}'",
        f"attach '{warehouse}' as w2 (read_only false); insert into w2.marts.runs values ('x', 1)",
        f"attach '{root}/other.duckdb' as o; insert into o.t values (2)",
        f"attach '{root}/new.duckdb' as n",
        "attach ':memory:' as m; create table m.t as select 1",
        f"export database '{root}/exported'",
        f"import database '{root}'",
        "select * from read_text('/etc/shadow')",
        "select * from read_csv('/etc/passwd')",
        f"select * from read_csv('{secret}')",
        f"select * from '{secret}'",
        f"select * from read_blob('{secret}')",
        f"select * from read_json('{secret}')",
        f"select * from sniff_csv('{secret}')",
        f"select * from parquet_metadata('{secret}')",
        f"select * from read_duckdb('{root}/other.duckdb')",
        "select * from glob('/etc/*')",
        f"select * from glob('{root}/*')",
        "select * from read_parquet('http://example.com/x.parquet')",
        "select * from read_csv('https://example.com/x.csv')",
        "install httpfs",
        "force install httpfs from 'http://example.com'",
        "load httpfs",
        f"load '{root}/evil.duckdb_extension'",
        "set enable_external_access = true",
        "reset enable_external_access",
        "set allowed_directories = ['/']",
        f"set temp_directory = '{root}/spill'",
        f"set extension_directory = '{root}/ext'",
        f"set secret_directory = '{root}/secrets'",
        "pragma enable_profiling = 'json'",
        f"set profiling_output = '{root}/profile.json'",
        f"pragma log_query_path = '{root}/queries.log'",
        f"call enable_logging(storage = 'file', storage_path = '{root}/logs')",
        f"select * from enable_logging(storage = 'file', storage_path = '{root}/logs')",
        "select * from query('select * from enable_' || 'logging()')",
        "select * from json_execute_serialized_sql(json_serialize_sql('select 1'))",
        "create persistent secret s (type s3, key_id 'a', secret 'b')",
        "checkpoint",
        "force checkpoint",
        "vacuum",
        "create table marts.x (a int)",
        "create temp table x as select 1",
        "insert into marts.runs values ('x', 1)",
        "update marts.runs set models = 0",
        "delete from marts.runs",
        "drop table marts.runs",
        "alter table marts.runs add column y int",
        "comment on table marts.runs is 'changed'",
        "detach warehouse",
        "begin; delete from marts.runs; commit",
        f"prepare p as copy (select 1) to '{root}/prepared.csv'; execute p",
        f"explain analyze copy (select 1) to '{root}/explained.csv'",
        f"explain analyze select * from read_text('{secret}')",
        "from read_text('/proc/self/environ')",
        f"with t as (select * from read_csv('{secret}')) select * from t",
        f"select (select content from read_text('{secret}')) as c",
        "attach 'md:' as cloud",
        "create secret s (type s3, key_id 'a', secret 'b')",
        "call checkpoint()",
        "call force_checkpoint()",
        "select * from checkpoint()",
        f"pragma import_database('{root}')",
        "pragma enable_checkpoint_on_shutdown",
        "pragma disable_optimizer",
        "pragma threads = 1",
        "set memory_limit = '1TB'",
        f".import {secret} marts.runs",
        f".output {root}/out.txt",
        ".shell touch pwned",
    ]


def test_every_escape_route_is_refused_and_no_file_changes(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runner = CliRunner()
    routes = _routes(site)
    before = _tree(site)
    for statement in routes:
        result = runner.invoke(app, ["sql", statement])
        assert result.exit_code == 2, (statement, result.output)
        assert result.output.startswith("capplan: error: ") and result.output.count("\n") == 1, (statement, result.output)
        assert SECRET_LINE not in result.output and "root:x:" not in result.output, statement
        assert _tree(site) == before, f"{statement!r} changed a file"
    assert len(routes) >= 70


def test_reads_still_work_and_leave_the_file_untouched(site: Path) -> None:
    runner = CliRunner()
    before = _tree(site)
    for statement in (
        "select * from marts.runs",
        "describe marts.runs",
        "show all tables",
        "summarize marts.runs",
        "pragma version",
        "explain select * from marts.runs",
        "select * from duckdb_columns() where schema_name = 'marts'",
        "select count(*) from range(3000000) t(i) group by i % 7 order by 1",
        "select 1; select 2",
    ):
        result = runner.invoke(app, ["sql", statement])
        assert result.exit_code == 0, (statement, result.output)
    assert _tree(site) == before


def test_report_and_export_readers_share_the_locked_connection(site: Path) -> None:
    """`capplan report` and `export` open the warehouse through Warehouse.connect_read_only."""
    con = Warehouse(site / "var" / "warehouse.duckdb").connect_read_only()
    try:
        settings = dict(
            con.execute(
                "select name, value from duckdb_settings() where name in "
                "('enable_external_access', 'lock_configuration', 'autoinstall_known_extensions', "
                "'autoload_known_extensions', 'allow_community_extensions', 'temp_directory')"
            ).fetchall()
        )
        assert settings == {
            "enable_external_access": "false",
            "lock_configuration": "true",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
            "allow_community_extensions": "false",
            "temp_directory": "",
        }
        for statement in (f"copy (select 1) to '{site}/x.csv'", "set enable_external_access = true"):
            with pytest.raises(duckdb.Error):
                con.execute(statement)
    finally:
        con.close()
    assert not (site / "x.csv").exists()


def test_reader_statements_names_what_it_refuses() -> None:
    with pytest.raises(ReadOnlyViolation, match="COPY statements are not allowed"):
        reader_statements("select 1; copy (select 1) to 'x.csv'")
    with pytest.raises(ReadOnlyViolation, match=r"enable_logging\(\) is not allowed"):
        reader_statements('select * from system.main."Enable_Logging" /* hidden */ ()')
    assert reader_statements("select query from t") == ["select query from t"]  # a column, not the function


def test_connect_reader_opens_a_file_it_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    duckdb.connect(str(path)).close()
    con = connect_reader(path)
    try:
        with pytest.raises(duckdb.Error):
            con.execute("create table t (a int)")
    finally:
        con.close()
