"""`capplan registry ingest | list | show | upgrade`: a thin shell over models_registry.

User errors are one line on stderr and exit code 2. `ingest` exits 0 with its summary, or 1 when
anything was rejected under `--strict`, and always when a repo named with `--hub` was not ingested
(it was asked for by name: a script must not read its absence as success).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

from capacity.spec import SpecError
from models_registry import db, views
from models_registry import ingest as ingest_mod
from models_registry.resolve import load_model
from models_registry.sources.user_catalog import UserCatalogError, effective_gpu_records
from pipelines.commands.common import WholeHelpGroup

app = typer.Typer(
    cls=WholeHelpGroup, help="Model and GPU registry: ingest, list, show.", no_args_is_help=True, rich_markup_mode=None
)

GIB = 2**30


def _fail(message: object) -> NoReturn:
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(2)


def _count(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:,}"


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:,.2f} GiB"


def print_report(report: ingest_mod.IngestReport) -> None:
    typer.echo(f"ingest run {report.run_id} ({report.source_kind}: {report.source}): {report.status}")
    typer.echo(f"{'kind':<6} {'seen':>6} {'added':>6} {'updated':>8} {'unchanged':>10} {'failed':>7}")
    for kind, counts in (("models", report.models), ("gpus", report.gpus)):
        typer.echo(
            f"{kind:<6} {counts.seen:>6} {counts.added:>6} {counts.updated:>8} {counts.unchanged:>10} {counts.failed:>7}"
        )
    if report.errors:
        typer.echo(f"failures ({len(report.errors)}):")
        for error in report.errors:
            reason = error.reason.removeprefix(f"{error.item_key}: ")
            typer.echo(f"  {error.item_kind} {error.item_key} [{error.stage}]: {reason}")


@app.command()
def ingest(
    catalog: Annotated[
        bool, typer.Option("--catalog", metavar="", help="The bundled catalog: every model and GPU (the default).")
    ] = False,
    directory: Annotated[
        Path | None, typer.Option("--dir", metavar="DIR", help="A directory of configs: every **/config.json under it.")
    ] = None,
    hub: Annotated[
        list[str] | None,
        typer.Option(
            "--hub", metavar="REPO[@REV]", help="A Hub repo id (repeatable; REPO@REVISION pins one). Offline first."
        ),
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", metavar="", help="Exit 1 when any item was rejected.")] = False,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", metavar="DIR", help="Hugging Face cache directory (default: HF_HUB_CACHE)."),
    ] = None,
) -> None:
    """Read models and GPUs into the registry (CAPPLAN_REGISTRY_URL); a re-run changes nothing."""
    chosen = sum([catalog, directory is not None, bool(hub)])
    if chosen > 1:
        _fail("choose one of --catalog, --dir PATH or --hub REPO_ID")
    if directory is not None and not directory.is_dir():
        _fail(f"--dir: not a directory: {directory}")
    try:
        db.upgrade_to_head()
        with db.session_scope() as session:
            if directory is not None:
                report = ingest_mod.ingest_dir(session, directory)
            elif hub:
                report = ingest_mod.ingest_hub(session, hub, cache_dir=cache_dir)
            else:
                report = ingest_mod.ingest_catalog(session)
    except db.RegistryError as exc:
        _fail(exc)
    print_report(report)
    if hub and report.errors:
        missing = "; ".join(f"{e.item_key} ({e.reason.removeprefix(f'{e.item_key}: ')})" for e in report.errors)
        typer.echo(f"error: {len(report.errors)} of {len(hub)} requested repo(s) not ingested: {missing}", err=True)
        raise typer.Exit(1)
    if strict and report.failed:
        raise typer.Exit(1)


def _print_table(header: list[str], rows: list[list[str]], right: set[int]) -> None:
    """Plain aligned columns (pipe- and grep-friendly; nothing is cut)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    for row in [header, *rows]:
        cells = [
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        typer.echo("  ".join(cells).rstrip())


@app.command("list")
def list_(
    gpus: Annotated[bool, typer.Option("--gpus", metavar="", help="List GPU SKUs instead of models.")] = False,
) -> None:
    """List current models (or GPU SKUs) in the registry."""
    try:
        present = db.registry_exists()
        if gpus:
            if present:
                with db.session_scope() as session:
                    gpu_rows = views.list_gpus(session)
            else:
                typer.echo("registry not ingested; showing the GPU catalog", err=True)
                gpu_rows = views.gpu_rows_from_catalog(effective_gpu_records())
            _print_table(
                ["id", "name", "memory", "GB/s", "BF16 TF", "FP8 TF", "$/GPU-h", "price"],
                [
                    [
                        g.id,
                        g.name,
                        _gib(g.memory_total_bytes),
                        f"{g.memory_bandwidth_gbps:,.0f}" if g.memory_bandwidth_gbps else "-",
                        f"{g.bf16_dense_tflops:,.0f}" if g.bf16_dense_tflops else "-",
                        f"{g.fp8_dense_tflops:,.0f}" if g.fp8_dense_tflops else "-",
                        f"{g.price_usd_per_gpu_hour:.2f}" if g.price_usd_per_gpu_hour is not None else "-",
                        g.price_basis or "-",
                    ]
                    for g in gpu_rows
                ],
                right={2, 3, 4, 5, 6},
            )
            typer.echo(f"{len(gpu_rows)} GPU SKUs")
            return
        if not present:
            _fail(f"no registry at {db.safe_url(db.registry_url())}; run `capplan registry ingest` first")
        with db.session_scope() as session:
            model_rows = views.list_models(session)
    except (db.RegistryError, UserCatalogError) as exc:
        _fail(exc)
    _print_table(
        ["model", "family", "type", "params", "context", "dtype", "revs", "layers (KV kind)"],
        [
            [
                m.repo_id,
                m.family,
                m.model_type,
                _count(m.total_params),
                f"{m.context_limit_tokens:,}",
                m.torch_dtype,
                str(m.revisions),
                ", ".join(group.label() for group in m.layer_groups),
            ]
            for m in model_rows
        ],
        right={3, 4, 6},
    )
    typer.echo(f"{len(model_rows)} models")


@app.command()
def show(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="A registry id or alias, or a config.json path.")],
) -> None:
    """Show one model: normalized fields, KV layout and bytes per token, parameters, history."""
    try:
        view = None
        if db.registry_exists():
            with db.session_scope() as session:
                view = views.find_view(session, model)
        if view is None:
            view = views.view_from_resolved(load_model(model))
    except (LookupError, SpecError, db.RegistryError) as exc:
        _fail(exc)
    _print_view(view)


