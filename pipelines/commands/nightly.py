"""`capplan nightly`: run `nightly_job` in this process, show its progress, summarize the result.

The same job `dagster dev` and the schedule run, on the embedded defaults (SQLite registry and
DuckDB warehouse under `var/`, overridable through the environment, see `.env.example`). The
registry is migrated first (the first asset does it). A second nightly started while one runs
waits `--wait` seconds for the warehouse lock, then stops with a message naming the owner.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
import uuid
import warnings
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from dagster import DagsterInstance
    from dagster._core.events.log import EventLogEntry

SUMMARY_QUERIES = ("b_max_by_gpu", "cheapest_deployment", "max_context_at_concurrency")


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"capplan: error: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def dagster_instance() -> Iterator[DagsterInstance]:
    """DAGSTER_HOME's instance when set (the run is then recorded there, like a scheduled one);
    else an in-memory instance: the run's record is `marts.runs`, and the SQLite event log of a
    persistent instance would cost about as much time as the run itself on a small machine."""
    from dagster import DagsterInstance

    if os.environ.get("DAGSTER_HOME"):
        with DagsterInstance.get() as instance:
            yield instance
    else:
        with DagsterInstance.ephemeral() as instance:
            yield instance


def one_line_sql(sql: str) -> str:
    """A query file as one line to paste after `capplan sql` (comments dropped, spaces collapsed)."""
    body = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    return re.sub(r"\s+", " ", body).strip().rstrip(";")


def _error_line(error: Any) -> str:
    """The last line of the innermost error Dagster recorded for a failed step."""
    if error is None:
        return "failed"
    cause = error.cause or error
    lines = (cause.message or "").strip().splitlines()
    return lines[-1] if lines else str(cause.cls_name)


class Progress:
    """Prints one line per finished step (its assets' row counts, or its check's verdict)."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.rows: dict[str, list[str]] = defaultdict(list)
        self.checks: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self.failures: list[str] = []
        self.failed_checks: list[str] = []

    def __call__(self, entry: EventLogEntry) -> None:
        with contextlib.suppress(Exception):  # progress output must never break the run
            self._handle(entry)

    def _handle(self, entry: EventLogEntry) -> None:
        event = entry.dagster_event
        if event is None:
            return
        kind = event.event_type_value
        step = event.step_key or ""
        if kind == "ASSET_MATERIALIZATION":
            materialization = event.event_specific_data.materialization  # type: ignore[union-attr]
            name = ".".join(materialization.asset_key.path)
            count = materialization.metadata.get("dagster/row_count")
            self.rows[step].append(f"{name} {count.value:,}" if count is not None else name)
        elif kind == "ASSET_CHECK_EVALUATION":
            evaluation: Any = event.event_specific_data
            label = f"{evaluation.check_name} on {'.'.join(evaluation.asset_key.path)}"
            warning = getattr(evaluation.severity, "value", "") == "WARN"
            verdict = "passed" if evaluation.passed else ("warning" if warning else "failed")
            self.checks[step].append((label, verdict))
            if verdict == "failed":
                self.failed_checks.append(label)
        elif kind == "STEP_SUCCESS":
            seconds = event.event_specific_data.duration_ms / 1000  # type: ignore[union-attr]
            marks = {"passed": "[green]✓[/]", "warning": "[yellow]![/]", "failed": "[red]✗[/]"}
            for label, verdict in self.checks.get(step, []):
                note = "  (warning)" if verdict == "warning" else ""
                self.console.print(f"  {marks[verdict]} check {label}{note}  [dim]{seconds:.2f} s[/]")
            if step not in self.checks:
                detail = ", ".join(self.rows.get(step, [])) or step
                self.console.print(f"  [green]✓[/] {detail}  [dim]{seconds:.2f} s[/]")
        elif kind == "STEP_FAILURE":
            error = event.event_specific_data.error  # type: ignore[union-attr]
            reason = _error_line(error)
            self.failures.append(f"{step}: {reason}")
            self.console.print(f"  [red]✗[/] {step}: {reason}")
        elif kind == "STEP_SKIPPED":
            self.console.print(f"  [yellow]-[/] {step} skipped (an upstream step or blocking check failed)")


