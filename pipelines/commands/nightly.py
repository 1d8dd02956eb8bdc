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
import shutil
import sys
import time
import uuid
import warnings
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pipelines.commands.common import fail, open_store

if TYPE_CHECKING:
    import duckdb
    from dagster import DagsterInstance
    from dagster._core.events.log import EventLogEntry

    from warehouse.publish import Warehouse

DAGSTER_BASE_DIR = Path("var/dagster")
SUMMARY_QUERIES = ("b_max_by_gpu", "cheapest_deployment", "max_context_at_concurrency")


@contextmanager
def dagster_instance() -> Iterator[tuple[DagsterInstance, str]]:
    """The persistent instance `dg dev` started here shows, and how to name it: DAGSTER_HOME when
    set; else ./dagster.yaml (what `dg dev` reads without DAGSTER_HOME; the repository's keeps its
    storage under var/dagster); with neither, Dagster's defaults under var/dagster."""
    from dagster import DagsterInstance

    home = os.environ.get("DAGSTER_HOME")
    if home:
        with DagsterInstance.get() as instance:
            yield instance, f"DAGSTER_HOME={home}"
    elif (Path.cwd() / "dagster.yaml").is_file():
        with DagsterInstance.from_config(str(Path.cwd())) as instance:
            yield instance, "./dagster.yaml (dg dev from this directory shows it)"
    else:
        DAGSTER_BASE_DIR.mkdir(parents=True, exist_ok=True)
        config = DAGSTER_BASE_DIR / "dagster.yaml"
        if not config.exists():  # Dagster's defaults, without its first-run telemetry banner
            config.write_text("telemetry:\n  enabled: false\nnux:\n  enabled: false\n", encoding="utf-8")
        with DagsterInstance.from_config(str(DAGSTER_BASE_DIR.resolve())) as instance:
            absolute = DAGSTER_BASE_DIR.resolve()  # DAGSTER_HOME must be absolute
            yield instance, f"{DAGSTER_BASE_DIR} (see it: DAGSTER_HOME={absolute} dagster dev -m pipelines.definitions)"


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


def _metadata_line(metadata: Any) -> str:
    """A check without a description, said by its short metadata values (`rows=0, negative_values=3`)."""
    values = [(k, getattr(v, "value", v)) for k, v in (metadata or {}).items()]
    short = [
        f"{k}={v}" for k, v in values if isinstance(v, int | float | str) and len(str(v)) <= 40 and "\n" not in str(v)
    ]
    return ", ".join(short[:6]) or "no reason recorded; see the check in dg dev"


