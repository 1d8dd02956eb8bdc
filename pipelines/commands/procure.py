"""`capplan procure`: the GPUs to buy for a workloads file, and what each workload runs on
(`recommendations.fleet_answer`).

From the published warehouse (`marts.recommended_placements`, `marts.procurement_plan`,
`marts.procurement_buckets`) when its run planned the same workloads (`marts.workloads` equals the file
as read now) at the same GPU prices (`marts.gpus`); computed directly otherwise (a few seconds, without
the telemetry calibration the nightly applies). `source` says which.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
import typer

from capacity.offload_procurement import CachePlacement
from capacity.tiered_placement import media, tiered
from pipelines.commands.common import fail, published_or_none
from pipelines.commands.options import PROCURE_OPTIONS, takes
from recommendations.fleet_answer import fleet_contract, fleet_frames
from recommendations.packing import pack_offers, packed_frame, packed_lines
from recommendations.workloads import WORKLOAD_SCHEMA, WorkloadsFile, load_workloads

if TYPE_CHECKING:
    import duckdb

    from capacity.spec import GpuSku
    from models_registry.planning import Catalog

# marts.workloads columns that say what was planned (not where the file was)
_COMPARED = [k for k in WORKLOAD_SCHEMA if k != "source_path"]


@takes(PROCURE_OPTIONS)
def procure(*, workloads: Path | None, warehouse: Path | None, as_json: bool) -> None:
    """The fleet plan for a workloads file: GPUs to buy, $/hour, $ per million tokens, what binds each choice."""
    profiles = load_workloads(workloads)
    fatal = [why for name, why in profiles.errors if name == "<file>"]
    if fatal:
        fail(fatal[0])
    from models_registry.sources.gpu_catalog import load_gpu_skus

    gpus = load_gpu_skus()
    notes = [f"workload {name}: {why}" for name, why in profiles.errors]
    frames, run_id = _published(profiles, gpus, warehouse, notes)
    catalog = _catalog(profiles, gpus)
    if frames is None:
        frames = fleet_frames(profiles, catalog)
        notes.append("computed without the telemetry calibration the nightly applies")
    out = {
        "source": "warehouse" if run_id else "computed",
        "run_id": run_id,
        "workloads_file": str(profiles.path) if profiles.path else None,
        **fleet_contract(*frames),
        "packed": packed_frame(pack_offers(frames[0], profiles, catalog)).to_dicts(),
    }
    out["notes"] = [*out["notes"], *notes]
    if as_json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    for line in _lines(out):
        typer.echo(line)


def _catalog(profiles: WorkloadsFile, gpus: list[GpuSku]) -> Catalog:
    """The workloads' models as the other commands resolve them (registry, bundled, HF cache) and the GPUs."""
    from capacity.grid import GridModel
    from capacity.spec import SpecError
    from models_registry.planning import Catalog
    from models_registry.resolve import load_model

    models: dict[str, GridModel] = {}
    errors: dict[str, str] = {}
    for model_id in sorted({m for p in profiles.profiles for m in p.models}):
        try:
            resolved = load_model(model_id)
        except (LookupError, SpecError, OSError) as exc:
            errors[model_id] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            continue
        models[model_id] = GridModel(model_id, resolved.spec, resolved.checkpoint_bytes)
    return Catalog(models=models, gpus={g.id: g for g in gpus}, model_errors=errors)


def _published(
    profiles: WorkloadsFile, gpus: list[GpuSku], path: Path | None, notes: list[str]
) -> tuple[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] | None, str | None]:
    """The published run's frames and run id where it planned these workloads at these prices."""
    con, why = published_or_none(path)
    if con is None:
        notes.append(why or "no published warehouse: computed directly")
        return None, None
    try:
        stale = _stale(con, profiles, gpus)
        if stale is not None:
            notes.append(f"{stale}: computed directly")
            return None, None
        frames = tuple(
            con.sql(f"select * from marts.{table}").pl()
            for table in ("recommended_placements", "procurement_plan", "procurement_buckets")
        )
        run_id = con.sql("select run_id from raw.run").fetchone()
    finally:
        con.close()
    placements, procurement, buckets = frames
    tiers = _tiers_stale(placements, profiles)
    if tiers is not None:
        notes.append(f"{tiers}: computed directly")
        return None, None
    return (placements, procurement, buckets), str(run_id[0]) if run_id else None


