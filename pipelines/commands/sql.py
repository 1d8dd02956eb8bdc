"""`capplan sql`: query the published warehouse, read-only, with the DuckDB CLI's habits.

The SQL comes from an argument (`capplan sql "select ..."`, or a path to a `.sql` file), `-c SQL`,
`--file PATH` (`-` for stdin) or stdin (`echo "select 1" | capplan sql`). Every statement's result
is printed as a table (wide results wrap their widest column, or turn vertical when even that does
not fit the terminal; piped output is never cut), vertically (`--vertical` / `--format line`), or as
CSV, JSON or Markdown. `--describe RELATION` lists a relation's columns with their comments.

Limits: a query runs at most `--timeout` seconds (`CAPPLAN_SQL_TIMEOUT_S`, default 60; 0: none)
and within DuckDB's `--memory-limit` (`CAPPLAN_SQL_MEMORY_LIMIT`, default 2GB; nothing spills to
disk, so a query that needs more fails with DuckDB's out-of-memory error). Ctrl-C cancels the
running query (exit code 130). Both go through DuckDB's `interrupt()` (`run_guarded`).

The warehouse is opened by `warehouse.sql.connect_reader`: read-only, and unable to reach any other
file, the network or an extension, so no statement typed here can change a byte on disk. Errors
are one line on stderr (DuckDB's "Did you mean ..." hint kept) and exit code 2.

Without SQL on a terminal (or with `--interactive`, stdin piped, as the tests drive it) it is a
prompt (`SqlPrompt`): a statement may span lines and ends with `;`, and each one goes through the
same guards as a one-shot query (`reader_statements`, the locked read-only connection with its
memory limit, `run_guarded`'s time limit and Ctrl-C, which cancels the query and keeps the prompt).
An error is one line and the prompt goes on; Ctrl-C while typing drops the statement, Ctrl-D or
`.quit` leaves. Dot commands at the start of a statement: `.tables` (every relation with the first
line of its comment, marts first), `.schema NAME` / `\\d NAME`, `.format FMT`, `.help`. On a terminal
readline gives line editing and a history kept in CAPPLAN_SQL_HISTORY (default ~/.capplan_sql_history).

Start-up matters (one process per query): this module imports only typer at load time, and
`capplan sql` skips building the rest of the CLI (`pipelines.cli.main`).
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import decimal
import json
import math
import os
import re
import shutil
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn, TextIO, TypeVar, cast

import typer

from pipelines.commands.common import APP_SETTINGS, OneLineCommand

FORMATS = ("table", "line", "csv", "json", "markdown")
TIMEOUT_ENV = "CAPPLAN_SQL_TIMEOUT_S"
MEMORY_ENV = "CAPPLAN_SQL_MEMORY_LIMIT"
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MEMORY_LIMIT = "2GB"
WATCH_S = 0.05  # how often the main thread looks at the clock (and lets Ctrl-C in)
CANCEL_WAIT_S = 10.0  # how long a cancelled query may take to notice the interrupt
T = TypeVar("T")
MIN_WRAPPED_CHARS = 24  # a wrapped column narrower than this reads worse than vertical output


def fail(message: str, code: int = 2) -> NoReturn:
    """A user error: one line on stderr, exit code 2 (130: interrupted)."""
    typer.echo(f"capplan: error: {' '.join(message.split())}", err=True)
    raise typer.Exit(code)


def duckdb_error_line(exc: BaseException) -> str:
    """DuckDB's message as one line: its first paragraph, so "Did you mean ..." and "Candidate
    bindings" hints stay, the `LINE 1: ...` caret drawing does not."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    return " ".join(text.split("\n\n", 1)[0].split())


def memory_error_line(exc: BaseException, memory: str) -> str:
    """DuckDB's out-of-memory error as one line naming the limit and how to raise it (its advice to
    spill to disk left out: nothing spills here, by design)."""
    reason = duckdb_error_line(exc).split(" Database is launched in in-memory mode")[0]
    return f"{reason} (the memory limit is {memory}: --memory-limit SIZE, or {MEMORY_ENV})"


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.date | dt.datetime | dt.time | dt.timedelta | uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".") if math.isfinite(value) else str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list | dict):
        return json.dumps(_json_value(value))
    return " ".join(str(value).splitlines())


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | decimal.Decimal) and not isinstance(value, bool)


