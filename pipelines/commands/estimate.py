"""`capplan estimate`: size one deployment and show the math (see DESIGN.md, Contracts)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, NoReturn

import typer

from capacity.explain import derivation
from capacity.memory import GIB
from capacity.memory import estimate as run_estimate
from capacity.spec import DeploymentSpec, GpuSku, SpecError


def fail(message: str) -> NoReturn:
    """A user error: one line on stderr, exit code 2."""
    typer.echo(f"capplan: error: {message}", err=True)
    raise typer.Exit(2)


def _gib_to_bytes(value: float | None) -> int | None:
    return None if value is None else round(value * GIB)


def estimate(
    model: Annotated[str, typer.Argument(help="Registry id, path to a config.json, or a directory with one.")],
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="GPU catalog id or alias (nvidia-smi/DCGM names too).")
    ] = None,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel size.")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel size.")] = 1,
    dtype: Annotated[
        str, typer.Option("--dtype", help="Weight dtype: auto|bf16|fp16|float32|fp8|int8|int4|mxfp4|nvfp4.")
    ] = "auto",
    kv_dtype: Annotated[
        str, typer.Option("--kv-dtype", help="KV dtype: auto|bf16|fp16|float32|fp8|fp8_e4m3|fp8_e5m2|int8.")
    ] = "auto",
    context: Annotated[
        int | None, typer.Option("--context", help="Tokens per sequence T (default: max model len).")
    ] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", help="Target concurrent sequences B.")] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option("--max-model-len", help="Engine max model length (-1: the largest that starts, vLLM's auto-fit)."),
    ] = None,
    async_scheduling: Annotated[
        bool | None,
        typer.Option(
            "--async-scheduling/--no-async-scheduling",
            help="vLLM async scheduling (default on, as on GPUs; off keeps one batch in flight, as the CPU build).",
        ),
    ] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option("--gpu-memory-utilization")] = None,
    engine: Annotated[str, typer.Option("--engine", help="vllm|sglang|trtllm|plain")] = "vllm",
    engine_version: Annotated[str | None, typer.Option("--engine-version")] = None,
    block_size: Annotated[int | None, typer.Option("--block-size")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option("--max-num-batched-tokens")] = None,
    max_num_seqs: Annotated[int | None, typer.Option("--max-num-seqs")] = None,
    gpu_memory_gib: Annotated[float | None, typer.Option("--gpu-memory-gib", help="Device total (GiB).")] = None,
    weights_gib: Annotated[float | None, typer.Option("--weights-gib", help="Weights per GPU (GiB).")] = None,
    overhead_gib: Annotated[
        float | None, typer.Option("--overhead-gib", help="All non-KV overhead per GPU (GiB).")
    ] = None,
    kv_cache_memory_gib: Annotated[
        float | None, typer.Option("--kv-cache-memory-gib", help="KV budget per GPU (GiB), skipping the budget.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the contract JSON object.")] = False,
) -> None:
    """Estimate one deployment: KV bytes per token, weights, budget, blocks, B_max, max context."""
    from models_registry.resolve import load_model
    from models_registry.sources.gpu_catalog import find_gpu_sku

    for name, value in (("--tp", tp), ("--pp", pp)):
        if value < 1:
            fail(f"{name} must be >= 1, got {value}")
    for name, number in (
        ("--context", context),
        ("--concurrency", concurrency),
        ("--max-model-len", None if max_model_len == -1 else max_model_len),
        ("--block-size", block_size),
        ("--max-num-batched-tokens", max_num_batched_tokens),
        ("--max-num-seqs", max_num_seqs),
    ):
        if number is not None and number < 1:
            fail(f"{name} must be a positive integer, got {number}")
    for name, gib in (
        ("--gpu-memory-gib", gpu_memory_gib),
        ("--weights-gib", weights_gib),
        ("--overhead-gib", overhead_gib),
        ("--kv-cache-memory-gib", kv_cache_memory_gib),
    ):
        if gib is not None and gib < 0:
            fail(f"{name} must not be negative, got {gib}")
    if gpu is None and gpu_memory_gib is None and kv_cache_memory_gib is None:
        fail("give --gpu SKU, or --gpu-memory-gib for hardware not in the catalog")
    try:
        resolved = load_model(model)
    except (LookupError, SpecError, OSError) as exc:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    sku: GpuSku | None = None
    if gpu is not None:
        try:
            sku = find_gpu_sku(gpu)
        except LookupError as exc:
            fail(str(exc).strip("'\""))
    deployment = DeploymentSpec(
        tp=tp,
        pp=pp,
        weight_dtype=dtype,
        kv_dtype=kv_dtype,
        engine=engine,
        engine_version=engine_version,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        async_scheduling=async_scheduling,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        gpu_memory_bytes=_gib_to_bytes(gpu_memory_gib),
        weights_bytes_per_gpu=_gib_to_bytes(weights_gib),
        overhead_bytes_per_gpu=_gib_to_bytes(overhead_gib),
        kv_cache_memory_bytes=_gib_to_bytes(kv_cache_memory_gib),
    )
    try:
        result = run_estimate(
            resolved.spec,
            deployment,
            gpu=sku,
            model_name=resolved.repo_id,
            checkpoint_bytes=resolved.checkpoint_bytes,
            context_tokens=context,
            concurrency=concurrency,
        )
    except SpecError as exc:
        fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps(result.contract(), indent=2) + "\n")
        return
    for line in derivation(result, resolved.spec):
        typer.echo(line)
