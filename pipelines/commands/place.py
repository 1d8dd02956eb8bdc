"""`capplan place`: the cheapest layouts serving a model at a load within latency targets
(`recommendations.serving_plan`); computed directly, the published warehouse is not read."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from capacity.planning_types import DTYPE_POLICIES
from capacity.spec import SpecError
from pipelines.commands.common import fail, resolve_gpu, resolve_model
from pipelines.commands.options import PLACE_OPTIONS, given_fields, takes
from recommendations.deploy import DeployError, ManifestKind, ServingPlan, render
from recommendations.serving_plan import (
    PlaceAnswer,
    PlaceQuery,
    ServedModel,
    command_line,
    place_model,
)


@takes(PLACE_OPTIONS)
def place(ctx: typer.Context, **options: Any) -> None:
    """The cheapest layouts (GPU, TP x PP, dtypes, replicas) serving MODEL at a load within TPOT / TTFT targets."""
    workload, workloads, explain, as_json, manifest, rank = (
        options.pop(name) for name in ("workload", "workloads", "explain", "as_json", "manifest", "rank")
    )
    asked = options  # what to place; the options popped say how to answer
    if workload is not None:
        asked = _from_workload(ctx, asked, workload, workloads)
    if asked["model"] is None:
        fail("give MODEL, or --workload NAME")
    query = _query(asked)
    resolved = resolve_model(asked["model"])
    served = ServedModel(
        resolved.spec,
        resolved.repo_id,
        resolved.checkpoint_bytes,
        resolved.repo_id if resolved.source in ("registry", "bundled", "hf-cache") else None,
    )
    from models_registry.sources.gpu_catalog import load_gpu_skus

    try:
        answer = place_model(served, query, load_gpu_skus())
    except SpecError as exc:
        fail(str(exc))
    if not answer.options:
        fail(f"no layout serves {served.model_id} as asked: {_why_none(answer)}")
    deployed = None if manifest is None else _manifest(answer, manifest, rank)
    if as_json:
        out = answer.contract(explain=explain)
        if manifest is not None:
            out["manifest"] = {"kind": manifest.value, "rank": rank, "yaml": deployed}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    if deployed is not None:
        sys.stdout.write(deployed)
        return
    for line in _lines(answer, explain=explain):
        typer.echo(line)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _manifest(answer: PlaceAnswer, kind: ManifestKind, rank: int) -> str:
    """The YAML (or command line) that deploys option `rank`; a one-line error where it cannot."""
    if not 1 <= rank <= len(answer.options):
        fail(f"--rank {rank} is not an option: {len(answer.options)} found (--top shows more)")
    chosen = answer.options[rank - 1]
    try:
        return render(ServingPlan.from_mapping(chosen.plan(answer.model)), kind)
    except DeployError as exc:
        fail(f"option {rank} cannot be deployed as {kind.value}: {exc}")


def _query(asked: dict[str, Any]) -> PlaceQuery:
    """The options, checked (a one-line error for the first out of range), as a query: those named after a
    query field as given, the rest derived."""
    for name in ("tpot_ms", "ttft_ms", "request_rate"):
        value = asked[name]
        if value is not None and not 0 < value < 1e9:
            fail(f"--{name.replace('_', '-')} must be a positive number, got {value:g}")
    for name in ("concurrency", "input_len", "output_len", "top", "max_simulations"):
        count = asked[name]
        if count is not None and count < 1:
            fail(f"--{name.replace('_', '-')} must be a positive integer, got {count}")
    prompt, out, limit = asked["input_len"], asked["output_len"], asked["max_model_len"]
    if limit is not None and limit < prompt + out:
        fail(f"--max-model-len {limit:,} is below --input-len + --output-len ({prompt + out:,})")
    policy = asked["dtype_policy"]
    if isinstance(policy, str):
        if policy not in DTYPE_POLICIES:
            fail(f"unknown --dtype-policy {policy!r}; expected one of {', '.join(DTYPE_POLICIES)}")
        policy = DTYPE_POLICIES[policy]
    skus = [resolve_gpu(name) for name in asked["gpu"] or ()]
    derived = {
        "request_rate_per_s": asked["request_rate"],
        "dtype_policy": policy,
        "gpus": tuple(dict.fromkeys(s.id for s in skus)),
        "workload": asked.get("workload_name") or "ad-hoc",
    }
    return PlaceQuery(prompt, out, **(given_fields(asked, PlaceQuery) | derived))


def _from_workload(ctx: typer.Context, asked: dict[str, Any], name: str, path: Path | None) -> dict[str, Any]:
    """`asked` with what the workload profile sets, where the command line did not set it."""
    from recommendations.workloads import load_workloads

    profiles = load_workloads(path)
    profile = next((p for p in profiles.profiles if p.name == name), None)
    if profile is None:
        why = dict(profiles.errors).get(name) or dict(profiles.errors).get("<file>")
        known = ", ".join(p.name for p in profiles.profiles)
        fail(f"workload {name!r}: {why}" if why else f"no workload {name!r} in {profiles.path} (there: {known})")
    out = profile.generated_tokens
    from_profile = {
        "model": profile.models[0] if len(profile.models) == 1 else None,
        "tpot_ms": profile.tpot_ms_target,
        "ttft_ms": profile.ttft_ms_target,
        "request_rate": profile.request_rate_per_s,
        "concurrency": None if profile.request_rate_per_s is not None else profile.target_concurrency,
        "input_len": profile.context_tokens - out,
        "output_len": out,
        "gpu": list(profile.gpus) or None,
        "engine": profile.engine,
        "engine_version": profile.engine_version,
        "max_model_len": profile.model_len,
        "dtype_policy": profile.dtype_policy,
    }
    merged = dict(asked)
    for key, value in from_profile.items():
        source = ctx.get_parameter_source(key)
        if source is None or source.name != "COMMANDLINE":
            merged[key] = value
    if merged["model"] is None:
        fail(f"workload {name!r} serves {', '.join(profile.models)}: name one as MODEL")
    merged["workload_name"] = name
    return merged


def _why_none(answer: PlaceAnswer) -> str:
    if answer.notes:
        return answer.notes[0]
    reasons = sorted({why for _gpu, why in answer.infeasible})
    return "; ".join(reasons[:3]) or "no GPU with a price"


def _lines(answer: PlaceAnswer, *, explain: bool) -> list[str]:
    q = answer.query
    load = (
        f"{q.request_rate_per_s:g} req/s"
        if q.request_rate_per_s is not None
        else f"{q.concurrency:,} concurrent"
        if q.concurrency is not None
        else "one replica"
    )
    targets = ", ".join(
        f"{name} <= {value:g} ms" for name, value in (("TPOT", q.tpot_ms), ("TTFT", q.ttft_ms)) if value is not None
    )
    lines = [
        f"{answer.model.model_id}: {q.input_tokens:,} in + {q.output_tokens:,} out at {load}"
        + (f", {q.percentile.value} {targets}" if targets else ""),
        "",
    ]
    for rank, served in enumerate(answer.options, start=1):
        o = served.option
        per_million = served.usd_per_million_output_tokens(q)
        lines.append(
            f"{rank}. {served.replicas} x {o.gpu} tp={o.tp} pp={o.pp} {o.weight_dtype}/{o.kv_dtype}: "
            f"{_count(served.replicas * o.gpus_per_replica, 'GPU')}, ${served.usd_per_hour:,.2f}/h"
            + (f", ${per_million:,.3f}/M output tokens" if per_million is not None else "")
        )
        speed = f"TPOT {o.tpot_ms:,.1f} ms, TTFT {o.ttft_ms:,.0f} ms" if o.tpot_ms is not None else "speed unknown"
        lines.append(f"   B {o.planned_per_replica:,} per replica (binding {served.binding}); {speed}")
        if served.sim is not None:
            lines.append(
                f"   simulated: TTFT p50 {served.sim.ttft.median_ms:,.0f} / p99 {served.sim.ttft.p99_ms:,.0f} ms, "
                f"TPOT p50 {served.sim.tpot.median_ms:,.1f} / p99 {served.sim.tpot.p99_ms:,.1f} ms "
                f"(replicas: {served.replicas_binding})"
            )
        if rank == 1:
            command = command_line(served.plan(answer.model))
            lines.append(f"   command: {command['text'] or command['reason']}")
    if answer.infeasible:
        lines += ["", "Not feasible:"]
        by_reason: dict[str, list[str]] = {}
        for gpu, why in answer.infeasible:
            by_reason.setdefault(why, []).append(gpu)
        lines += [f"   {', '.join(gpus)}: {why}" for why, gpus in by_reason.items()]
    lines += [f"note: {note}" for note in answer.notes]
    if explain:
        lines += ["", *answer.derivation()]
    return lines