class Progress:
    """Prints one line per finished step (its assets' row counts, or its check's verdict)."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.rows: dict[str, list[str]] = defaultdict(list)
        self.checks: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self.failures: list[str] = []
        self.failed_checks: list[str] = []
        self.warnings: list[str] = []

    def __call__(self, entry: EventLogEntry) -> None:
        with contextlib.suppress(Exception):  # progress output must never break the run
            self._handle(entry)

    def _handle(self, entry: EventLogEntry) -> None:
        from rich.markup import escape

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
            if not evaluation.passed:  # the check's own one-line reason, else its numbers
                reason = " ".join((evaluation.description or _metadata_line(evaluation.metadata)).split())
                label = f"{label}: {reason}"
                (self.warnings if verdict == "warning" else self.failed_checks).append(label)
            self.checks[step].append((label, verdict))
        elif kind == "STEP_SUCCESS":
            seconds = event.event_specific_data.duration_ms / 1000  # type: ignore[union-attr]
            marks = {"passed": "[green]✓[/]", "warning": "[yellow]![/]", "failed": "[red]✗[/]"}
            for label, verdict in self.checks.get(step, []):
                self.console.print(f"  {marks[verdict]} check {escape(label)}  [dim]{seconds:.2f} s[/]")
            if step not in self.checks:
                detail = ", ".join(self.rows.get(step, [])) or step
                self.console.print(f"  [green]✓[/] {detail}  [dim]{seconds:.2f} s[/]")
        elif kind == "STEP_FAILURE":
            error = event.event_specific_data.error  # type: ignore[union-attr]
            reason = _error_line(error)
            self.failures.append(f"{step}: {reason}")
            self.console.print(f"  [red]✗[/] {step}: {escape(reason)}")
        elif kind == "STEP_SKIPPED":
            self.console.print(f"  [yellow]-[/] {step} skipped (an upstream step or blocking check failed)")


def nightly(
    wait: Annotated[
        int | None,
        typer.Option(
            "--wait",
            metavar="SECONDS",
            help="Seconds to wait if another run holds the warehouse (default CAPPLAN_LOCK_WAIT_S, else 0).",
        ),
    ] = None,
    partition: Annotated[
        list[str] | None,
        typer.Option(
            "--partition",
            metavar="FAMILY",
            help="Backfill: recompute only this capacity-grid partition (a model family, as in "
            "raw.grid_partitions; repeatable); the others are published as the last run published them.",
        ),
    ] = None,
    rebuild: Annotated[
        bool,
        typer.Option(
            "--rebuild",
            help="Move the warehouse aside (<file>.corrupt-<time>) and rebuild it from the registry and the "
            "telemetry store, carrying over the history the old file still lets us read.",
        ),
    ] = False,
) -> None:
    """Refresh everything: registry sync, capacity grid, marts; publish the warehouse atomically.

    The grid is recomputed only for the partitions (model families) whose inputs changed."""
    from rich.console import Console

    started = time.perf_counter()
    console = Console(highlight=False, soft_wrap=True)
    warnings.filterwarnings("ignore", module="dagster")
    warnings.filterwarnings("ignore", message=".*is currently in beta.*")

    from models_registry import db
    from warehouse.publish import RECOVERY_HINT, Warehouse, looks_corrupt

    wait_s = wait if wait is not None else int(os.environ.get("CAPPLAN_LOCK_WAIT_S") or 0)
    if wait_s < 0:
        fail(f"--wait must be >= 0, got {wait_s}")
    if rebuild and partition:
        fail("--rebuild recomputes every partition (the old grid may be unreadable): drop --partition")
    store = Warehouse(history_runs=int(os.environ.get("CAPPLAN_HISTORY_RUNS") or 7))
    registry_url = db.registry_url()
    console.print(f"capplan nightly: registry [bold]{db.safe_url(registry_url)}[/] -> warehouse [bold]{store.path}[/]")
    run_id = str(uuid.uuid4())  # what Dagster itself uses for run ids
    progress = Progress(console)
    success, instance_label = _run_locked(store, run_id, wait_s, partition, progress, console, rebuild=rebuild)
    elapsed = time.perf_counter() - started
    if not success:
        reasons = progress.failures + [f"blocking check failed: {c}" for c in progress.failed_checks]
        console.print(
            f"[red]nightly run {run_id} failed after {elapsed:.1f} s; nothing was published[/] "
            "(capplan doctor checks the warehouse, registry, telemetry store, lock and disk)"
        )
        for reason in reasons or [f"see the run in dg dev ({instance_label})"]:
            typer.echo(f"  {reason}", err=True)
        if any(looks_corrupt(reason) for reason in reasons):
            typer.echo(f"  the warehouse is damaged; {RECOVERY_HINT}", err=True)
        raise typer.Exit(1)
    row, telemetry_lines, parts = _published_run(store, run_id)
    _print_summary(console, store, run_id, elapsed, row, telemetry_lines, parts, progress, instance_label)


def _run_locked(
    store: Warehouse,
    run_id: str,
    wait_s: int,
    partition: list[str] | None,
    progress: Progress,
    console: Any,
    *,
    rebuild: bool = False,
) -> tuple[bool, str]:
    """`nightly_job` in this process under the warehouse lock: whether it succeeded, and the instance's name."""
    from pipelines.definitions import build_definitions
    from warehouse.lock import WarehouseBusy
    from warehouse.publish import WarehouseUnusable

    try:
        lock = store.lock(run_id, wait_s=wait_s)
    except WarehouseUnusable as exc:
        fail(str(exc))
    if wait_s:
        console.print(f"  waiting up to {wait_s} s for the warehouse lock…", style="dim")
    try:
        lock.acquire()
    except WarehouseBusy as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot take the warehouse lock {store.lock_path}: {exc.strerror or exc}")
    try:
        _prepare_warehouse(store, console, rebuild=rebuild)
        with dagster_instance() as (instance, instance_label):
            instance.add_event_listener(run_id, progress)
            job = build_definitions().resolve_job_def("nightly_job")
            result = job.execute_in_process(
                instance=instance,
                run_id=run_id,
                raise_on_error=False,
                run_config={
                    "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
                    **({"ops": {"capacity_grid": {"config": {"partitions": list(partition)}}}} if partition else {}),
                },
                tags={"capplan/trigger": "capplan nightly"},
            )
    finally:
        lock.release()
    return result.success, instance_label


def _prepare_warehouse(store: Warehouse, console: Any, *, rebuild: bool) -> None:
    """Under the lock: stop with a one-line cause (and the recovery) when the published file is
    corrupt; with `rebuild`, move it aside and publish the history it still lets us read."""
    from warehouse.publish import RECOVERY_HINT
    from warehouse.recovery import check_warehouse, move_aside, salvage_history

    if not store.exists:
        if rebuild:
            console.print(f"  no warehouse at {store.given}: building a new one", markup=False)
        return
    problem = check_warehouse(store, deep=rebuild)  # a rebuild reads every table: is it corrupt, or moved for nothing?
    if problem and not rebuild:
        fail(f"{problem}; {RECOVERY_HINT}")
    if not rebuild:
        return
    try:
        aside = move_aside(store, "corrupt" if problem else "before-rebuild")
    except OSError as exc:
        fail(f"cannot move {store.path} aside: {exc.strerror or exc}")
    console.print(f"  {problem or 'the warehouse opens'}; moved it aside to {aside}", markup=False)
    for line in salvage_history(aside, store):
        console.print(f"  {line}", markup=False)