def nightly(
    wait: Annotated[
        int | None,
        typer.Option(
            "--wait", help="Seconds to wait if another run holds the warehouse (default CAPPLAN_LOCK_WAIT_S, else 0)."
        ),
    ] = None,
) -> None:
    """Refresh everything: registry sync, capacity grid, marts; publish the warehouse atomically."""
    from rich.console import Console

    started = time.perf_counter()
    console = Console(highlight=False, soft_wrap=True)
    warnings.filterwarnings("ignore", module="dagster")
    warnings.filterwarnings("ignore", message=".*is currently in beta.*")

    import duckdb

    from models_registry import db
    from pipelines.definitions import defs
    from warehouse.lock import WarehouseBusy
    from warehouse.publish import Warehouse
    from warehouse.sql import example_queries

    wait_s = wait if wait is not None else int(os.environ.get("CAPPLAN_LOCK_WAIT_S") or 0)
    if wait_s < 0:
        fail(f"--wait must be >= 0, got {wait_s}")
    store = Warehouse(history_runs=int(os.environ.get("CAPPLAN_HISTORY_RUNS") or 7))
    registry_url = db.registry_url()
    console.print(f"capplan nightly: registry [bold]{db.safe_url(registry_url)}[/] -> warehouse [bold]{store.path}[/]")
    run_id = str(uuid.uuid4())  # what Dagster itself uses for run ids
    lock = store.lock(run_id, wait_s=wait_s)
    if wait_s:
        console.print(f"  waiting up to {wait_s} s for the warehouse lock…", style="dim")
    try:
        lock.acquire()
    except WarehouseBusy as exc:
        fail(str(exc))
    progress = Progress(console)
    try:
        with dagster_instance() as instance:
            instance.add_event_listener(run_id, progress)
            job = defs.resolve_job_def("nightly_job")
            result = job.execute_in_process(
                instance=instance,
                run_id=run_id,
                raise_on_error=False,
                run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
                tags={"capplan/trigger": "capplan nightly"},
            )
    finally:
        lock.release()
    elapsed = time.perf_counter() - started
    if not result.success:
        reasons = progress.failures + [f"blocking check failed: {c}" for c in progress.failed_checks]
        console.print(f"[red]nightly run {run_id} failed after {elapsed:.1f} s; nothing was published[/]")
        for reason in reasons or ["see the run in `dagster dev`"]:
            typer.echo(f"  {reason}", err=True)
        raise typer.Exit(1)

    con = store.connect_read_only()
    try:
        row = con.execute(
            "select models, gpus, capacity_grid_rows, context_limits_rows, ingest_errors, duration_s "
            "from marts.runs where run_id = $run_id",
            {"run_id": run_id},
        ).fetchone()
    except duckdb.Error as exc:
        fail(f"the run finished but its marts.runs row cannot be read: {exc}", code=1)
    finally:
        con.close()
    if row is None:
        fail(f"the run finished but published no marts.runs row for {run_id}", code=1)
    models, gpus, grid_rows, limit_rows, errors, _duration = row
    size_mb = store.path.stat().st_size / 1e6
    console.print()
    console.print(f"[bold green]Published[/] run {run_id} in {elapsed:.1f} s")
    console.print(
        f"  models          {models:,}" + (f"  ({errors:,} rejected: see marts.ingest_errors)" if errors else "")
    )
    console.print(f"  GPUs            {gpus:,}")
    console.print(f"  grid rows       {grid_rows:,}  (context limits: {limit_rows:,})")
    console.print(f"  run time        {elapsed:.1f} s")
    console.print(f"  warehouse       {store.path.resolve()}  ({size_mb:,.1f} MB)")
    console.print()
    console.print("Try:")
    queries = example_queries()
    for name in SUMMARY_QUERIES:
        if name in queries:
            console.print(f'  capplan sql "{one_line_sql(queries[name])}"')
    console.print("More in warehouse/queries/ (capplan sql --file warehouse/queries/<name>.sql).", style="dim")
    sys.stdout.flush()
