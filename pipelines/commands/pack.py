"""`capplan pack`: several models on one GPU, each with the KV budget its concurrency x context needs, started
in the order given; the engine command lines that realize the split (`capacity.packing`)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import typer

from pipelines.commands.common import fail, resolve_gpu, resolve_model
from pipelines.commands.options import PACK_OPTIONS, takes

_MEMBER = re.compile(r"^(?P<model>[^=\s]+)=(?P<concurrency>\d+)x(?P<context>\d+)$")


@takes(PACK_OPTIONS)
def pack(*, models: list[str], gpu: str, engine: str, engine_version: str | None, as_json: bool) -> None:
    """Fit several models on one GPU: each one's KV budget, its share of the GPU and its engine command."""
    from capacity.packing import PackMember, check_members
    from capacity.packing import pack as pack_members
    from capacity.spec import DeploymentSpec, SpecError
    from recommendations.packing import engine_commands

    sku = resolve_gpu(gpu)
    members = []
    for text in models:
        found = _MEMBER.match(text)
        if found is None:
            fail(f"--model {text!r}: expected MODEL=BxT, e.g. Qwen/Qwen2.5-0.5B-Instruct=16x4096")
        resolved = resolve_model(found["model"])
        deployment = DeploymentSpec(engine=engine, engine_version=engine_version)
        concurrency, context = int(found["concurrency"]), int(found["context"])
        members.append(
            PackMember(found["model"], resolved.spec, deployment, context, concurrency, resolved.checkpoint_bytes)
        )
    try:
        check_members(members)
        packing = pack_members(members, sku)
    except SpecError as exc:
        fail(str(exc))
    commands = engine_commands(packing) if packing.fits else ()
    out: dict[str, Any] = {
        "gpu": sku.id,
        "fits": packing.fits,
        "reason": packing.reason,
        "used_bytes": packing.used_bytes,
        "gpu_memory_bytes": sku.memory_total_bytes,
        "members": [
            {
                "start_order": m.start_order,
                "model": m.member.name,
                "concurrency": m.member.concurrency,
                "context_tokens": m.member.context_tokens,
                "kv_budget_bytes": m.kv_budget_bytes,
                "kv_cache_tokens": m.estimate.kv_cache_tokens,
                "gpu_memory_utilization": m.gpu_memory_utilization,
                "footprint_bytes": m.footprint_bytes,
                "others_at_start_bytes": m.others_at_start_bytes,
                "command": commands[i] if commands else None,
            }
            for i, m in enumerate(packing.members)
        ],
    }
    if as_json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    gib = 1 << 30
    typer.echo(f"{'FITS' if packing.fits else 'DOES NOT FIT'} on {sku.id}: {packing.reason}")
    for m in out["members"]:
        typer.echo(
            f"{m['start_order']}. {m['model']}: {m['concurrency']} x {m['context_tokens']:,} tokens, "
            f"KV {m['kv_budget_bytes'] / gib:.2f} GiB ({m['kv_cache_tokens']:,} tokens), holds "
            f"{m['footprint_bytes'] / gib:.2f} GiB, starts with {m['others_at_start_bytes'] / gib:.2f} GiB in use"
        )
        if m["command"]:
            typer.echo(f"   {m['command']}")
    if not packing.fits:
        raise typer.Exit(1)