def _published_run(store: Warehouse, run_id: str) -> tuple[tuple[Any, ...], list[str], tuple[Any, ...] | None]:
    """The run's marts.runs row, its telemetry lines and its partition counts (computed, all)."""
    import duckdb

    con = open_store(store)
    try:
        row = con.execute(
            "select models, gpus, capacity_grid_rows, context_limits_rows, ingest_errors, duration_s "
            "from marts.runs where run_id = $run_id",
            {"run_id": run_id},
        ).fetchone()
        telemetry_lines = telemetry_summary(con)
        parts = con.execute(
            "select count(*), count(*) filter (where computed) from raw.grid_partitions where run_id = $run_id",
            {"run_id": run_id},
        ).fetchone()
    except duckdb.Error as exc:
        fail(f"the run finished but its marts.runs row cannot be read: {exc}", code=1)
    finally:
        con.close()
    if row is None:
        fail(f"the run finished but published no marts.runs row for {run_id}", code=1)
    return row, telemetry_lines, parts


def _print_summary(
    console: Any,
    store: Warehouse,
    run_id: str,
    elapsed: float,
    row: tuple[Any, ...],
    telemetry_lines: list[str],
    parts: tuple[Any, ...] | None,
    progress: Progress,
    instance_label: str,
) -> None:
    """What the published run holds, where to see it, and queries to try."""
    from warehouse.sql import example_queries

    models, gpus, grid_rows, limit_rows, errors, _duration = row
    size_mb = store.path.stat().st_size / 1e6
    console.print()
    console.print(f"[bold green]Published[/] run {run_id} in {elapsed:.1f} s")
    console.print(
        f"  models          {models:,}" + (f"  ({errors:,} rejected: see marts.ingest_errors)" if errors else "")
    )
    console.print(f"  GPUs            {gpus:,}")
    console.print(f"  grid rows       {grid_rows:,}  (context limits: {limit_rows:,})")
    if parts and parts[0]:
        console.print(
            f"  partitions      {parts[0]:,} ({parts[1]:,} computed, {parts[0] - parts[1]:,} unchanged: reused; "
            "see raw.grid_partitions)"
        )
    for line in telemetry_lines:
        console.print(line, markup=False)
    if progress.warnings:
        console.print(
            f"  warnings        {len(progress.warnings)} check(s), each with its reason above", style="yellow"
        )
    console.print(f"  run time        {elapsed:.1f} s")
    console.print(f"  warehouse       {store.path.resolve()}  ({size_mb:,.1f} MB)")
    console.print(f"  Dagster run     {run_id} in {instance_label}", markup=False)
    console.print()
    command = capplan_command()
    console.print("Try:")
    queries = example_queries()
    for name in SUMMARY_QUERIES:
        if name in queries:
            console.print(f'  {command} sql "{one_line_sql(queries[name])}"', markup=False)
    console.print(f"More in warehouse/queries/ ({command} sql --file warehouse/queries/<name>.sql).", style="dim")
    sys.stdout.flush()


def capplan_command() -> str:
    """How to run capplan again from here, so the printed lines work without an activated venv:
    `capplan` when PATH finds this very script, else the path it was started as (`.venv/bin/capplan`)."""
    started_as = Path(sys.argv[0])
    script = started_as if started_as.name == "capplan" else Path(sys.executable).with_name("capplan")
    if not script.is_file():
        return "capplan"
    on_path = shutil.which("capplan")
    if on_path and os.path.samefile(on_path, script):
        return "capplan"
    relative = os.path.relpath(os.path.abspath(script))
    return relative if not relative.startswith("..") else os.path.abspath(script)


def telemetry_summary(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The telemetry of this run in two lines: where it came from, files, observations, rejects;
    how many observed deployments were predicted, and why the others were skipped."""
    files = con.execute(
        "select count(*), coalesce(sum(observations), 0), coalesce(sum(samples), 0), coalesce(sum(rejected), 0), "
        "any_value(telemetry_source), any_value(drop_dir) from marts.telemetry_files"
    ).fetchone()
    n_files, observations, samples, rejected, source, drop_dir = files or (0, 0, 0, 0, None, None)
    origin = f"{source} {drop_dir}" if drop_dir else str(source or "no telemetry files found")
    lines = [
        f"  telemetry       {n_files:,} files ({origin}): {observations:,} observations, {samples:,} samples, "
        f"{rejected:,} rows rejected" + (" (see marts.telemetry_rejects)" if rejected else "")
    ]
    rows = con.execute(
        "select prediction_status, prediction_reason, count(*) from marts.prediction_vs_measured "
        "group by all order by 3 desc, 2"
    ).fetchall()
    predicted = sum(n for status, _reason, n in rows if status == "predicted")
    skipped = [(reason, n) for status, reason, n in rows if status != "predicted"]
    deployments = predicted + sum(n for _reason, n in skipped)
    line = f"  predictions     {deployments:,} observed deployments: {predicted:,} predicted, {deployments - predicted:,} skipped"
    if skipped:
        line += " (" + "; ".join(f"{n} x {reason}" for reason, n in skipped) + "; see marts.prediction_vs_measured)"
    return [*lines, line]
