"""What the `capplan` commands share: the one-line user error and the published warehouse, read-only."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer._click import exceptions as cx  # typer 0.29 vendors click: its usage errors are these classes
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    import duckdb

    from capacity.estimate import Estimate
    from capacity.hf_config.overrides import ConfigOverrides
    from capacity.spec import DeploymentSpec, GpuSku
    from models_registry.resolve import ResolvedModel
    from warehouse.publish import Warehouse


# How `capplan` and its fast path `capplan sql` run as programs: click's plain help (no rich boxes), -h as
# well as --help (inherited by every subcommand), no shell completion, no rich tracebacks.
APP_SETTINGS: dict[str, Any] = {
    "add_completion": False,
    "pretty_exceptions_enable": False,
    "rich_markup_mode": None,
    "context_settings": {"help_option_names": ["-h", "--help"]},
}


def fail(message: str, code: int = 2) -> NoReturn:
    """A user error: one line on stderr, exit code 2 (`code` 1: a run that failed after it started)."""
    typer.echo(f"capplan: error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(code)


def usage_line(exc: cx.UsageError) -> str:
    """A usage error as one line: `no such option --foo (did you mean --tp?); see capplan estimate -h`."""
    if isinstance(exc, cx.NoSuchOption):
        close = sorted(exc.possibilities or ())
        text = f"no such option {exc.option_name}" + (f" (did you mean {' or '.join(close[:3])}?)" if close else "")
    else:
        message = " ".join(exc.format_message().split())
        text = (message[:1].lower() + message[1:]).rstrip(".")
    if exc.ctx is not None:
        text += f"; see {exc.ctx.command_path} -h"
    return text


def _one_line_errors(run: Callable[[], Any], standalone_mode: bool) -> Any:
    """typer's `main` (run non-standalone) with click's errors as one line on stderr (`capplan: error: ...`,
    exit 2 for usage errors) instead of the usage block and a boxed message; help and exit codes kept."""
    try:
        value = run()
    except cx.UsageError as exc:
        if isinstance(exc, cx.NoArgsIsHelpError):  # no arguments: the help, as click shows it
            exc.show()
        else:
            typer.echo(f"capplan: error: {usage_line(exc)}", err=True)
        code = 2
    except cx.ClickException as exc:
        typer.echo(f"capplan: error: {' '.join(exc.format_message().split())}", err=True)
        code = exc.exit_code
    except typer.Abort:
        typer.echo("capplan: aborted", err=True)
        code = 1
    else:
        code = value if isinstance(value, int) else 0
    if standalone_mode:
        sys.exit(code)
    return code


class _OneLineMain:
    """click's `main` with errors as one line; mixed in before a click command class."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        parent: Any = super()  # the click class this is mixed into

        def run() -> Any:
            return parent.main(args, prog_name, complete_var, False, windows_expand_args, **extra)

        return _one_line_errors(run, standalone_mode)