def _print_view(view: views.ModelView) -> None:
    def row(label: str, value: object) -> None:
        typer.echo(f"  {label:<24}{value}")

    typer.echo(view.repo_id)
    row("revision", f"{view.revision or '-'}  (config sha256 {view.config_sha256[:16]}, source {view.source})")
    if view.source_url:
        row("published at", view.source_url)
    generic = "  (generic parser: model_type not recognized)" if view.is_generic else ""
    row("family", f"{view.family}  (model_type {view.model_type}, {view.architecture}){generic}")
    for key, value in view.fields.items():
        row(key, "-" if value is None else f"{value:,}" if type(value) is int else value)
    row("layers (KV kind)", ", ".join(group.label() for group in view.layer_groups))
    dtype = view.fields.get("torch_dtype")
    row("KV bytes per token", f"{view.kv_bytes_per_token:,} at {dtype} (whole model, every per-token layer)")
    if view.state_bytes_per_sequence:
        row("state per sequence", f"{view.state_bytes_per_sequence:,} B (conv at {dtype}, recurrent at fp32)")
    row(
        "parameters",
        f"total {_count(view.total_params)} ({view.total_params:,}), active {_count(view.active_params)}, "
        f"embedding {_count(view.embedding_params)}",
    )
    if view.published_parameters:
        row("published parameters", f"{_count(view.published_parameters)} ({view.published_parameters:,})")
    checkpoint = view.checkpoint_bytes
    row("checkpoint", f"{_gib(checkpoint)} ({checkpoint:,} B)" if checkpoint else "unknown (no safetensors index)")
    for note in view.notes:
        row("note", note)
    if view.history is None:
        row("history", "not in the registry (run `capplan registry ingest`)")
        return
    row("history", f"{len(view.history)} revision(s), * = current")
    for rev in view.history:
        mark = "*" if rev.is_current else " "
        when = rev.created_at.strftime("%Y-%m-%d %H:%M") if rev.created_at else "-"
        typer.echo(f"    {mark} {when}  {(rev.revision or '-')[:40]:<40}  {rev.config_sha256[:16]}  {rev.source}")


@app.command()
def upgrade() -> None:
    """Create or upgrade the registry schema (Alembic `upgrade head`)."""
    try:
        db.upgrade_to_head()
    except db.RegistryError as exc:
        _fail(exc)
    typer.echo(f"registry at {db.safe_url(db.registry_url())} is at the latest schema")
