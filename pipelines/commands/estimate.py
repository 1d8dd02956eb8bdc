"""`capplan estimate`: size one deployment and show the math (see DESIGN.md, Contracts)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, NoReturn

import typer

from capacity.engines import ENGINE_NAMES
from capacity.explain import derivation, speed_derivation
from capacity.memory import GIB, KV_DTYPES, WEIGHT_DTYPES, Estimate
from capacity.memory import estimate as run_estimate
from capacity.performance import Performance, performance
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec, SpecError


def fail(message: str) -> NoReturn:
    """A user error: one line on stderr, exit code 2."""
    typer.echo(f"capplan: error: {message}", err=True)
    raise typer.Exit(2)


def _gib_to_bytes(value: float | None) -> int | None:
    return None if value is None else round(value * GIB)


# vLLM's spellings of `--dtype` / `--kv-cache-dtype` values, so a `vllm serve` command line pastes as is.
_VLLM_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float": "float32", "fp32": "float32"}


def _dtype_name(value: str) -> str:
    return _VLLM_DTYPES.get(value.lower(), value.lower())


def estimate(
    model: Annotated[
        str, typer.Argument(metavar="MODEL", help="Registry id, path to a config.json, or a directory with one.")
    ],
    gpu: Annotated[
        str | None, typer.Option("--gpu", metavar="SKU", help="GPU catalog id or alias (nvidia-smi/DCGM names too).")
    ] = None,
    tp: Annotated[
        int, typer.Option("--tp", "--tensor-parallel-size", "-tp", metavar="N", help="Tensor-parallel size.")
    ] = 1,
    pp: Annotated[
        int, typer.Option("--pp", "--pipeline-parallel-size", "-pp", metavar="N", help="Pipeline-parallel size.")
    ] = 1,
    dtype: Annotated[
        str,
        typer.Option(
            "--dtype",
            metavar="DTYPE",
            callback=_dtype_name,
            help=f"Weight dtype: {', '.join(WEIGHT_DTYPES)} (vLLM's bfloat16, float16, half, float too).",
        ),
    ] = "auto",
    kv_dtype: Annotated[
        str,
        typer.Option(
            "--kv-dtype",
            "--kv-cache-dtype",
            metavar="DTYPE",
            callback=_dtype_name,
            help=f"KV cache dtype: {', '.join(KV_DTYPES)}.",
        ),
    ] = "auto",
    context: Annotated[
        int | None, typer.Option("--context", metavar="T", help="Tokens per sequence T (default: max model len).")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", metavar="B", help="Target concurrent sequences B.")
    ] = None,
    input_len: Annotated[
        int | None,
        typer.Option("--input-len", metavar="I", help="Prompt tokens per request, for the speed block (TTFT)."),
    ] = None,
    output_len: Annotated[
        int | None,
        typer.Option(
            "--output-len", metavar="O", help="Generated tokens per request (default: min(256, T / 2)); T = I + O."
        ),
    ] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(
            "--max-model-len",
            metavar="T",
            help="Engine max model length (-1: the largest that starts, vLLM's auto-fit).",
        ),
    ] = None,
    async_scheduling: Annotated[
        bool | None,
        typer.Option(
            "--async-scheduling/--no-async-scheduling",
            metavar="",
            help="vLLM async scheduling (default on, as on GPUs; off keeps one batch in flight, as the CPU build).",
        ),
    ] = None,
    enforce_eager: Annotated[
        bool,
        typer.Option(
            "--enforce-eager",
            help="No CUDA graphs (vLLM --enforce-eager): from 0.21 the graph estimate is then not deducted.",
        ),
    ] = False,
    triton_kernels: Annotated[
        bool | None,
        typer.Option(
            "--triton-kernels/--no-triton-kernels",
            metavar="",
            help="The triton_kernels package installed beside vLLM 0.10.2-0.11.x (0.12+ bundles it): "
            "gpt-oss's MXFP4 experts on Hopper run the OAI Triton kernels, else Marlin (default: a pip install, without; "
            "--no-triton-kernels: Marlin on any release, as VLLM_MXFP4_USE_MARLIN=1).",
        ),
    ] = None,
    disable_custom_all_reduce: Annotated[
        bool,
        typer.Option(
            "--disable-custom-all-reduce",
            help="vLLM without its custom all-reduce: at TP > 1 the CUDA graphs capture NCCL's all-reduce.",
        ),
    ] = False,
    gpu_peer_access: Annotated[
        bool | None,
        typer.Option(
            "--gpu-peer-access/--no-gpu-peer-access",
            metavar="",
            help="Whether the GPUs pass vLLM's P2P test (default: over NVLink yes, over PCIe no): at TP 2 on PCIe, "
            "with it vLLM's custom all-reduce runs.",
        ),
    ] = None,
    enable_lora: Annotated[
        bool, typer.Option("--enable-lora", help="LoRA adapters are served (not sized: the row is flagged not modelled).")
    ] = False,
    cpu_offload_gb: Annotated[
        float | None,
        typer.Option("--cpu-offload-gb", metavar="GIB", help="Weights offloaded to host memory (not sized: flagged)."),
    ] = None,
    speculative: Annotated[
        bool,
        typer.Option("--speculative", help="Speculative decoding with a draft model or MTP (not sized: flagged)."),
    ] = False,
    speculative_config: Annotated[
        str | None,
        typer.Option("--speculative-config", metavar="JSON", help="vLLM's spelling of --speculative (the value is not read)."),
    ] = None,
    enable_dp_attention: Annotated[
        bool, typer.Option("--enable-dp-attention", help="SGLang DP attention (not sized: flagged).")
    ] = False,
    kv_transfer_config: Annotated[
        str | None,
        typer.Option("--kv-transfer-config", metavar="JSON",
                     help="vLLM KV connector, e.g. LMCache (its GPU buffers not sized: flagged; the value is not read)."),
    ] = None,
    gpu_memory_utilization: Annotated[
        float | None,
        typer.Option(
            "--gpu-memory-utilization",
            metavar="FRACTION",
            help="Share of device memory the engine may use (engine default: vLLM 0.9).",
        ),
    ] = None,
    engine: Annotated[
        str, typer.Option("--engine", metavar="ENGINE", help=f"Serving engine: {', '.join(ENGINE_NAMES)}.")
    ] = "vllm",
    engine_version: Annotated[
        str | None,
        typer.Option(
            "--engine-version",
            metavar="VERSION",
            help="Engine release whose rules apply (default: the latest profile).",
        ),
    ] = None,
    block_size: Annotated[
        int | None, typer.Option("--block-size", metavar="TOKENS", help="KV block size (default: the engine's).")
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-num-batched-tokens", metavar="TOKENS", help="Tokens per scheduler step (sizes the activation peak)."
        ),
    ] = None,
    max_num_seqs: Annotated[
        int | None,
        typer.Option("--max-num-seqs", metavar="N", help="Most sequences the engine runs at once (caps B_max)."),
    ] = None,
    gpu_memory_gib: Annotated[
        float | None,
        typer.Option("--gpu-memory-gib", metavar="GIB", help="Device total (GiB), for hardware not in the catalog."),
    ] = None,
    weights_gib: Annotated[
        float | None,
        typer.Option("--weights-gib", metavar="GIB", help="Weights per GPU (GiB), overriding the checkpoint."),
    ] = None,
    overhead_gib: Annotated[
        float | None, typer.Option("--overhead-gib", metavar="GIB", help="All non-KV overhead per GPU (GiB).")
    ] = None,
    kv_cache_memory_gib: Annotated[
        float | None,
        typer.Option("--kv-cache-memory-gib", metavar="GIB", help="KV budget per GPU (GiB), skipping the budget."),
    ] = None,
    kv_cache_memory_bytes: Annotated[
        int | None,
        typer.Option("--kv-cache-memory-bytes", metavar="BYTES", help="The same in bytes, as vLLM spells it."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print the contract JSON object.")] = False,
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
        ("--input-len", input_len),
        ("--output-len", output_len),
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
    if kv_cache_memory_bytes is not None:
        if kv_cache_memory_gib is not None:
            fail("give --kv-cache-memory-gib or --kv-cache-memory-bytes, not both")
        kv_cache_memory_gib = kv_cache_memory_bytes / GIB
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
        enforce_eager=enforce_eager or None,
        triton_kernels=triton_kernels,
        disable_custom_all_reduce=disable_custom_all_reduce or None,
        gpu_peer_access=gpu_peer_access,
        lora=enable_lora or None,
        cpu_offload_gib=cpu_offload_gb or None,
        speculative=(speculative or speculative_config is not None) or None,
        kv_connector=kv_transfer_config is not None or None,
        dp_attention=enable_dp_attention or None,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        gpu_memory_bytes=_gib_to_bytes(gpu_memory_gib),
        weights_bytes_per_gpu=_gib_to_bytes(weights_gib),
        overhead_bytes_per_gpu=_gib_to_bytes(overhead_gib),
        kv_cache_memory_bytes=_gib_to_bytes(kv_cache_memory_gib),
    )
    if context is None and input_len is not None:
        context = input_len + (output_len if output_len is not None else min(256, input_len))
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
    speed = _speed(resolved.spec, result, sku, dtype, concurrency, input_len, output_len)
    if as_json:
        contract = result.contract()
        if speed is not None:
            contract |= speed.contract()
        sys.stdout.write(json.dumps(contract, indent=2) + "\n")
        return
    for line in derivation(result, resolved.spec):
        typer.echo(line)
    if speed is not None:
        typer.echo("")
        for line in speed_derivation(speed):
            typer.echo(line)


def _speed(
    model: ModelSpec,
    result: Estimate,
    sku: GpuSku | None,
    weight_dtype: str,
    concurrency: int | None,
    input_len: int | None,
    output_len: int | None,
) -> Performance | None:
    """The speed block for `--concurrency` requests (or `--input-len`): none without a catalog GPU
    whose bandwidth and peak FLOPS are known, or where the deployment does not fit."""
    if sku is None or (concurrency is None and input_len is None) or not result.fits:
        return None
    if sku.memory_bandwidth_gbps is None or sku.bf16_dense_tflops is None:
        return None
    context = result.context_tokens
    out = output_len if output_len is not None else min(256, max(1, context // 2))
    prompt = input_len if input_len is not None else max(1, context - out)
    chunk = result.pool.max_num_batched_tokens or prompt
    try:
        return performance(
            model,
            result,
            sku,
            concurrency=concurrency or 1,
            input_tokens=prompt,
            output_tokens=out,
            chunk_tokens=chunk,
            weight_dtype=weight_dtype,
        )
    except SpecError:
        return None
