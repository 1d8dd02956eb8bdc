"""`capplan sql`'s interactive prompt, driven through a pipe (`--interactive`): table discovery with
each relation's own comment, `.schema` / `\\d`, statements over several lines ending in `;`, and the
one-shot command's guards applied to each statement, the prompt going on after each error. The
oracle is a warehouse this file builds by hand (its tables and comments), DuckDB's own answers and
the limits the options set."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from tests.test_sql_limits import HUNGRY as LIMITS_HUNGRY
from tests.test_sql_limits import RUNAWAY as LIMITS_RUNAWAY

PROJECT_ROOT = Path(__file__).resolve().parent.parent
HUNGRY = LIMITS_HUNGRY + ";"  # more than 50MB
RUNAWAY = LIMITS_RUNAWAY + ";"  # hours of work
WAREHOUSE_SQL = """
create schema raw; create schema marts;
create table raw.inputs as select 1 as x;
create table marts.gpus as select * from (values ('h100-sxm-80gb', 80), ('l4-24gb', 24)) t(gpu, gb);
comment on table marts.gpus is 'One row per GPU SKU.
A second line the listing leaves out.';
comment on column marts.gpus.gb is 'device memory, GB as marketed';
create view marts.big as select gpu from marts.gpus where gb > 40;
comment on view marts.big is 'GPUs over 40 GB.';
"""


@pytest.fixture
def warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(WAREHOUSE_SQL)
    for name in ("CAPPLAN_SQL_TIMEOUT_S", "CAPPLAN_SQL_MEMORY_LIMIT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CAPPLAN_WAREHOUSE", str(path))
    return path


def prompt(lines: str, *options: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["sql", "--interactive", *options], input=lines)
    return result.exit_code, result.stdout, result.stderr


def test_tables_lists_every_relation_with_the_first_line_of_its_comment_marts_first(warehouse: Path) -> None:
    code, out, err = prompt(".tables\n", "--format", "csv")
    assert code == 0 and err == "", err
    assert out.splitlines() == [
        "relation,kind,description",
        "marts.big,view,GPUs over 40 GB.",
        "marts.gpus,table,One row per GPU SKU.",
        "raw.inputs,table,",
    ]
    assert prompt("\\d\n", "--format", "csv")[1] == out


def test_schema_and_backslash_d_show_the_columns_with_their_comments(warehouse: Path) -> None:
    code, out, err = prompt(".schema marts.gpus\n\\d gpus;\n", "--format", "csv")
    assert code == 0 and err == "", err
    block = ["column,type,comment", "gpu,VARCHAR,", 'gb,INTEGER,"device memory, GB as marketed"']
    assert out.splitlines() == block + block
    code, _out, err = prompt(".schema marts.nothing\n.schema\n.bogus\n")
    assert code == 0
    lines = err.splitlines()
    assert len(lines) == 3 and all(line.startswith("capplan: error: ") for line in lines), err
    assert "no relation 'marts.nothing'" in lines[0] and ".schema takes a relation" in lines[1]
    assert "unknown command .bogus" in lines[2]


def test_a_statement_spans_lines_until_its_semicolon_and_several_run_in_order(warehouse: Path) -> None:
    code, out, err = prompt("select gpu\n  from marts.gpus\n  order by gb;\nselect 1 as a; select 2 as b;\n", "-x")
    assert code == 0 and err == "", err
    assert out == "gpu = l4-24gb\n\ngpu = h100-sxm-80gb\n2 rows\na = 1\n1 row\nb = 2\n1 row\n"


def test_end_of_input_runs_the_last_statement_without_its_semicolon(warehouse: Path) -> None:
    code, out, _err = prompt("select count(*) as n from marts.gpus", "--format", "csv")
    assert code == 0 and out.splitlines() == ["n", "2"]


def test_each_error_is_one_line_and_the_prompt_goes_on(warehouse: Path) -> None:
    script = (
        "delete from marts.gpus;\n"
        "copy marts.gpus to 'out.csv';\n"
        "select nope from marts.gpus;\n"
        "set memory_limit = '1TB';\n"
        ".format xml\n"
        "select count(*) as n from marts.gpus;\n"
    )
    code, out, err = prompt(script, "--format", "csv")
    assert code == 0
    lines = err.splitlines()
    assert len(lines) == 5 and all(line.startswith("capplan: error: ") for line in lines), err
    assert "DELETE statements are not allowed" in lines[0]
    assert "copy" in lines[1].lower()
    assert 'Candidate bindings: "gpu"' in lines[2] or '"gpu"' in lines[2]
    assert ".format takes one of" in lines[4]
    assert out.splitlines() == ["n", "2"]
    assert duckdb.connect(str(warehouse), read_only=True).execute("select count(*) from marts.gpus").fetchone() == (2,)
    assert not Path("out.csv").exists()


def test_the_time_and_memory_limits_apply_to_each_statement(warehouse: Path) -> None:
    start = time.monotonic()
    code, out, err = prompt(RUNAWAY + "\nselect 42 as answer;\n", "--timeout", "1", "--format", "csv")
    assert time.monotonic() - start < 15
    assert code == 0 and out.splitlines() == ["answer", "42"]
    assert [line for line in err.splitlines() if line] == [
        "capplan: error: the query ran longer than the time limit of 1 s and was cancelled "
        "(--timeout SECONDS, or CAPPLAN_SQL_TIMEOUT_S; 0: no limit)"
    ]
    script = HUNGRY + "\nselect current_setting('memory_limit') as m;\n"
    code, out, err = prompt(script, "--memory-limit", "50MB", "--format", "csv")
    assert code == 0 and out.splitlines()[1] in ("47.6 MiB", "50.0 MB"), out
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1 and "Out of Memory" in lines[0] and "the memory limit is 50MB" in lines[0], err


def test_interactive_takes_no_sql_of_its_own(warehouse: Path) -> None:
    result = CliRunner().invoke(app, ["sql", "--interactive", "-c", "select 1"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "capplan: error: --interactive reads the SQL from the prompt: give no query, -c, --file or --describe with it"
    ]


def test_ctrl_c_cancels_the_running_query_and_the_prompt_goes_on(warehouse: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from pipelines.cli import main; main()",
            "sql",
            "-i",
            "--timeout",
            "0",
            "--format",
            "csv",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdin is not None
    try:
        process.stdin.write(RUNAWAY + "\n")
        process.stdin.flush()
        time.sleep(2.5)  # started, and deep in the query
        assert process.poll() is None
        process.send_signal(signal.SIGINT)
        out, err = process.communicate("select 42 as answer;\n", timeout=30)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, err
    assert [line for line in err.splitlines() if line.strip()] == [
        "capplan: error: interrupted: the query was cancelled"
    ]
    assert out.splitlines() == ["answer", "42"]


def test_on_a_terminal_it_is_the_prompt_by_default_and_keeps_a_history(warehouse: Path, tmp_path: Path) -> None:
    import pty

    history = tmp_path / "history"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "CAPPLAN_SQL_HISTORY": str(history), "TERM": "dumb"}
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", "from pipelines.cli import main; main()", "sql", "--format", "csv"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=env,
        close_fds=True,
    )
    os.close(terminal)
    try:
        os.write(controller, b"select 6 * 7 as answer;\n.quit\n")
        output = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not select.select([controller], [], [], 0.5)[0]:
                if process.poll() is not None:
                    break
                continue
            try:
                output += os.read(controller, 4096)
            except OSError:  # the terminal closed: the process is gone
                break
        process.wait(timeout=10)
    finally:
        process.kill()
        os.close(controller)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    assert "capplan> " in text and "answer\r\n42" in text, text
    assert "select 6 * 7 as answer;" in history.read_text(encoding="utf-8").splitlines()
