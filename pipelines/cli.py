"""The `capplan` command line: one typer app, one module per command group.

User errors are one line on stderr and exit code 2, click's usage errors too (`common.OneLineGroup`:
"capplan: error: no such option --foo (did you mean --tp?); see capplan estimate -h"); tracebacks are
for bugs only. Help is click's plain formatter (no rich boxes): wrapped to the terminal, never cut,
the same in a pipe.

The app is built on first use (`pipelines.cli.app`, or `main()`), not at import, and `main()` builds only the
command it is given (`build_app(only=...)`): `capplan estimate` imports neither the warehouse nor Dagster nor
the recommendations. `capplan sql` is one process per query and skips even the app (about 0.25 s a query).
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Annotated

import typer


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"capplan {version('capplan')}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", metavar="", is_eager=True, callback=_show_version, help="Print the version."),
    ] = False,
) -> None:
    """Fleet-wide capacity planner for LLM serving."""


# the commands in help order; each is `pipelines.commands.<module>.<name>`, the module named as the command but
# where _MODULES says otherwise, and a group of commands (_GROUPS) is its module's `app`
_COMMANDS = (
    "registry", "estimate", "place", "limits", "procure", "pack", "nightly", "sql", "report", "diff", "export",
    "doctor", "offload",
)
_MODULES = {"offload": "offload_plan"}
_GROUPS = {"registry", "export"}


@cache
def build_app(only: str | None = None) -> typer.Typer:
    """The `capplan` app with every command group registered, or with command `only` alone: a command's process
    imports its own module, not the others' (the warehouse's, Dagster's, the recommendations'), which took about
    half a second of every `capplan estimate`. Usage, help and errors of that command are the whole app's."""
    from importlib import import_module

    from pipelines.commands.common import APP_SETTINGS, OneLineGroup

    app = typer.Typer(
        cls=OneLineGroup,
        name="capplan",
        help="Fleet-wide capacity planner for LLM serving.",
        no_args_is_help=True,
        **APP_SETTINGS,
    )
    app.callback()(_root)
    for name in _COMMANDS if only is None else [only]:
        module = import_module(f"pipelines.commands.{_MODULES.get(name, name)}")
        if name in _GROUPS:
            app.add_typer(module.app, name=name)
        else:
            app.command(name)(getattr(module, name))
    return app


def __getattr__(name: str) -> typer.Typer:
    """`from pipelines.cli import app` builds the app (PEP 562)."""
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point."""
    if sys.argv[1:2] == ["sql"]:  # the fast path: only what `capplan sql` needs
        from pipelines.commands import sql

        sys.exit(sql.app(args=sys.argv[2:], prog_name="capplan sql"))
    named = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in _COMMANDS else None
    sys.exit(build_app(named)())
