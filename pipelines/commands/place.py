"""`capplan place`: the cheapest layouts serving a model at a load within latency targets
(`recommendations.serving_plan`); computed directly, the published warehouse is not read."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from capacity.spec import SpecError
from pipelines.commands.common import fail, resolve_gpu, resolve_model
from pipelines.commands.estimate import AsJsonOption, EngineOption, EngineVersionOption, MaxModelLenOption
from recommendations.serving_plan import DEFAULT_TOP, Percentile, PlaceAnswer, PlaceQuery, ServedModel, place_model

ModelArgument = Annotated[str, typer.Argument(metavar="MODEL", help="Registry id, or a path to a config.json.")]
TpotOption = Annotated[
    float | None,
    typer.Option("--tpot-ms", metavar="MS", help="Time per output token each request must meet (at --percentile)."),
]
TtftOption = Annotated[
    float | None,
    typer.Option("--ttft-ms", metavar="MS", help="Time to first token each request must meet (at --percentile)."),
]
RateOption = Annotated[
    float | None,
    typer.Option(
        "--request-rate",
        metavar="R",
        help="Requests/s to serve, all replicas together (Poisson arrivals; the targets are then checked by "
        "simulating a replica at its share).",
    ),
]
ConcurrencyOption = Annotated[
    int | None,
    typer.Option("--concurrency", metavar="C", help="Concurrent requests to hold, all replicas together."),
]
InputOption = Annotated[int, typer.Option("--input-len", metavar="I", help="Prompt tokens per request.")]
OutputOption = Annotated[int, typer.Option("--output-len", metavar="O", help="Generated tokens per request.")]
PercentileOption = Annotated[
    Percentile,
    typer.Option(
        "--percentile",
        case_sensitive=False,
        help="Where the simulated latency distribution must meet the targets (with --request-rate).",
    ),
]
GpusOption = Annotated[
    list[str] | None,
    typer.Option("--gpu", metavar="SKU", help="Only this GPU (repeat for several; default: every GPU with a price)."),
]
DtypePolicyOption = Annotated[
    str,
    typer.Option(
        "--dtype-policy",
        metavar="POLICY",
        help="Weight / KV dtypes allowed: native (the checkpoint as published), fp8-kv, fp8 (fp8 weights and "
        "KV where the GPU has fp8), any (also int4 weights).",
    ),
]
TopOption = Annotated[int, typer.Option("--top", metavar="N", help="Options to show, cheapest first.")]
ExplainOption = Annotated[bool, typer.Option("--explain", help="Show the derivation of the cheapest option.")]


def place(
    model: ModelArgument,
    tpot_ms: TpotOption = None,
    ttft_ms: TtftOption = None,
    request_rate: RateOption = None,
    concurrency: ConcurrencyOption = None,
    input_len: InputOption = 1024,
    output_len: OutputOption = 256,
    percentile: PercentileOption = Percentile.P99,
    gpu: GpusOption = None,
    engine: EngineOption = "vllm",
    engine_version: EngineVersionOption = None,
    max_model_len: MaxModelLenOption = None,
    dtype_policy: DtypePolicyOption = "fp8",
    top: TopOption = DEFAULT_TOP,
    explain: ExplainOption = False,
    as_json: AsJsonOption = False,
) -> None:
    """The cheapest layouts (GPU, TP x PP, dtypes, replicas) serving MODEL at a load within TPOT / TTFT targets."""
    for name, value in (("--tpot-ms", tpot_ms), ("--ttft-ms", ttft_ms), ("--request-rate", request_rate)):
        if value is not None and not 0 < value < 1e9:
            fail(f"{name} must be a positive number, got {value:g}")
    for name, count in (("--concurrency", concurrency), ("--input-len", input_len), ("--output-len", output_len)):
        if count is not None and count < 1:
            fail(f"{name} must be a positive integer, got {count}")
    if max_model_len is not None and max_model_len < input_len + output_len:
        fail(f"--max-model-len {max_model_len:,} is below --input-len + --output-len ({input_len + output_len:,})")
    resolved = resolve_model(model)
    skus = [resolve_gpu(name) for name in gpu or ()]
    query = PlaceQuery(
        input_tokens=input_len,
        output_tokens=output_len,
        request_rate_per_s=request_rate,
        concurrency=concurrency,
        tpot_ms=tpot_ms,
        ttft_ms=ttft_ms,
        percentile=percentile,
        max_model_len=max_model_len,
        dtype_policy=dtype_policy,
        engine=engine,
        engine_version=engine_version,
        gpus=tuple(dict.fromkeys(s.id for s in skus)),
        top=top,
    )
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
    if as_json:
        sys.stdout.write(json.dumps(answer.contract(explain=explain), indent=2) + "\n")
        return
    for line in _lines(answer, explain=explain):
        typer.echo(line)


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
            f"{served.replicas * o.gpus_per_replica} GPUs, ${served.usd_per_hour:,.2f}/h"
            + (f", ${per_million:,.3f}/M output tokens" if per_million is not None else "")
        )
        speed = f"TPOT {o.tpot_ms:,.1f} ms, TTFT {o.ttft_ms:,.0f} ms" if o.tpot_ms is not None else "speed unknown"
        lines.append(
            f"   B {o.planned_per_replica:,} per replica (binding {served.contract(answer.model, q, rank)['binding']}); {speed}"
        )
        if served.sim is not None:
            lines.append(
                f"   simulated: TTFT p50 {served.sim.ttft.median_ms:,.0f} / p99 {served.sim.ttft.p99_ms:,.0f} ms, "
                f"TPOT p50 {served.sim.tpot.median_ms:,.1f} / p99 {served.sim.tpot.p99_ms:,.1f} ms "
                f"(replicas: {served.replicas_binding})"
            )
    if answer.infeasible:
        lines += ["", "Not feasible:"]
        lines += [f"   {gpu}: {why}" for gpu, why in answer.infeasible]
    lines += [f"note: {note}" for note in answer.notes]
    if explain:
        lines += ["", *answer.derivation()]
    return lines
