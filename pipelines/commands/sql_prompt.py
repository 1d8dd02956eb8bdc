"""`capplan sql`'s interactive prompt: the DuckDB CLI's habits over the read-only warehouse.

Started by `capplan sql` without SQL on a terminal, or by `capplan sql --interactive` (stdin piped,
as the tests drive it). A statement may span lines and ends with `;`; each one goes through the
same guards as a one-shot query: `reader_statements` refuses what is not a read, the connection is
the read-only, locked reader with its memory limit, and `run_guarded` applies the time limit and
turns Ctrl-C into a cancelled query. An error is one line and the prompt goes on; Ctrl-C while
typing drops the statement, Ctrl-D or `.quit` leaves.

Dot commands, at the start of a statement: `.tables` (every relation with the first line of its
comment, marts first), `.schema NAME` / `\\d NAME` (its columns, types and comments), `.format FMT`,
`.help`. On a terminal, readline gives line editing and a history kept in CAPPLAN_SQL_HISTORY
(default ~/.capplan_sql_history).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import typer

from pipelines.commands import sql as sql_cmd

PROMPT = "capplan> "
CONTINUATION = "     ..> "
HISTORY_ENV = "CAPPLAN_SQL_HISTORY"
HISTORY_LINES = 1000
HELP = """\
SQL statements end with ';' and may span lines (read-only: SELECT, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN).
.tables            every relation with its description (marts first)
.schema NAME       a relation's columns, types and comments (also \\d NAME)
.format FMT        output: table, line, csv, json, markdown
.help              this text
.quit              leave (also .exit, \\q, Ctrl-D); Ctrl-C cancels a running query or the statement typed
"""
TABLES_SQL = """
select relation, kind, description from (
    select schema_name as s, schema_name || '.' || table_name as relation, 'table' as kind, comment
    from duckdb_tables() where database_name = current_database()
    union all
    select schema_name, schema_name || '.' || view_name, 'view', comment
    from duckdb_views() where database_name = current_database() and not internal
) cross join lateral (select coalesce(split_part(trim(comment), chr(10), 1), '') as description)
order by case s when 'marts' then 0 when 'staging' then 1 when 'raw' then 2 else 3 end, relation
"""
TABLES_COLUMNS = ["relation", "kind", "description"]


@dataclass
class SqlPrompt:
    """One interactive session on an open read-only connection `con`; `run()` returns the exit code."""

    con: Any
    fmt: str
    max_rows: int
    timeout_s: float
    memory: str
    stdin: TextIO
    tty: bool

    def run(self) -> int:
        """Read statements until end of input or `.quit`; every error is one line and the prompt goes on."""
        if self.tty:
            typer.echo("capplan sql: the published warehouse, read-only. End statements with ';'; .help for more.")
        history = _history_file() if self.tty else None
        buffer: list[str] = []
        while True:
            try:
                line = self._read(CONTINUATION if buffer else PROMPT)
            except KeyboardInterrupt:  # Ctrl-C while typing: drop the statement, keep the prompt
                typer.echo("")
                buffer = []
                continue
            if line is None:
                if buffer:
                    self._submit("\n".join(buffer))
                break
            stripped = line.strip()
            if not buffer and (stripped.startswith(".") or stripped.startswith("\\")):
                if self._dot(stripped) is _QUIT:
                    break
                continue
            if not buffer and not stripped:
                continue
            buffer.append(line)
            if stripped.endswith(";"):
                self._submit("\n".join(buffer))
                buffer = []
        if history is not None:
            _save_history(history)
        return 0

    def _read(self, prompt: str) -> str | None:
        """One line, or None at end of input; `input()` on a terminal (readline's editing and history)."""
        if self.tty:
            try:
                return input(prompt)
            except EOFError:
                typer.echo("")
                return None
        line = self.stdin.readline()
        return None if line == "" else line.rstrip("\n")

    def _guarded(self, work: Callable[[], None]) -> None:
        """Run `work`; a user error (one line already printed by `fail`) leaves the prompt running."""
        with contextlib.suppress(typer.Exit):
            work()

    def _submit(self, text: str) -> None:
        self._guarded(lambda: self._statements(text))

    def _statements(self, text: str) -> None:
        """Each statement of `text` under the one-shot command's guards, its result printed."""
        import duckdb

        from warehouse.sql import ReadOnlyViolation, reader_statements

        try:
            statements = reader_statements(text)
        except ReadOnlyViolation as exc:
            sql_cmd.fail(str(exc))
        except duckdb.Error as exc:
            sql_cmd.fail(sql_cmd.duckdb_error_line(exc))
        self._show(lambda stop: sql_cmd._execute(self.con, None, statements, stop))

    def _show(self, work: Callable[[Any], tuple[list[sql_cmd.Result], str | None]], label: str = "") -> None:
        """`work(stop)` under the time limit and Ctrl-C, its result sets printed (`label`: its note's prefix)."""
        import duckdb

        try:
            results, note = sql_cmd.run_guarded(self.con, work, self.timeout_s)
        except duckdb.OutOfMemoryException as exc:
            sql_cmd.fail(f"{sql_cmd.duckdb_error_line(exc)} (the memory limit is {self.memory})")
        except duckdb.Error as exc:
            sql_cmd.fail(sql_cmd.duckdb_error_line(exc))
        if note:
            typer.echo(f"{label}: {' '.join(note.split())}")
        for names, rows in results:
            sql_cmd.write_result(names, rows, self.fmt, self.max_rows)
        sys.stdout.flush()

    def _dot(self, command: str) -> object:
        """A dot command; `_QUIT` to leave."""
        word, _, rest = command.partition(" ")
        rest = rest.strip().rstrip(";").strip()
        if word in (".quit", ".exit", "\\q"):
            return _QUIT
        if word == ".help":
            typer.echo(HELP, nl=False)
        elif word == ".tables" or (word == "\\d" and not rest):
            self._guarded(lambda: self._show(lambda stop: ([(TABLES_COLUMNS, self._tables())], None)))
        elif word in (".schema", "\\d"):
            if not rest:
                typer.echo("capplan: error: .schema takes a relation, e.g. .schema marts.capacity_grid", err=True)
            else:
                self._guarded(lambda: self._show(lambda stop: sql_cmd._execute(self.con, rest, [], stop), rest))
        elif word in (".format", ".mode") and rest in sql_cmd.FORMATS:
            self.fmt = rest
        elif word in (".format", ".mode"):
            typer.echo(f"capplan: error: .format takes one of {', '.join(sql_cmd.FORMATS)}", err=True)
        else:
            typer.echo(f"capplan: error: unknown command {word} (.help lists them)", err=True)
        return None

    def _tables(self) -> list[tuple[Any, ...]]:
        return list(self.con.execute(TABLES_SQL).fetchall())


_QUIT = object()


def _history_file() -> Path | None:
    """Load readline's history (None where readline is missing: the prompt works without it)."""
    try:
        import readline
    except ImportError:
        return None
    path = Path(os.environ.get(HISTORY_ENV) or Path.home() / ".capplan_sql_history").expanduser()
    with contextlib.suppress(OSError):
        readline.read_history_file(path)
    readline.set_history_length(HISTORY_LINES)
    return path


def _save_history(path: Path) -> None:
    import readline

    with contextlib.suppress(OSError):
        readline.write_history_file(path)