def _tiers_stale(placements: pl.DataFrame, profiles: WorkloadsFile) -> str | None:
    """Why the published KV tiers are not this file's (a medium priced otherwise, or tiers on other workloads):
    each published offloaded row's $/GiB-hour is its host_usd_per_hour over its host_memory_gib."""
    prices = media(profiles.procurement.host_memory, profiles.procurement.local_nvme)
    expected = {p.name for p in profiles.profiles if tiered(p, prices)}
    if "kv_tier" not in placements.columns:
        return "the published run has no KV tiers" if expected else None
    tiered_rows = placements.filter(pl.col("kv_tier").is_not_null())
    if set(tiered_rows["workload"].unique()) != expected:
        return "the published run tiered other workloads"
    for row in tiered_rows.filter(pl.col("host_memory_gib") > 0).iter_rows(named=True):
        price = prices.get(CachePlacement(row["kv_tier"]))
        if price is None or not math.isclose(row["host_usd_per_hour"] / row["host_memory_gib"], price.usd_per_gib_hour):
            return f"the published run priced {CachePlacement(row['kv_tier']).medium} otherwise"
    return None


def _stale(con: duckdb.DuckDBPyConnection, profiles: WorkloadsFile, gpus: list[GpuSku]) -> str | None:
    """Why the published plan is not this plan (other workloads, other prices), or None."""
    import duckdb

    try:
        published = con.sql(f"select {', '.join(_COMPARED)} from marts.workloads").pl()
        prices = dict(con.sql("select gpu, price_usd_per_gpu_hour from marts.gpus").fetchall())
    except duckdb.Error as exc:
        return f"the published warehouse has no plan ({' '.join(str(exc).split())[:120]})"
    mine = profiles.frame().select(_COMPARED)
    if not _same_rows(published, mine):
        return "the published run planned other workloads"
    for gpu in gpus:
        theirs, ours = prices.get(gpu.id), gpu.price_usd_per_gpu_hour
        if gpu.id not in prices or not _same_price(theirs, ours):
            return f"the published run priced {gpu.id} otherwise"
    return None


def _same_price(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9)


def _same_rows(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    """Same rows in any order (list columns compared as they are)."""
    if a.height != b.height:
        return False
    key = ["workload", "valid"]
    left = a.cast(b.schema).sort(key, nulls_last=True)
    right = b.sort(key, nulls_last=True)
    return left.equals(right)


def _lines(out: dict[str, Any]) -> list[str]:
    per_million = out["usd_per_million_output_tokens"]
    lines = [
        f"Fleet plan ({out['source']}{', run ' + out['run_id'] if out['run_id'] else ''}; {out['workloads_file']}): "
        f"{out['gpus']:,} GPUs, ${out['usd_per_hour']:,.2f}/h"
        + (f", ${per_million:,.3f} per million output tokens" if per_million is not None else "")
        + f" ({out['method']}{', optimal' if out['optimal'] else ''})",
        "",
        "Buy:",
    ]
    for p in out["purchases"]:
        lines.append(
            f"   {p['gpus_bought']:>4,} x {p['gpu']} at ${p['usd_per_gpu_hour']:,.2f}/GPU-h = ${p['usd_per_hour']:,.2f}/h"
            f" ({p['gpus_used']:,} used): {', '.join(p['workloads'] or [])}"
        )
    for tier in (CachePlacement.HOST, CachePlacement.DISK):
        bought = [a for a in out["assignments"] if a.get("kv_tier") == tier.value]
        if bought:
            lines.append(
                f"   {sum(a['host_memory_gib'] for a in bought):>,.1f} GiB {tier.medium} for KV tiers = "
                f"${sum(a['host_usd_per_hour'] for a in bought):,.2f}/h: {', '.join(a['workload'] for a in bought)}"
            )
    if out["assignments"]:
        lines += ["", "Workloads by concurrency:"]
    for a in out["assignments"]:
        cost = a["usd_per_million_output_tokens"]
        lines.append(
            f"   {a['workload']} / {a['model']}: {a['replicas']:,} x {a['gpu']} tp={a['tp']} pp={a['pp']} "
            f"{a['weight_dtype']}/{a['kv_dtype']}, B {a['planned_per_replica']:,} per replica (binding {a['binding']})"
            + (f", ${cost:,.3f}/M tokens" if cost is not None else "")
        )
        if a.get("kv_tier"):
            lines.append(f"      KV tier {a['kv_tier']}: {a['kv_tier_reason']}")
    if out["buckets"]:
        lines += ["", "Workloads by request rate (buckets):"]
    for b in out["buckets"]:
        lines.append(
            f"   {b['workload']} / {b['model']} {b['bucket']}: {b['share']:.0%} on {b['layout']} "
            f"(binding {b['binding']}), ${b['usd_per_million_output_tokens']:,.3f}/M tokens"
        )
    if out["packed"]:
        lines += ["", "Packed on shared GPUs (cheaper than a GPU each):", *packed_lines(pl.DataFrame(out["packed"]))]
        if out["whole_nodes"]:
            lines.append(
                "   (priced per GPU; the plan buys whole nodes, so a pack saves where the GPUs it frees empty a node)"
            )
    lines += [f"unserved: {u}" for u in out["unserved"]]
    lines += [f"note: {n}" for n in out["notes"]]
    return lines