class WholeHelpGroup(TyperGroup):
    """A command group whose help lists each command with its whole first sentence, wrapped to the
    terminal (click cuts it to one line with "..." at 80 columns: `capplan -h` lost half of each)."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=WHOLE_SENTENCE_CHARS)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


WHOLE_SENTENCE_CHARS = 10_000  # `get_short_help_str`'s limit: the first sentence whole, never cut


class OneLineGroup(_OneLineMain, WholeHelpGroup):
    """The root `capplan` group, errors as one line."""


class OneLineCommand(_OneLineMain, TyperCommand):
    """A single-command app (`capplan sql`'s fast path), errors as one line."""


def resolve_model(ref: str, overrides: ConfigOverrides | None = None) -> ResolvedModel:
    """MODEL as the commands take it (registry id, bundled id, path to a config.json), with a serving command's
    config `overrides`; a one-line error."""
    from capacity.spec import SpecError
    from models_registry.resolve import load_model

    try:
        return load_model(ref, overrides=overrides)
    except (LookupError, SpecError, OSError) as exc:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def config_overrides(text: str | None, engine: str, engine_version: str | None) -> ConfigOverrides | None:
    """--hf-overrides / --json-model-override-args, read as the engine applies them (None: not given); a one-line
    error where the JSON is not an object of config keys or the engine takes no overrides."""
    from capacity.engines.registry import engine_profile
    from capacity.hf_config.overrides import ConfigOverrides, OverrideError, OverrideRule, read_overrides

    if text is None:
        return None
    try:
        rule = engine_profile(engine, engine_version).config_override_rule
        values = read_overrides(text, "--hf-overrides")
    except (ValueError, OverrideError) as exc:
        fail(str(exc))
    if rule is None:
        fail(f"{engine} takes no config overrides: edit the model's config.json (give its path as MODEL)")
    flag = "--json-model-override-args" if rule is OverrideRule.SGLANG else "--hf-overrides"
    return ConfigOverrides(rule, values, flag)


def resolve_gpu(name: str) -> GpuSku:
    """A catalog GPU by id, name or alias (nvidia-smi / DCGM names too); a one-line error."""
    from models_registry.sources.gpu_catalog import find_gpu_sku

    try:
        return find_gpu_sku(name)
    except (LookupError, ValueError) as exc:  # ValueError: the user catalog's one-line UserCatalogError
        fail(str(exc).strip("'\""))


def estimate_resolved(model: ResolvedModel, deployment: DeploymentSpec, **sizing: Any) -> Estimate:
    """`capacity.estimate.estimate` of a model the command resolved: under its id, with its checkpoint's size
    (`sizing`: the GPU, context tokens, concurrency); raises SpecError."""
    from capacity.estimate import estimate

    return estimate(model.spec, deployment, model_name=model.repo_id, checkpoint_bytes=model.checkpoint_bytes, **sizing)


WarehouseOption = Annotated[
    Path | None,
    typer.Option(
        "--warehouse", metavar="FILE", help="DuckDB file (default: CAPPLAN_WAREHOUSE, else var/warehouse.duckdb)."
    ),
]


def open_warehouse(path: Path | None, *, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """The published warehouse, read-only; a user error where it is missing or does not open."""
    from warehouse.publish import Warehouse

    return open_store(Warehouse(path), memory_limit=memory_limit)


def open_store(store: Warehouse, *, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """`store`'s published file, read-only; a one-line user error (with the recovery command where
    the file is corrupt) where it is missing, unusable or does not open."""
    from warehouse.publish import WarehouseCorrupt, WarehouseMissing, WarehouseUnusable

    try:
        return store.connect_read_only(memory_limit=memory_limit)
    except (WarehouseMissing, WarehouseUnusable, WarehouseCorrupt) as exc:
        fail(str(exc))


def fail_on_query_error(exc: duckdb.Error, cannot_answer: str) -> NoReturn:
    """A query on the published warehouse failed: say it is damaged (with the recovery command) where
    DuckDB's error says so, else `cannot_answer`; both with DuckDB's first line."""
    from warehouse.publish import RECOVERY_HINT, looks_corrupt

    first_line = str(exc).splitlines()[0]
    if looks_corrupt(exc):
        fail(f"the warehouse is damaged: {first_line}; {RECOVERY_HINT}")
    fail(f"{cannot_answer}: {first_line}")


def published_or_none(path: Path | None) -> tuple[duckdb.DuckDBPyConnection | None, str | None]:
    """The published warehouse, read-only, when there is one that opens; else None and why (a note, not
    an error: the commands that read it compute their answer directly instead)."""
    from warehouse.publish import Warehouse, WarehouseCorrupt, WarehouseMissing, WarehouseUnusable

    store = Warehouse(path)
    if not store.exists:
        return None, "no published warehouse: computed directly"
    try:
        return store.connect_read_only(), None
    except (WarehouseMissing, WarehouseUnusable, WarehouseCorrupt) as exc:
        return None, f"the published warehouse did not open ({' '.join(str(exc).split())}): computed directly"
