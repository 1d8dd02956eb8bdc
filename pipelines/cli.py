"""The `capplan` command line: one typer app, one module per command group.

User errors are one line on stderr and exit code 2; tracebacks are for bugs only.
"""

from __future__ import annotations

import sys

import typer

from pipelines.commands import estimate, export, nightly, registry, report, sql

app = typer.Typer(
    name="capplan",
    help="Fleet-wide capacity planner for LLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(registry.app, name="registry")
app.command("estimate")(estimate.estimate)
app.command("nightly")(nightly.nightly)
app.command("sql")(sql.sql)
app.command("report")(report.report)
app.add_typer(export.app, name="export")


def main() -> None:
    """Console-script entry point."""
    sys.exit(app())
