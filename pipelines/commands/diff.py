"""`capplan diff`: what changed in the capacity grid, and why.

`capplan diff` (or `--nights`) compares the published warehouse's last run with the one before
(marts.grid_diff); `--release vllm:0.32.0..0.33.0` computes the grid at both releases for the models
and GPUs asked (`--model`, `--gpu`; the published run's registry rows, else the registry) and compares
them with the same SQL. Every changed row names its causes: engine_release, config, catalog, price,
calibration, or code (`recommendations.grid_diff`).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from pipelines.commands.common import WarehouseOption, fail, open_store, open_warehouse

if TYPE_CHECKING:
    import polars as pl

    from warehouse.publish import Warehouse

DEFAULT_LIMIT = 20


def diff(
    nights: Annotated[
        bool, typer.Option("--nights", help="The last published run against the one before (the default).")
    ] = False,
    release: Annotated[
        str | None,
        typer.Option(
            "--release",
            metavar="ENGINE:OLD..NEW",
            help="Release against release, computed now: e.g. vllm:0.32.0..0.33.0 (with --model / --gpu to bound it).",
        ),
    ] = None,
    model: Annotated[
        list[str] | None, typer.Option("--model", "-m", metavar="MODEL", help="Only this model (repeatable).")
    ] = None,
    gpu: Annotated[
        list[str] | None, typer.Option("--gpu", metavar="GPU", help="Only this GPU catalog id (repeatable).")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=0, metavar="N", help="Rows to show, largest change first (0: all).")
    ] = DEFAULT_LIMIT,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object: before, after, counts by cause, rows.")
    ] = False,
    warehouse: WarehouseOption = None,
) -> None:
    """What changed in the capacity grid between two nights or two engine releases, and why."""
    from recommendations.grid_diff import DiffUnavailable, parse_release_range, read_diff, release_diff, text_lines
    from warehouse.publish import Warehouse

    if nights and release:
        fail("--nights and --release compare different things: give one")
    models, gpus = list(model or ()), list(gpu or ())
    shown = limit or None
    try:
        if release:
            wanted = parse_release_range(release)
            models_rows, gpu_rows = _registry_rows(Warehouse(warehouse))
            result = release_diff(
                _only(models_rows, "repo_id", models, "model"),
                _only(gpu_rows, "slug", gpus, "GPU"),
                wanted,
                limit=shown,
            )
        else:
            con = open_warehouse(warehouse)
            try:
                result = read_diff(con, models=models, gpus=gpus, limit=shown)
            finally:
                con.close()
    except DiffUnavailable as exc:
        fail(str(exc))
    if as_json:
        from pipelines.commands.sql import _json_value

        sys.stdout.write(json.dumps(_json_value(result.document()), indent=2) + "\n")
        return
    typer.echo("\n".join(text_lines(result)))


def _registry_rows(store: Warehouse) -> tuple[pl.DataFrame, pl.DataFrame]:
    """raw.models and raw.gpus of the published run (what its grid was computed from), else the
    registry's current rows (CAPPLAN_REGISTRY_URL)."""
    if store.exists:
        con = open_store(store)
        try:
            return con.sql("select * from raw.models").pl(), con.sql("select * from raw.gpus").pl()
        finally:
            con.close()
    from models_registry.db import RegistryError, registry_exists, registry_url, safe_url
    from models_registry.frames import current_models_frame, gpu_skus_frame

    url = registry_url()
    try:
        if not registry_exists(url):
            fail(f"no published run and no registry at {safe_url(url)}: run `capplan nightly` first")
        return current_models_frame(url), gpu_skus_frame(url)
    except RegistryError as exc:
        fail(str(exc))


def _only(rows: pl.DataFrame, column: str, wanted: list[str], what: str) -> pl.DataFrame:
    """The rows named in `wanted` (all when empty); a one-line error for a name that is not there."""
    import polars as pl

    if not wanted:
        return rows
    missing = sorted(set(wanted) - set(rows[column].to_list()))
    if missing:
        fail(
            f"unknown {what} {', '.join(map(repr, missing))} (see capplan registry list{' --gpus' if what == 'GPU' else ''})"
        )
    return rows.filter(pl.col(column).is_in(wanted))
