"""`capplan limits`: the effective context limits of one deployment (`recommendations.limits`).

Computed directly (model limit, memory-derived limit on capplan's predicted pool); where the published
warehouse holds the same deployment (`marts.effective_context_limits`, kind `model_gpu_tp`) and its
memory-derived limits equal the ones computed now (the same model, GPU and engine rules went in), its
rows are the answer instead, with the calibrated limit telemetry gave them: `source` says which.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Any

import typer

from capacity import engine_constants as ec
from capacity.engines import Engine
from capacity.estimate import Estimate
from capacity.grid import TARGET_CONCURRENCIES
from capacity.spec import DeploymentSpec, GpuSku, SpecError
from pipelines.commands.common import (
    config_overrides,
    estimate_resolved,
    fail,
    published_or_none,
    resolve_gpu,
    resolve_model,
)
from pipelines.commands.options import LIMITS_OPTIONS, stated_deployment, takes
from recommendations.limits import estimate_limits

if TYPE_CHECKING:
    from pathlib import Path

    import duckdb
    import polars as pl

    from models_registry.resolve import ResolvedModel

LIMIT_KEYS = (
    "concurrency",
    "model_limit",
    "memory_limit",
    "calibrated_limit",
    "effective_limit",
    "binding",
    "calibrated",
    "calibration_scope",
    "n_observations",
)


@takes(LIMITS_OPTIONS)
def limits(**options: Any) -> None:
    """Effective context limits of a deployment: the longest context at each concurrency, and what binds it."""
    gpu, tp, pp, max_model_len = options["gpu"], options["tp"], options["pp"], options["max_model_len"]
    if gpu is None:
        fail("give --gpu SKU")
    for name, size in (("--tp", tp), ("--pp", pp)):
        if size < 1:
            fail(f"{name} must be >= 1, got {size}")
    wanted = tuple(dict.fromkeys(options["concurrency"] or TARGET_CONCURRENCIES))
    if any(b < 1 for b in wanted):
        fail(f"--concurrency must be a positive integer, got {min(wanted)}")
    if max_model_len is not None and max_model_len < 1 and max_model_len != -1:
        fail(f"--max-model-len must be a positive integer or -1, got {max_model_len}")
    overrides = config_overrides(options["hf_overrides"], options["engine"], options["engine_version"])
    resolved, sku = resolve_model(options["model"], overrides), resolve_gpu(gpu)
    deployment = stated_deployment(options)
    notes: list[str] = []
    est = _sized(resolved, deployment, sku)
    if not est.starts and max_model_len is None and est.max_model_len_that_starts > 0:
        notes.append(
            f"max_model_len {est.max_model_len:,} (the model's) does not start: sized at the largest that does "
            f"({est.max_model_len_that_starts:,}, vLLM's -1)"
        )
        est = _sized(resolved, dataclasses.replace(deployment, max_model_len=-1), sku)
    frame = estimate_limits(est, resolved.spec, resolved.repo_id, options["dtype"], options["kv_dtype"], wanted)
    rows, source, run_id = _published(frame, options["warehouse"], options["gpu_memory_utilization"] is None, notes)
    out: dict[str, Any] = {
        "model": resolved.repo_id,
        "gpu": sku.id,
        "engine": est.engine,
        "engine_version": est.engine_version,
        "tp": est.tp,
        "pp": est.pp,
        "weight_dtype": est.weight_dtype,
        "kv_cache_dtype": est.kv_dtype,
        "max_model_len": est.max_model_len,
        "gpu_memory_utilization": est.gpu_memory_utilization,
        "source": source,
        "run_id": run_id,
        "starts": est.starts,
        "largest_context_that_starts": est.max_model_len_that_starts,
        "model_context_limit": resolved.spec.context_limit_tokens,
        "limits": rows,
        "notes": notes,
    }
    if options["as_json"]:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    for line in _lines(out):
        typer.echo(line)


def _sized(resolved: ResolvedModel, deployment: DeploymentSpec, sku: GpuSku) -> Estimate:
    """The deployment's estimate, or the command stops with the SpecError's one line."""
    try:
        return estimate_resolved(resolved, deployment, gpu=sku)
    except SpecError as exc:
        fail(str(exc))


def _published(
    computed: pl.DataFrame, path: Path | None, default_budget: bool, notes: list[str]
) -> tuple[list[dict[str, Any]], str, str | None]:
    """The warehouse's rows for this deployment where they are the same computation (else the computed
    rows), `warehouse` or `computed`, and the run that published them."""
    mine = [{k: row[k] for k in LIMIT_KEYS} for row in computed.iter_rows(named=True)]
    first = computed.row(0, named=True)
    grid_config = (
        first["engine"] == Engine.VLLM.value
        and first["engine_version"] == ec.VLLM_DEFAULT_VERSION
        and first["kv_dtype"] == "auto"
        and default_budget
    )
    if not grid_config:
        notes.append("not a configuration the nightly grid publishes (vLLM default release, KV auto): computed")
        return mine, "computed", None
    con, why = published_or_none(path)
    if con is None:
        notes.append(why or "no published warehouse: computed directly")
        return mine, "computed", None
    try:
        found = _warehouse_rows(con, first, [row["concurrency"] for row in mine])
    finally:
        con.close()
    if found is None:
        notes.append("the published warehouse has no rows for this deployment: computed directly")
        return mine, "computed", None
    run_id, published = found
    if [r["memory_limit"] for r in published] != [r["memory_limit"] for r in mine] or any(
        r["_max_model_len"] != first["max_model_len"] for r in published
    ):
        notes.append(f"the published run {run_id} sized this deployment from other inputs: computed directly")
        return mine, "computed", None
    return [{k: r[k] for k in LIMIT_KEYS} for r in published], "warehouse", run_id


def _warehouse_rows(
    con: duckdb.DuckDBPyConnection, key: dict[str, Any], concurrencies: list[int]
) -> tuple[str, list[dict[str, Any]]] | None:
    import duckdb

    columns = ", ".join(LIMIT_KEYS)
    try:
        rows = con.execute(
            f"select run_id, max_model_len as _max_model_len, {columns} from marts.effective_context_limits "
            "where kind = 'model_gpu_tp' and model = ? and gpu = ? and tp = ? and pp = ? and engine = ? "
            "and engine_version = ? and weight_dtype = ? and kv_dtype = ? order by concurrency",
            [key[k] for k in ("model", "gpu", "tp", "pp", "engine", "engine_version", "weight_dtype", "kv_dtype")],
        ).fetchall()
    except duckdb.Error:
        return None
    names = ["run_id", "_max_model_len", *LIMIT_KEYS]
    by_b = {row[names.index("concurrency")]: dict(zip(names, row, strict=True)) for row in rows}
    if not by_b or any(b not in by_b for b in concurrencies):
        return None
    picked = [by_b[b] for b in concurrencies]
    return str(picked[0]["run_id"]), picked


def _lines(out: dict[str, Any]) -> list[str]:
    lines = [
        f"{out['model']} on {out['tp']} x {out['pp']} {out['gpu']} ({out['engine']} {out['engine_version']}, "
        f"{out['weight_dtype']} weights, {out['kv_cache_dtype']} KV), max_model_len {out['max_model_len']:,}",
        f"source: {out['source']}" + (f" (run {out['run_id']})" if out["run_id"] else ""),
        f"largest context that starts: {out['largest_context_that_starts']:,} tokens"
        f" (model limit {out['model_context_limit']:,})",
        "",
        f"{'concurrency':>11}  {'effective':>10}  {'memory':>10}  {'calibrated':>10}  binding",
    ]
    for row in out["limits"]:
        calibrated = f"{row['calibrated_limit']:,}" if row["calibrated_limit"] is not None else "-"
        lines.append(
            f"{row['concurrency']:>11,}  {row['effective_limit']:>10,}  {row['memory_limit']:>10,}  "
            f"{calibrated:>10}  {row['binding']}"
        )
    lines += [f"note: {note}" for note in out["notes"]]
    return lines
