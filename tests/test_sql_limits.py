"""`capplan sql` bounded (issue 25, item 5 and the degraded console), on real DuckDB files.

- `IMPORT DATABASE '<dir>'` used to be expanded by the statement splitter on an unrestricted
  connection: `<dir>/schema.sql` was read, its first token leaked in the error and a SELECT-only
  one ran. Now IMPORT/EXPORT/ATTACH/COPY/INSTALL/LOAD... are refused by their first word before
  anything is parsed, and the splitter runs on a locked-down connection anyway.
- A runaway query stops at the time limit, Ctrl-C cancels it (exit code 130), and a query that
  needs more memory than the limit fails with one line instead of taking the machine's memory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from pipelines.cli import app
from warehouse.sql import READER_CONFIG, ReadOnlyViolation, reader_statements

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RUNAWAY = "select sum(a.range * b.range) from range(100000000) a, range(100000000) b"  # hours of work
HUNGRY = (  # a window of lists over ten million rows, then a sort: far more than 50MB
    "select count(*) from (select range, list(range) over (order by range rows between 1000 preceding "
    "and current row) l from range(10000000) order by random())"
)
LEAK = "PLANTEDSECRETTOKEN"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    con.execute("create schema raw; create schema staging; create schema marts")
    con.execute("create table marts.runs as select 'r1' as run_id, 3 as models")
    con.close()
    monkeypatch.setenv("CAPPLAN_WAREHOUSE", str(path))
    monkeypatch.delenv("CAPPLAN_SQL_TIMEOUT_S", raising=False)
    monkeypatch.delenv("CAPPLAN_SQL_MEMORY_LIMIT", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _one_error_line(result: object) -> str:
    stderr = getattr(result, "stderr", "")
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("schema_sql", [f"{LEAK} foo bar;", "select 42 as planted;", "create table t (a int);"])
@pytest.mark.parametrize(
    "template",
    [
        "IMPORT DATABASE '{dir}'",
        "import database '{dir}'",
        "  /* hidden */ import database '{dir}'",
        "select 1; import database '{dir}'",
        "explain import database '{dir}'",
        "prepare p as import database '{dir}'",
        "pragma import_database('{dir}')",
    ],
)
def test_import_database_is_refused_and_nothing_leaks(site: Path, schema_sql: str, template: str) -> None:
    planted = site / "planted"
    planted.mkdir()
    (planted / "schema.sql").write_text(schema_sql, encoding="utf-8")
    (planted / "load.sql").write_text(f"select '{LEAK}';", encoding="utf-8")
    result = CliRunner().invoke(app, ["sql", "--format", "csv", template.format(dir=planted)])
    assert result.exit_code == 2, result.output
    line = _one_error_line(result)
    assert "read-only" in line and "not allowed" in line, line
    assert LEAK not in result.output and "planted" not in result.stdout and "42" not in result.stdout


def test_the_splitter_itself_reads_no_file_on_a_locked_connection(tmp_path: Path) -> None:
    """Even past the first-word refusal, DuckDB's own splitter runs where file access is off."""
    (tmp_path / "schema.sql").write_text(f"{LEAK};", encoding="utf-8")
    con = duckdb.connect(":memory:", config=dict(READER_CONFIG))
    try:
        with pytest.raises(duckdb.Error) as caught:
            con.extract_statements(f"import database '{tmp_path}'")
        assert LEAK not in str(caught.value)
    finally:
        con.close()


REFUSED = ["import", "export", "attach", "detach", "copy", "install", "load", "checkpoint", "vacuum"]
HEADS = ["", " ", "\n\t", "/* c */ ", "-- c\n", "(", "( ", "explain ", "EXPLAIN ANALYZE ", "force ", "prepare p as "]


@settings(max_examples=200, deadline=None)
@given(
    word=st.sampled_from(REFUSED),
    upper=st.lists(st.booleans(), min_size=10, max_size=10),
    head=st.sampled_from(HEADS),
    before=st.sampled_from(["", "select 1; ", "select 'import'; ", "select 1;;\n"]),
    tail=st.sampled_from([" database 'x'", " 'x'", " httpfs", " x from 'y'", " (select 1) to 'z'", ""]),
)
def test_generated_file_statements_are_refused_by_name(
    word: str, upper: list[bool], head: str, before: str, tail: str
) -> None:
    cased = "".join(c.upper() if u else c for c, u in zip(word, upper, strict=False))
    with pytest.raises(ReadOnlyViolation, match=rf"{word.upper()} statements are not allowed"):
        reader_statements(f"{before}{head}{cased}{tail}")


@settings(max_examples=100, deadline=None)
@given(
    word=st.sampled_from(REFUSED),
    shape=st.sampled_from(
        [
            "select 1 as {w}",
            'select "{w}" from (select 1 as "{w}")',
            "select count({w}) from (select 1 as {w})",
            "select '{w} database x'",
            "select 1 -- {w} database 'x'",
        ]
    ),
)
def test_the_same_words_elsewhere_in_a_select_are_not_refused(word: str, shape: str) -> None:
    text = shape.format(w=word)
    try:
        statements = reader_statements(text)
    except duckdb.ParserException:
        return  # a reserved word DuckDB does not take as a name: not our refusal
    assert statements == [text]


def test_a_runaway_query_stops_at_the_time_limit(site: Path) -> None:
    start = time.monotonic()
    result = CliRunner().invoke(app, ["sql", "--timeout", "1", RUNAWAY])
    elapsed = time.monotonic() - start
    assert result.exit_code == 2, result.output
    assert "longer than the time limit of 1 s" in _one_error_line(result)
    assert elapsed < 15, elapsed


def test_the_time_limit_comes_from_the_environment(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPPLAN_SQL_TIMEOUT_S", "0.5")
    result = CliRunner().invoke(app, ["sql", RUNAWAY])
    assert result.exit_code == 2 and "time limit of 0.5 s" in _one_error_line(result)
    monkeypatch.setenv("CAPPLAN_SQL_TIMEOUT_S", "soon")
    result = CliRunner().invoke(app, ["sql", "select 1"])
    assert result.exit_code == 2 and "CAPPLAN_SQL_TIMEOUT_S must be a number" in _one_error_line(result)


def test_a_query_over_the_memory_limit_fails_in_one_line(site: Path) -> None:
    result = CliRunner().invoke(app, ["sql", "--memory-limit", "50MB", HUNGRY])
    assert result.exit_code == 2, result.output
    line = _one_error_line(result)
    assert "Out of Memory" in line and "the memory limit is 50MB" in line, line


def test_the_memory_limit_is_the_connections_and_is_validated(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPPLAN_SQL_MEMORY_LIMIT", "300MB")
    result = CliRunner().invoke(app, ["sql", "--format", "csv", "select current_setting('memory_limit') as m"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1] in ("286.1 MiB", "300.0 MB"), result.stdout
    result = CliRunner().invoke(app, ["sql", "--memory-limit", "lots", "select 1"])
    assert result.exit_code == 2 and "must be a size" in _one_error_line(result)
    result = CliRunner().invoke(app, ["sql", "set memory_limit = '1TB'"])
    assert result.exit_code == 2, "the limit cannot be raised from inside"


def test_ctrl_c_cancels_the_running_query(site: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pipelines.cli import main; main()", "sql", "--timeout", "0", RUNAWAY],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        time.sleep(2.5)  # started, and deep in the query
        assert process.poll() is None, process.communicate()
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 130, err
    assert time.monotonic() - sent < 15
    assert [line for line in err.splitlines() if line.strip()] == ["capplan: error: interrupted: the query was cancelled"]