def _terminal_chars() -> int | None:
    """The terminal's width when stdout is one; None when piped (output is never cut then)."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size((120, 24)).columns


def _table_lines(names: Sequence[str], cells: list[list[str]], right: list[bool], widths: list[int]) -> list[str]:
    def line(left: str, mid: str, end: str) -> str:
        return left + mid.join("─" * (w + 2) for w in widths) + end

    def row(values: Sequence[str], align: Sequence[bool]) -> list[str]:
        wrapped = [textwrap.wrap(v, w) or [""] for v, w in zip(values, widths, strict=True)]
        height = max(len(parts) for parts in wrapped)
        out = []
        for i in range(height):
            parts = []
            for parts_of, w, r in zip(wrapped, widths, align, strict=True):
                text = parts_of[i] if i < len(parts_of) else ""
                parts.append(text.rjust(w) if r else text.ljust(w))
            out.append("│ " + " │ ".join(parts) + " │")
        return out

    lines = [line("┌", "┬", "┐"), *row(names, [False] * len(names)), line("├", "┼", "┤")]
    for values in cells:
        lines.extend(row(values, right))
    lines.append(line("└", "┴", "┘"))
    return lines


def _fit(widths: list[int], names: Sequence[str], limit: int | None) -> list[int] | None:
    """Column widths that fit `limit` characters by wrapping the widest column, or None."""
    total = sum(widths) + 3 * len(widths) + 1
    if limit is None or total <= limit:
        return widths
    widest = max(range(len(widths)), key=lambda i: widths[i])
    narrowed = widths[widest] - (total - limit)
    if narrowed < max(MIN_WRAPPED_CHARS, len(names[widest])):
        return None
    return [narrowed if i == widest else w for i, w in enumerate(widths)]


def _vertical(names: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> str:
    """DuckDB's `.mode line`: one `name = value` line per column, a blank line between rows."""
    width = max((len(n) for n in names), default=0)
    blocks = ["\n".join(f"{n.rjust(width)} = {_cell(v)}" for n, v in zip(names, row, strict=True)) for row in rows]
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def _markdown(names: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> str:
    def escape(text: str) -> str:
        return text.replace("|", "\\|")

    right = [bool(rows) and all(_is_number(r[i]) or r[i] is None for r in rows) for i in range(len(names))]
    lines = ["| " + " | ".join(escape(n) for n in names) + " |"]
    lines.append("|" + "|".join("---:" if r else "---" for r in right) + "|")
    lines.extend("| " + " | ".join(escape(_cell(v)) for v in row) + " |" for row in rows)
    return "\n".join(lines) + "\n"


def write_result(names: list[str], rows: list[tuple[Any, ...]], fmt: str, max_rows: int) -> None:
    """Print one result set to stdout in `fmt` (`max_rows` bounds the table and line formats)."""
    out = sys.stdout
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        writer.writerows(rows)
        return
    if fmt == "json":
        records = [{name: _json_value(v) for name, v in zip(names, row, strict=True)} for row in rows]
        out.write(json.dumps(records, indent=2) + "\n")
        return
    if fmt == "markdown":
        out.write(_markdown(names, rows))
        return
    shown = rows[:max_rows]
    hidden = len(rows) - len(shown)
    more = f", {hidden:,} not shown (--max-rows, or --format csv)" if hidden > 0 else ""
    footer = f"{len(rows):,} row{'s' if len(rows) != 1 else ''}{more}\n"
    if fmt == "table":
        cells = [[_cell(v) for v in row] for row in shown]
        right = [bool(shown) and all(_is_number(r[i]) or r[i] is None for r in shown) for i in range(len(names))]
        natural = [max([len(n), *(len(c[i]) for c in cells)]) for i, n in enumerate(names)]
        widths = _fit(natural, names, _terminal_chars())
        if widths is not None:
            out.write("\n".join(_table_lines(names, cells, right, widths)) + "\n" + footer)
            return
    out.write(_vertical(names, shown) + footer)


def _read_sql(query: str | None, command: str | None, file: Path | None) -> str:
    given = [v for v in (query, command, file) if v is not None]
    if len(given) > 1:
        fail("give the SQL once: as an argument, with -c or with --file")
    if file is not None or (query is not None and query.endswith(".sql") and Path(query).is_file()):
        path = file if file is not None else Path(query or "")
        if str(path) == "-":
            return sys.stdin.read()
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
    if query is not None or command is not None:
        return query if query is not None else command or ""
    return sys.stdin.read()


def _relation(name: str) -> tuple[str, str]:
    parts = [p.strip().strip('"') for p in name.split(".")]
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    fail(f"--describe takes a relation such as marts.capacity_grid, got {name!r}")


def _describe(con: Any, name: str) -> tuple[list[str], list[tuple[Any, ...]], str | None]:
    """(column, type, comment) of a relation, and the relation's own comment."""
    schema, table = _relation(name)
    found = con.execute(
        "select schema_name, comment from duckdb_tables() where table_name = $t and ($s = '' or schema_name = $s) "
        "and database_name = current_database() "
        "union all select schema_name, comment from duckdb_views() where view_name = $t "
        "and ($s = '' or schema_name = $s) and database_name = current_database() and not internal "
        "order by schema_name",
        {"t": table, "s": schema},
    ).fetchall()
    if not found:
        fail(f"no relation {name!r} in the warehouse (list them: capplan sql \"show all tables\")")
    if len(found) > 1 and not schema:
        options = ", ".join(f"{s}.{table}" for s, _c in found)
        fail(f"{table!r} is in several schemas ({options}): name one")
    schema, comment = found[0]
    rows = con.execute(
        "select column_name, data_type, comment from duckdb_columns() where schema_name = $s and table_name = $t "
        "and database_name = current_database() order by column_index",
        {"s": schema, "t": table},
    ).fetchall()
    return ["column", "type", "comment"], rows, comment


def sql(
    query: Annotated[
        str | None, typer.Argument(help="SQL to run (read-only), or a path to a .sql file.", show_default=False)
    ] = None,
    command: Annotated[
        str | None, typer.Option("--command", "-c", help="SQL to run (as the DuckDB CLI's -c).", show_default=False)
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="Read the SQL from a file ('-': stdin), e.g. warehouse/queries/*.sql."),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help=f"Output: {', '.join(FORMATS)}.")] = "table",
    vertical: Annotated[
        bool, typer.Option("--vertical", "-x", help="One 'column = value' line per field (same as --format line).")
    ] = False,
    describe: Annotated[
        str | None,
        typer.Option("--describe", "-d", help="List a relation's columns with their comments.", show_default=False),
    ] = None,
    warehouse: Annotated[
        Path | None,
        typer.Option("--warehouse", help="DuckDB file (default: CAPPLAN_WAREHOUSE, else var/warehouse.duckdb)."),
    ] = None,
    max_rows: Annotated[int, typer.Option("--max-rows", help="Rows shown by the table and line formats.")] = 200,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help=f"Cancel the query after this long (default {TIMEOUT_ENV}, else {DEFAULT_TIMEOUT_S:g}; 0: no limit).",
            show_default=False,
        ),
    ] = None,
    memory_limit: Annotated[
        str | None,
        typer.Option(
            "--memory-limit",
            metavar="SIZE",
            help=f"DuckDB's memory limit, e.g. 500MB (default {MEMORY_ENV}, else {DEFAULT_MEMORY_LIMIT}).",
            show_default=False,
        ),
    ] = None,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive",
            "-i",
            help="A prompt (.tables, .schema NAME, statements ending in ';'): the default on a terminal "
            "without SQL; this flag reads the prompt's lines from a pipe too.",
        ),
    ] = False,
) -> None:
    """Run SQL against the published warehouse, read-only (marts.capacity_grid, marts.context_limits...)."""
    if fmt not in FORMATS:
        fail(f"unknown --format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if vertical:
        fmt = "line"
    if max_rows < 1:
        fail(f"--max-rows must be >= 1, got {max_rows}")
    timeout_s, memory = _limits(timeout, memory_limit)
    given = any(v is not None for v in (query, command, file, describe))
    if interactive and given:
        fail("--interactive reads the SQL from the prompt: give no query, -c, --file or --describe with it")
    if interactive or (not given and sys.stdin.isatty()):
        _prompt(warehouse, fmt, max_rows, timeout_s, memory)
    text: str | None = None
    if describe is None or any(v is not None for v in (query, command, file)):
        text = _read_sql(query, command, file)
        if not text.strip():
            fail("empty query")
    statements = checked_statements(text) if text is not None else []
    con = _connect(warehouse, memory)
    try:
        results, note = guarded_results(con, lambda stop: _execute(con, describe, statements, stop), timeout_s, memory)
    finally:
        con.close()
    if note and fmt in ("table", "line"):
        sys.stdout.write(f"{describe}: {' '.join(note.split())}\n")
    for names, rows in results:
        write_result(names, rows, fmt, max_rows)


Result = tuple[list[str], list[tuple[Any, ...]]]


def _prompt(warehouse: Path | None, fmt: str, max_rows: int, timeout_s: float, memory: str) -> NoReturn:
    """The interactive prompt on the published warehouse, until end of input or `.quit`."""
    con = _connect(warehouse, memory)
    try:
        code = SqlPrompt(con, fmt, max_rows, timeout_s, memory, sys.stdin, tty=sys.stdin.isatty()).run()
    finally:
        con.close()
    raise typer.Exit(code)


def checked_statements(text: str) -> list[str]:
    """The statements of `text` a reader may run (`warehouse.sql.reader_statements`); a one-line
    error for a statement that is not a read or SQL that does not parse."""
    import duckdb

    from warehouse.sql import ReadOnlyViolation, reader_statements

    try:
        return reader_statements(text)
    except ReadOnlyViolation as exc:
        fail(str(exc))
    except duckdb.Error as exc:
        fail(duckdb_error_line(exc))


def guarded_results(con: Any, work: Callable[[threading.Event], T], timeout_s: float, memory: str) -> T:
    """`run_guarded(con, work, timeout_s)` with DuckDB's errors as one line: out of memory names the
    limit, a damaged file the recovery command."""
    import duckdb

    from warehouse.publish import RECOVERY_HINT, looks_corrupt

    try:
        return run_guarded(con, work, timeout_s)
    except duckdb.OutOfMemoryException as exc:
        fail(memory_error_line(exc, memory))
    except duckdb.Error as exc:
        fail(duckdb_error_line(exc) + (f"; {RECOVERY_HINT}" if looks_corrupt(exc) else ""))


def _connect(warehouse: Path | None, memory: str) -> Any:
    """The published warehouse, read-only, within `memory`; a one-line error where it does not open."""
    from warehouse.publish import Warehouse, WarehouseCorrupt, WarehouseMissing, WarehouseUnusable

    try:
        return Warehouse(warehouse).connect_read_only(memory_limit=memory)
    except (WarehouseMissing, WarehouseUnusable, WarehouseCorrupt) as exc:
        fail(str(exc))


def _limits(timeout: float | None, memory_limit: str | None) -> tuple[float, str]:
    """The time limit (seconds, 0: none) and the memory limit: the options, else the environment, else the defaults."""
    raw = str(timeout) if timeout is not None else os.environ.get(TIMEOUT_ENV) or str(DEFAULT_TIMEOUT_S)
    try:
        timeout_s = float(raw)
    except ValueError:
        fail(f"{TIMEOUT_ENV} must be a number of seconds, got {raw!r}")
    if not math.isfinite(timeout_s) or timeout_s < 0:
        fail(f"the time limit must be >= 0 seconds (0: none), got {raw}")
    memory = (memory_limit or os.environ.get(MEMORY_ENV) or DEFAULT_MEMORY_LIMIT).strip()
    if not _SIZE.fullmatch(memory):
        fail(f"the memory limit must be a size such as 500MB or 4GB, got {memory!r}")
    return timeout_s, memory.replace(" ", "")


_SIZE = re.compile(r"\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)


def _execute(
    con: Any, describe: str | None, statements: list[str], stop: threading.Event
) -> tuple[list[Result], str | None]:
    """Every statement's result set (and --describe's), in order; stops early once `stop` is set."""
    results: list[Result] = []
    note = None
    if describe is not None:
        names, rows, note = _describe(con, describe)
        results.append((names, rows))
    for statement in statements:
        if stop.is_set():
            break
        result = con.execute(statement)
        names = [d[0] for d in result.description] if result.description else []
        if names:
            results.append((names, result.fetchall()))
    return results, note


def run_guarded(con: Any, work: Callable[[threading.Event], T], timeout_s: float) -> T:
    """`work(stop)` in a worker thread, the main thread waiting: on Ctrl-C (exit code 130) or after
    `timeout_s` (exit code 2) it sets `stop` and interrupts `con` (DuckDB's `interrupt()`) until the
    worker returns, then stops with one line. DuckDB runs a query with the GIL released and Python
    delivers a signal to the main thread only between bytecodes, so the main thread must not be the
    one running the query."""
    outcome: dict[str, Any] = {}
    stop = threading.Event()
    done = threading.Event()  # not Thread.is_alive(): a join cut short by Ctrl-C can leave it wrong (3.11)

    def target() -> None:
        try:
            outcome["value"] = work(stop)
        except BaseException as exc:  # re-raised in the main thread
            outcome["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=target, name="capplan-sql", daemon=True)
    deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
    reason = None
    worker.start()
    try:
        while not done.wait(WATCH_S):
            if deadline is not None and time.monotonic() >= deadline:
                reason = "timeout"
                break
    except KeyboardInterrupt:
        reason = "interrupt"
    if reason is not None:
        _cancel(con, done, stop)
        if reason == "interrupt":
            fail("interrupted: the query was cancelled", code=130)
        fail(
            f"the query ran longer than the time limit of {timeout_s:g} s and was cancelled "
            f"(--timeout SECONDS, or {TIMEOUT_ENV}; 0: no limit)"
        )
    if "error" in outcome:
        raise outcome["error"]
    return cast(T, outcome["value"])


def _cancel(con: Any, done: threading.Event, stop: threading.Event) -> None:
    """Interrupt `con` until the worker is done (a few seconds at most; Ctrl-C again is ignored)."""
    stop.set()
    give_up = time.monotonic() + CANCEL_WAIT_S
    while not done.is_set() and time.monotonic() < give_up:
        try:
            con.interrupt()
            done.wait(WATCH_S)
        except KeyboardInterrupt:
            continue


# --- the interactive prompt ----------------------------------------------------------------------

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
            if not buffer and stripped.startswith((".", "\\")):
                if self._dot(stripped):
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
        statements = checked_statements(text)
        self._show(lambda stop: _execute(self.con, None, statements, stop))

    def _show(self, work: Callable[[Any], tuple[list[Result], str | None]], label: str = "") -> None:
        """`work(stop)` under the time limit and Ctrl-C, its result sets printed (`label`: its note's prefix)."""
        results, note = guarded_results(self.con, work, self.timeout_s, self.memory)
        if note and self.fmt in ("table", "line"):  # as the one-shot command: csv, json stay parseable
            typer.echo(f"{label}: {' '.join(note.split())}")
        for names, rows in results:
            write_result(names, rows, self.fmt, self.max_rows)
        sys.stdout.flush()

    def _dot(self, command: str) -> bool:
        """Run a dot command (an unknown one is a one-line error); True to leave the prompt."""
        word, _, rest = command.partition(" ")
        if word in QUIT_WORDS:
            return True
        handlers: dict[str, Callable[[str], None]] = {
            ".help": self._help,
            ".tables": self._list_tables,
            ".schema": self._schema,
            "\\d": self._schema_or_tables,
            ".format": self._format,
            ".mode": self._format,  # the DuckDB CLI's name
        }
        handler = handlers.get(word)
        argument = rest.strip().rstrip(";").strip()
        self._guarded(lambda: handler(argument) if handler else fail(f"unknown command {word} (.help lists them)"))
        return False

    def _help(self, _argument: str) -> None:
        typer.echo(HELP, nl=False)

    def _list_tables(self, _argument: str) -> None:
        self._show(lambda stop: ([(TABLES_COLUMNS, self.con.execute(TABLES_SQL).fetchall())], None))

    def _schema(self, name: str) -> None:
        if not name:
            fail(".schema takes a relation, e.g. .schema marts.capacity_grid")
        self._show(lambda stop: _execute(self.con, name, [], stop), name)

    def _schema_or_tables(self, name: str) -> None:
        """psql's `\\d`: a relation's columns, or with no name every relation."""
        (self._schema if name else self._list_tables)(name)

    def _format(self, fmt: str) -> None:
        if fmt not in FORMATS:
            fail(f".format takes one of {', '.join(FORMATS)}")
        self.fmt = fmt


QUIT_WORDS = frozenset({".quit", ".exit", "\\q"})


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


app = typer.Typer(**APP_SETTINGS)
app.command(cls=OneLineCommand)(sql)
