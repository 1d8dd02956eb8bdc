"""`capplan sql` behaves like the DuckDB CLI it wraps: SQL from an argument, -c, a file or stdin;
tables that stay readable when wide; vertical, CSV, JSON and Markdown output; DuckDB's hints in
the one-line error; `--describe` for a relation's documented columns; a fast start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.commands import sql as sql_cmd

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    con.execute("create schema marts")
    con.execute(
        "create table marts.gpus as select * from (values ('h100-sxm-80gb', 80, 2.5), ('l4-24gb', 24, 0.7)) "
        "t(gpu, memory_gb, price)"
    )
    con.execute("comment on table marts.gpus is 'one row per GPU SKU'")
    con.execute("comment on column marts.gpus.memory_gb is 'device memory, GB as marketed'")
    con.execute("create view marts.wide as select " + ", ".join(f"'value number {i}' as column_{i}" for i in range(12)))
    con.close()
    monkeypatch.setenv("CAPPLAN_WAREHOUSE", str(path))
    return path


def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["sql", *args], input=stdin)
    return result.exit_code, result.output


def test_sql_from_stdin_c_file_and_a_sql_path(warehouse: Path, tmp_path: Path) -> None:
    query = "select gpu from marts.gpus order by gpu"
    (tmp_path / "q.sql").write_text(query, encoding="utf-8")
    for args, stdin in (
        ((), query),
        (("-c", query), None),
        (("--command", query), None),
        ((query,), None),
        (("--file", str(tmp_path / "q.sql")), None),
        ((str(tmp_path / "q.sql"),), None),
        (("--file", "-"), query),
    ):
        code, output = run("--format", "csv", *args, stdin=stdin)
        assert code == 0, (args, output)
        assert output.splitlines() == ["gpu", "h100-sxm-80gb", "l4-24gb"], args
    code, output = run("-c", "select 1", "select 2")
    assert code == 2 and output.count("\n") == 1


def test_every_format(warehouse: Path) -> None:
    query = "select gpu, memory_gb from marts.gpus order by gpu"
    code, table = run(query)
    assert code == 0 and "│ h100-sxm-80gb │" in table and "2 rows" in table
    code, line = run("-x", query)
    assert code == 0 and "      gpu = h100-sxm-80gb\nmemory_gb = 80\n\n" in line
    assert run("--format", "line", query)[1] == line
    code, markdown = run("--format", "markdown", query)
    assert markdown.splitlines()[:3] == ["| gpu | memory_gb |", "|---|---:|", "| h100-sxm-80gb | 80 |"]
    code, as_json = run("--format", "json", query)
    assert json.loads(as_json) == [{"gpu": "h100-sxm-80gb", "memory_gb": 80}, {"gpu": "l4-24gb", "memory_gb": 24}]
    code, output = run("--format", "xml", query)
    assert code == 2 and "markdown" in output


def test_wide_results_never_collapse_to_one_character_columns(
    warehouse: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    names = [f"column_{i}" for i in range(12)]
    rows = [tuple(f"value number {i}" for i in range(12))]
    monkeypatch.setattr(sql_cmd, "_terminal_chars", lambda: 80)
    sql_cmd.write_result(names, rows, "table", 200)
    out = capsys.readouterr().out
    assert "column_0 = value number 0" in out, "too wide for the terminal: vertical"
    sql_cmd.write_result(["id", "comment"], [(1, "a long comment " * 12)], "table", 200)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80 and "a long comment" in out, "wrapped to fit"
    monkeypatch.setattr(sql_cmd, "_terminal_chars", lambda: None)  # piped: the table overflows, uncut
    sql_cmd.write_result(names, rows, "table", 200)
    out = capsys.readouterr().out
    assert "│ value number 11 │" in out and len(out.splitlines()[0]) > 80


def test_errors_keep_duckdbs_hint_on_one_line(warehouse: Path) -> None:
    code, output = run("select * from marts.gpu")
    assert code == 2 and output.count("\n") == 1
    assert output.startswith("capplan: error: Catalog Error:") and 'Did you mean "gpus"' in output
    code, output = run("select gpuz from marts.gpus")
    assert code == 2 and output.count("\n") == 1 and 'Candidate bindings: "gpu"' in output


def test_describe_shows_the_documented_columns(warehouse: Path) -> None:
    code, output = run("--describe", "marts.gpus")
    assert code == 0, output
    assert "one row per GPU SKU" in output and "device memory, GB as marketed" in output and "memory_gb" in output
    code, as_csv = run("--describe", "gpus", "--format", "csv")
    assert code == 0
    assert as_csv.splitlines()[:3] == ["column,type,comment", "gpu,VARCHAR,", 'memory_gb,INTEGER,"device memory, GB as marketed"']
    code, output = run("--describe", "marts.nope")
    assert code == 2 and output.count("\n") == 1 and "no relation" in output


def test_sql_starts_without_the_rest_of_the_cli(warehouse: Path) -> None:
    """The console script's `sql` path imports neither SQLAlchemy, Dagster nor Polars."""
    code = (
        "import sys; from pipelines.cli import main; sys.argv = ['capplan', 'sql', '-c', 'select 1'];\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'dagster', 'polars', 'rich'})\n"
        "print('heavy:', heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert "heavy: []" in done.stdout, done.stdout + done.stderr
