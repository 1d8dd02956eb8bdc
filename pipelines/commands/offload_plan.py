"""`capplan offload`: for one model on one GPU type, whether fewer GPUs plus host RAM serve a prefix-reusing
workload cheaper than more GPUs, at its hit rate and TTFT SLO (`capacity.offload_procurement`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from capacity.estimate import estimate as run_estimate
from capacity.offload_procurement import (
    CachedWorkload,
    HostMemoryPrice,
    TierOption,
    cheapest,
    replica_shape,
    tier_options,
)
from capacity.spec import DeploymentSpec, SpecError
from pipelines.commands.common import fail, resolve_gpu, resolve_model


def offload(
    model: Annotated[str, typer.Argument(help="Model id (registry, bundled) or a config.json path.")],
    gpu: Annotated[str, typer.Option("--gpu", help="Catalog GPU (it needs a price).")],
    concurrency: Annotated[int, typer.Option("--concurrency", help="Sequences in flight, fleet-wide.")],
    input_len: Annotated[int, typer.Option("--input-len", help="Prompt tokens per request.")],
    output_len: Annotated[int, typer.Option("--output-len", help="Output tokens per request.")],
    request_rate: Annotated[float, typer.Option("--request-rate", help="Requests per second, fleet-wide.")],
    hit_rate: Annotated[float, typer.Option("--hit-rate", help="Share of each prompt found in the cache (0-1).")],
    cached_tokens: Annotated[
        int, typer.Option("--cached-tokens", help="Reused prefix tokens the hit rate needs kept.")
    ],
    ttft_ms: Annotated[float, typer.Option("--ttft-ms", help="TTFT SLO in milliseconds.")],
    host_ram_usd_per_gib_hour: Annotated[
        float | None, typer.Option("--host-ram-usd-per-gib-hour", help="Host RAM price (none: offload not bought).")
    ] = None,
    host_ram_source: Annotated[str, typer.Option("--host-ram-source", help="Where the RAM price comes from.")] = "",
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel GPUs per replica.")] = 1,
    engine: Annotated[str, typer.Option("--engine", help="vllm | sglang | trtllm.")] = "vllm",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """GPUs only, fewer GPUs plus host RAM, or recompute: each option's replicas, TTFT and $ per million tokens."""
    if min(concurrency, input_len, tp) < 1 or output_len < 0 or cached_tokens < 0:
        fail("--concurrency, --input-len and --tp must be >= 1; --output-len and --cached-tokens >= 0")
    try:
        price = None
        if host_ram_usd_per_gib_hour is not None:
            price = HostMemoryPrice(host_ram_usd_per_gib_hour, host_ram_source)
        workload = CachedWorkload(request_rate, concurrency, input_len, output_len, hit_rate, cached_tokens, ttft_ms)
        resolved, sku = resolve_model(model), resolve_gpu(gpu)
        deployment = DeploymentSpec(tp=tp, engine=engine, max_model_len=input_len + output_len)
        est = run_estimate(resolved.spec, deployment, gpu=sku, checkpoint_bytes=resolved.checkpoint_bytes)
        if not est.starts:
            fail(est.reason)
        options = tier_options(workload, replica_shape(resolved.spec, est, sku, input_len), price)
    except SpecError as exc:
        fail(str(exc))
    chosen = cheapest(options)
    if as_json:
        typer.echo(
            json.dumps({"options": [_row(o) for o in options], "chosen": chosen.placement.value if chosen else None})
        )
        return
    for o in options:
        mark = "*" if o is chosen else " "
        typer.echo(
            f"{mark} {o.placement.value:<5} {o.replicas:>4} replicas  host {o.host_gib:>9,.1f} GiB  "
            f"${o.usd_per_hour:>9,.2f}/h  ${o.usd_per_million_tokens:.4f}/M tokens  {o.reason}"
        )
    if chosen is None:
        fail("no option meets the TTFT SLO", code=1)


def _row(o: TierOption) -> dict[str, object]:
    return {
        "placement": o.placement.value,
        "replicas": o.replicas,
        "host_gib": o.host_gib,
        "ttft_ms": round(o.ttft_ms, 3),
        "usd_per_hour": round(o.usd_per_hour, 6),
        "usd_per_million_tokens": round(o.usd_per_million_tokens, 6),
        "meets_slo": o.meets_slo,
        "reason": o.reason,
    }
