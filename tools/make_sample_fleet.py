#!/usr/bin/env python3
"""Write the SAMPLE telemetry fleet shipped in telemetry/sample/.

    .venv/bin/python tools/make_sample_fleet.py            # rewrite telemetry/sample/
    .venv/bin/python tools/make_sample_fleet.py --out DIR  # somewhere else

Everything here is made up, seeded (SEED) and deterministic for a given capacity engine: each
deployment's "measured" numbers are capplan's own prediction (capacity.estimate.estimate) perturbed
by the errors below, then printed the way that vLLM version prints them. Rerun after a change to
the capacity engine or the catalog to refresh the sample (and the counts in
tests/test_telemetry_sample.py).

Assumptions (each a documented, deliberate error between capplan and "the engine"):

* weights: predicted x N(1.002, 0.003) (torch allocations during load beyond the tensors).
* activation peak: predicted x engine factor x GPU factor x lognormal(0, 0.04), where the engine
  factor is 1.30 for V0 (<0.8, profiles a whole max_model_len prefill), 1.15 for early V1
  (0.8-0.9), 1.05 from 0.10, and the GPU factor 1.25 on MI300X (ROCm GEMM workspaces), else 1.
* non-torch: V0 adds 1.40 GiB (V0 counted the CUDA context and cuBLAS workspace here: 1.79 GiB at
  TP=1 in vllm PR #10511); V1 x 0.75 at TP=1 (V1 counts only the increase during the profiling
  forward: 0.25 GiB in a public 0.19 log) and x 1.15 with TP>1 (NCCL / custom all-reduce buffers); MI300X x 1.6 (RCCL); x lognormal(0, 0.04).
* CUDA graphs: captured after the KV cache is sized (not in the budget for these versions),
  0.35 GiB + 10 MiB per local layer, x N(1, 0.1).
* KV cache memory = total x utilization - weights - activation - non-torch, exactly as vLLM;
  blocks, "GPU KV cache size" and "Maximum concurrency" are recomputed from it with capplan's
  pool rules for that vLLM version (capplan reproduces vLLM's block arithmetic).
* load: each deployment gets a daily profile (UTC, peak mid-afternoon); "normal" peaks at 55-80 %
  of its sequence capacity, "busy" near 95 %, "saturating" at 130-160 %, where requests queue
  (waiting > 0), KV usage pins near 1.0 and preemptions climb.
* speed (`vllm-speed.prom`, the deployments in SPEED_DEPLOYMENTS, every 3 hours): capplan's own
  performance model (capacity.performance) at the hour's running requests, with prompts of
  0.9 x the mean running context and outputs of a fifth of it; the engine decodes 8 % slower than
  predicted (TPOT x lognormal(0.08, 0.05) per deployment, x lognormal(0, 0.03) per hour) and its
  TTFT is 1.3 x the steady-state prediction (queueing); per-token ITL and per-request TTFT are
  lognormal about those means (sigma 0.3 and 0.5), bucketed with vLLM's own bounds.
* DCGM framebuffer used = requested memory + CUDA graphs + CUDA context (0.5 GiB) + jitter;
  free = the nvidia-smi total - used - 0.45 GiB reserved. AMD GPUs have no DCGM (none written).

Also written: one CSV export from "another team's platform" (three deployments without logs, two
bad rows) and malformed/ files (truncated lines, a percent where a fraction belongs, negative
values, framebuffer in bytes, latency histograms whose buckets decrease or lack +Inf, an unknown model, a duplicate scrape, an unknown file type), so a
default run shows rejects.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from capacity import engine_constants as ec
from capacity.estimate import Estimate, estimate
from capacity.performance import performance
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec
from models_registry.normalize import spec_from_snapshot
from models_registry.sources.bundled import find_entry, snapshot_of
from models_registry.sources.gpu_catalog import find_gpu_sku, read_gpu_catalog

SEED = 20250602
DAY = dt.datetime(2025, 6, 2, tzinfo=dt.UTC)  # the metrics day (UTC)
STARTED = dt.datetime(2025, 6, 1, 18, 0, tzinfo=dt.UTC)  # engines start the evening before
GIB = 1 << 30
MIB = 1 << 20
OUT = Path(__file__).resolve().parent.parent / "telemetry" / "sample"
FLEET_PATH = Path(__file__).with_name("sample_fleet.yaml")  # the deployments, one a row

# vLLM / DCGM names of the GPUs in the fleet
DCGM_NAMES = {
    "h100-sxm-80gb": ("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB_HBM3"),
    "h200-sxm-141gb": ("NVIDIA H200", "NVIDIA_H200"),
    "a100-sxm-80gb": ("NVIDIA A100-SXM4-80GB", "NVIDIA_A100-SXM4-80GB"),
    "l40s-48gb": ("NVIDIA L40S", "NVIDIA_L40S"),
    "l4-24gb": ("NVIDIA L4", "NVIDIA_L4"),
    "mi300x-192gb": ("AMD Instinct MI300X", "AMD_Instinct_MI300X"),
}


@dataclass(frozen=True)
class Deployment:
    id: str
    model: str
    gpu: str
    tp: int = 1
    pp: int = 1
    version: str = "0.11.0"
    util: float = 0.9
    max_model_len: int = 32768
    weight_dtype: str = "auto"  # --dtype / --quantization as the estimate understands it
    kv_dtype: str = "auto"
    load: str = "normal"  # normal | busy | saturating
    context_fraction: float = 0.08  # mean tokens per running sequence / max_model_len
    gpu_source: str = "sidecar"  # where the log shows the GPU: smi-L | smi | smi-csv | device_name | sidecar
    debug: bool = False  # VLLM_LOGGING_LEVEL=DEBUG (V1 >= 0.10 then prints the profiling breakdown)
    served_name: str | None = None  # --served-model-name (the Prometheus model_name label)
    model_path: str | None = None  # a local path instead of the repo id
    prefix_caching: bool = True
    failed_first_len: int | None = None  # a first start that failed at this max_model_len
    csv_only: bool = False


def load_fleet(path: Path = FLEET_PATH) -> tuple[Deployment, ...]:
    """The deployments of the fleet table at `path`, in its order."""
    return tuple(Deployment(**row) for row in yaml.safe_load(path.read_text(encoding="utf-8")))


FLEET: tuple[Deployment, ...] = load_fleet()


# --- the numbers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """What the engine "reports" for one start: per GPU, bytes."""

    total: int
    requested: int
    weights: int
    activation: int
    non_torch: int
    cuda_graphs: int
    kv: int
    est: Estimate  # capplan's pool rules applied to the measured KV memory
    cpu_blocks: int


def _version(v: str) -> tuple[int, ...]:
    return ec.parse_version(v)


def generation(v: str) -> str:
    return "v0" if _version(v) < (0, 8) else "v1"


def load_model(repo_id: str) -> tuple[ModelSpec, int | None]:
    entry = find_entry(repo_id)
    if entry is None:
        raise SystemExit(f"{repo_id} is not in the bundled catalog")
    snapshot = snapshot_of(entry)
    return spec_from_snapshot(snapshot)[1], snapshot.checkpoint_bytes


def spec_of(d: Deployment, max_model_len: int, **overrides: int) -> DeploymentSpec:
    return DeploymentSpec(
        tp=d.tp,
        pp=d.pp,
        weight_dtype=d.weight_dtype,
        kv_dtype=d.kv_dtype,
        engine_version=d.version,
        gpu_memory_utilization=d.util,
        max_model_len=max_model_len,
        **overrides,  # type: ignore[arg-type]
    )


def measure(d: Deployment, model: ModelSpec, ckpt: int | None, gpu: GpuSku, max_len: int) -> Measured:
    """The engine's numbers for one start: the same every time for a deployment and max_model_len."""
    rng = random.Random(f"{SEED}:{d.id}:{max_len}")
    predicted = estimate(model, spec_of(d, max_len), gpu=gpu, model_name=d.model, checkpoint_bytes=ckpt)
    gen = generation(d.version)
    engine_factor = 1.30 if gen == "v0" else 1.15 if _version(d.version) < (0, 10) else 1.05
    gpu_factor = 1.25 if gpu.id.startswith("mi300") else 1.0
    weights = round(predicted.weights_bytes_per_gpu * rng.gauss(1.002, 0.003))
    activation = round(
        predicted.activation_peak_bytes_per_gpu * engine_factor * gpu_factor * rng.lognormvariate(0, 0.04)
    )
    if gen == "v0":
        non_torch = predicted.non_torch_bytes_per_gpu + round(1.40 * GIB)
    else:
        non_torch = round(predicted.non_torch_bytes_per_gpu * (0.75 if d.tp == 1 else 1.15))
    if gpu.id.startswith("mi300"):
        non_torch = round(non_torch * 1.6)
    non_torch = round(non_torch * rng.lognormvariate(0, 0.04))
    layers = math.ceil(model.num_layers / d.pp)
    cuda_graphs = round((0.35 * GIB + layers * 10 * MIB) * rng.gauss(1, 0.1))
    total = gpu.memory_total_bytes
    requested = int(total * d.util)
    kv = requested - weights - activation - non_torch
    pool = estimate(
        model, spec_of(d, max_len, kv_cache_memory_bytes=max(kv, 0)), gpu=gpu, model_name=d.model, checkpoint_bytes=ckpt
    )
    block_bytes = pool.kv_bytes_per_token_per_gpu * pool.block_size or 1
    return Measured(total, requested, weights, activation, non_torch, cuda_graphs, kv, pool, 4 * GIB // block_bytes)


# --- the log ---------------------------------------------------------------------------------------


def g2(n: int) -> str:
    return f"{n / GIB:.2f}"


class Clock:
    def __init__(self, start: dt.datetime) -> None:
        self.t = start

    def __call__(self, seconds: float = 1.0) -> str:
        self.t += dt.timedelta(seconds=seconds)
        return self.t.strftime("%m-%d %H:%M:%S")


def _quant(model: ModelSpec, d: Deployment) -> str | None:
    if d.weight_dtype == "fp8":
        return "fp8"
    if model.quantization is None:
        return None
    method = model.quantization.method
    return {"awq": "awq_marlin", "gptq": "gptq_marlin"}.get(method, method)


def startup_log(
    d: Deployment, model: ModelSpec, ckpt: int | None, gpu: GpuSku, rng: random.Random
) -> tuple[str, dt.datetime]:
    """The pasted log, and when the (last) engine start finished."""
    clock = Clock(STARTED + dt.timedelta(minutes=rng.randrange(0, 180)))
    smi_name, device_name = DCGM_NAMES[gpu.id]
    lines: list[str] = []
    n_gpus = d.tp * d.pp
    if d.gpu_source == "smi-L":
        lines.append("$ nvidia-smi -L")
        lines += [f"GPU {i}: {smi_name} (UUID: GPU-{rng.getrandbits(32):08x}-{i:04d})" for i in range(n_gpus)]
    elif d.gpu_source == "smi-csv":
        lines += ["$ nvidia-smi --query-gpu=name,memory.total --format=csv", "name, memory.total [MiB]"]
        lines += [f"{smi_name}, {round(gpu.memory_total_bytes / MIB) + 512} MiB"] * n_gpus
    elif d.gpu_source == "smi":
        lines += _nvidia_smi(smi_name, gpu, n_gpus)
    starts = [d.failed_first_len, d.max_model_len] if d.failed_first_len else [d.max_model_len]
    for i, max_len in enumerate(starts):
        if i:
            clock(rng.uniform(60, 600))  # someone reads the error and restarts
        lines += _one_start(d, model, ckpt, gpu, rng, clock, max_len, device_name)
    return "\n".join(lines) + "\n", clock.t.replace(microsecond=0)


def _nvidia_smi(name: str, gpu: GpuSku, n: int) -> list[str]:
    total = round(gpu.memory_total_bytes / MIB) + 469
    out = [
        "$ nvidia-smi",
        "+-----------------------------------------------------------------------------------------+",
        "| NVIDIA-SMI 550.90.07              Driver Version: 550.90.07      CUDA Version: 12.4     |",
        "|-----------------------------------------+------------------------+----------------------+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "|=========================================+========================+======================|",
    ]
    for i in range(n):
        out.append(f"| {i:>3}  {name:<26} On  |   00000000:{0x18 + i:02X}:00.0 Off |                    0 |")
        out.append(f"| N/A   31C    P0             71W /  400W |       4MiB / {total:>6}MiB |      0%      Default |")
    out.append("+-----------------------------------------+------------------------+----------------------+")
    return out


def _command(d: Deployment, max_len: int) -> str:
    model = d.model_path or d.model
    flags = []
    if d.tp > 1:
        flags.append(f"--tensor-parallel-size {d.tp}")
    if d.pp > 1:
        flags.append(f"--pipeline-parallel-size {d.pp}")
    flags.append(f"--max-model-len {max_len}")
    flags.append(f"--gpu-memory-utilization {d.util}")
    if d.kv_dtype != "auto":
        flags.append(f"--kv-cache-dtype {d.kv_dtype}")
    if d.weight_dtype == "fp8":
        flags.append("--quantization fp8")
    if d.served_name:
        flags.append(f"--served-model-name {d.served_name}")
    if d.prefix_caching and generation(d.version) == "v0":
        flags.append("--enable-prefix-caching")
    if generation(d.version) == "v0":
        return f"$ python -m vllm.entrypoints.openai.api_server --model {model} " + " ".join(flags)
    return f"$ vllm serve {model} " + " \\\n    ".join(
        [" ".join(flags[:3]), *([" ".join(flags[3:])] if flags[3:] else [])]
    )


def _one_start(
    d: Deployment,
    model: ModelSpec,
    ckpt: int | None,
    gpu: GpuSku,
    rng: random.Random,
    clock: Clock,
    max_len: int,
    device_name: str,
) -> list[str]:
    m = measure(d, model, ckpt, gpu, max_len)
    gen = generation(d.version)
    v = _version(d.version)
    name = d.model_path or d.model
    served = d.served_name or name
    quant = _quant(model, d)
    dtype = "torch.float16" if model.torch_dtype == "float16" else "torch.bfloat16"
    kv_dtype = d.kv_dtype
    api = "(APIServer pid=1) " if v >= (0, 10) else ""
    core = "(EngineCore_DP0 pid=283) " if v >= (0, 11) else "(EngineCore_0 pid=283) " if v >= (0, 10) else ""
    ranks = [
        f"(Worker_TP{r} pid={410 + r}) " if v >= (0, 11) else f"(VllmWorker rank={r} pid={410 + r}) "
        for r in range(d.tp * d.pp)
    ]
    if d.tp * d.pp == 1:
        ranks = [core]
    prefix = "" if gen == "v0" else "["
    out = [_command(d, max_len)]

    def info(who: str, where: str, text: str, level: str = "INFO") -> None:
        if gen == "v0":
            out.append(f"{level} {clock(0.2)} {where}] {text}")
        else:
            out.append(f"{who}{level} {clock(0.2)} {prefix}{where}] {text}")

    if v >= (0, 15):
        banner = [
            "       █     █     █▄   ▄█",
            f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {d.version}",
            f"  █▄█▀ █     █     █     █  model   {name}",
            "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
        ]
        for text in banner:
            info(api, "utils.py:299", text)
    else:
        info(api, "api_server.py:1839" if gen == "v1" else "api_server.py:528", f"vLLM API server version {d.version}")
    args: dict[str, object] = {
        "model_tag": name,
        "model": name,
        "max_model_len": max_len,
        "gpu_memory_utilization": d.util,
    }
    if d.tp > 1:
        args["tensor_parallel_size"] = d.tp
    if d.pp > 1:
        args["pipeline_parallel_size"] = d.pp
    if d.kv_dtype != "auto":
        args["kv_cache_dtype"] = d.kv_dtype
    if d.served_name:
        args["served_model_name"] = [d.served_name]
    if gen == "v1":
        info(api, "utils.py:233", f"non-default args: {args}")
        batched = m.est.pool.max_num_batched_tokens
        if d.debug:
            info(
                api,
                "arg_utils.py:1785",
                f"Defaulting max_num_seqs to {m.est.max_num_seqs} for OPENAI_API_SERVER usage context.",
                "DEBUG",
            )
        info(api, "scheduler.py:205", f"Chunked prefill is enabled with max_num_batched_tokens={batched}.")
    else:
        info(
            api,
            "api_server.py:529",
            f"args: Namespace(host=None, port=8000, model='{name}', tokenizer=None, dtype='auto', kv_cache_dtype='{kv_dtype}', max_model_len={max_len}, pipeline_parallel_size={d.pp}, tensor_parallel_size={d.tp}, block_size=16, enable_prefix_caching={d.prefix_caching}, swap_space=4, gpu_memory_utilization={d.util}, max_num_seqs=256, quantization={quant!r}, served_model_name={[d.served_name] if d.served_name else None})",
        )
    config = (
        f"model='{name}', speculative_config=None, tokenizer='{name}', skip_tokenizer_init=False, tokenizer_mode=auto, "
        f"revision=None, trust_remote_code=False, dtype={dtype}, max_seq_len={max_len}, download_dir=None, "
        f"load_format=auto, tensor_parallel_size={d.tp}, pipeline_parallel_size={d.pp}, disable_custom_all_reduce=False, "
        f"quantization={quant}, enforce_eager=False, kv_cache_dtype={kv_dtype}, device_config=cuda, seed=0, "
        f"served_model_name={served}, enable_prefix_caching={d.prefix_caching and not model.has_state_layers}"
    )
    if gen == "v1":
        clock(6)
        info(core, "core.py:77", f"Initializing a V1 LLM engine (v{d.version}) with config: {config}")
    else:
        info("", "llm_engine.py:237", f"Initializing an LLM engine (v{d.version}) with config: {config}")
    if model.has_state_layers:
        info(
            api,
            "config.py:390",
            f"Setting attention block size to {m.est.block_size} tokens to ensure that attention page size is >= mamba page size.",
        )
    if d.gpu_source == "device_name" and model.num_experts:
        info(
            ranks[0],
            "fused_moe.py:727",
            f"Using default MoE config. Performance might be sub-optimal! Config file not found at /usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/fused_moe/configs/E={model.num_experts},N={model.intermediate_size // d.tp},device_name={device_name}.json",
            "WARNING",
        )
    load_secs = 8 + m.weights / GIB * rng.uniform(0.8, 1.6)
    clock(load_secs)
    for rank in ranks:
        if gen == "v0":
            info("", "model_runner.py:1067", f"Loading model weights took {m.weights / GIB:.4f} GB")
            break
        info(
            rank,
            "gpu_model_runner.py:2653",
            f"Model loading took {m.weights / GIB:.4f} GiB and {load_secs + rng.random():.6f} seconds",
        )
    if gen == "v0":
        if _version(d.version) >= (0, 6, 4):
            peak = m.weights + m.activation
            info(
                "",
                "worker.py:232",
                f"Memory profiling results: total_gpu_memory={g2(m.total)}GiB initial_memory_usage={g2(m.weights + 2 * GIB // 5)}GiB peak_torch_memory={g2(peak)}GiB memory_usage_post_profile={g2(m.weights + m.non_torch)}GiB non_torch_memory={g2(m.non_torch)}GiB kv_cache_size={g2(m.kv)}GiB gpu_memory_utilization={d.util:.2f}",
            )
        if m.est.num_blocks <= 0:
            out.append(
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
            )
            return out
        info("", "gpu_executor.py:122", f"# GPU blocks: {m.est.num_blocks}, # CPU blocks: {m.cpu_blocks}")
        info(
            "",
            "gpu_executor.py:126",
            f"Maximum concurrency for {max_len} tokens per request: {m.est.max_concurrency:.2f}x",
        )
        info("", "model_runner.py:1523", f"Graph capturing finished in {rng.randrange(10, 30)} secs.")
        out.append("INFO:     Application startup complete.")
        return out
    clock(rng.uniform(8, 25))  # profiling run
    if v < (0, 10):
        out.append(
            f"{ranks[0]}INFO {clock(0.1)} [gpu_worker.py:217] Memory profiling takes {rng.uniform(4, 15):.2f} seconds"
        )
        out.append(
            f"the current vLLM instance can use total_gpu_memory ({g2(m.total)}GiB) x gpu_memory_utilization ({d.util:.2f}) = {g2(m.requested)}GiB"
        )
        out.append(
            f"model weights take {g2(m.weights)}GiB; non_torch_memory takes {g2(m.non_torch)}GiB; PyTorch activation peak memory takes {g2(m.activation)}GiB; the rest of the memory reserved for KV Cache is {g2(m.kv)}GiB."
        )
    elif d.debug:
        free0 = m.total - round(0.5 * GIB)
        info(
            ranks[0],
            "gpu_worker.py:424",
            f"Initial free memory: {g2(free0)} GiB; Requested memory: {d.util:.6f} (util), {g2(m.requested)} GiB",
            "DEBUG",
        )
        non_kv = m.weights + m.activation + m.non_torch
        info(
            ranks[0],
            "gpu_worker.py:435",
            f"Memory profiling takes {rng.uniform(8, 25):.2f} seconds. Total non KV cache memory: {g2(non_kv)}GiB; torch peak memory increase: {g2(m.activation)}GiB; non-torch forward increase memory: {g2(m.non_torch)}GiB; weights memory: {g2(m.weights)}GiB.",
            "DEBUG",
        )
    if m.kv <= 0 or m.est.max_concurrency < 1:
        info(ranks[0], "gpu_worker.py:298", f"Available KV cache memory: {g2(m.kv)} GiB")
        need = m.est.kv_bytes_per_token_per_gpu * max_len
        info(core, "core.py:700", "EngineCore failed to start.", "ERROR")
        info(
            core,
            "core.py:700",
            f"ValueError: To serve at least one request with the models's max seq len ({max_len}), ({g2(need)} GiB KV cache is needed, which is larger than the available KV cache memory ({g2(m.kv)} GiB). Based on the available memory, the estimated maximum model length is {int(max_len * m.est.max_concurrency) // 16 * 16}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
            "ERROR",
        )
        return out
    if v >= (0, 10):
        for rank in ranks:
            info(rank, "gpu_worker.py:298", f"Available KV cache memory: {g2(m.kv)} GiB")
    info(core, "kv_cache_utils.py:1087", f"GPU KV cache size: {m.est.kv_cache_tokens:,} tokens")
    info(
        core,
        "kv_cache_utils.py:1091",
        f"Maximum concurrency for {max_len:,} tokens per request: {m.est.max_concurrency:.2f}x",
    )
    capture = rng.randrange(8, 40)
    clock(capture)
    info(
        ranks[0],
        "gpu_model_runner.py:3480",
        f"Graph capturing finished in {capture} secs, took {g2(m.cuda_graphs)} GiB",
    )
    info(api, "api_server.py:1971", "Starting vLLM API server 0 on http://0.0.0.0:8000")
    out.append(f"{api}INFO:     Application startup complete.")
    return out


# --- metrics -------------------------------------------------------------------------------------


def diurnal(hour: float) -> float:
    """0..1, quiet at night, peak around 15:00 UTC."""
    return max(0.0, math.sin(math.pi * (hour - 6) / 18)) if 6 <= hour <= 24 else 0.0


@dataclass
class Series:
    ts: dt.datetime
    running: int
    waiting: int
    usage: float
    preemptions: int


def load_series(d: Deployment, m: Measured, rng: random.Random) -> list[Series]:
    slots = m.est.num_blocks * m.est.block_size
    if slots <= 0:
        raise SystemExit(f"{d.id}: no KV cache left in the perturbed numbers; change its settings")
    mean_tokens = max(256, int(d.max_model_len * d.context_fraction))
    seq_cap = max(1, min(m.est.max_num_seqs or 256, int(slots / mean_tokens)))
    factor = {"normal": rng.uniform(0.55, 0.8), "busy": rng.uniform(0.9, 0.98), "saturating": rng.uniform(1.3, 1.6)}[
        d.load
    ]
    preempt = rng.randrange(0, 40) if d.load == "saturating" else rng.randrange(0, 3)
    out: list[Series] = []
    for hour in range(24):
        demand = seq_cap * factor * (0.15 + 0.85 * diurnal(hour)) * rng.uniform(0.9, 1.1)
        running = min(round(demand), seq_cap)  # past capacity every slot runs and the rest queue
        waiting = max(0, round(demand) - running)
        usage = min(1.0, running * mean_tokens * rng.uniform(0.85, 1.1) / slots)
        if waiting and usage > 0.9:
            usage = min(1.0, rng.uniform(0.95, 1.0))
            preempt += rng.randrange(1, 4) * (1 + waiting // 4)
        out.append(Series(DAY + dt.timedelta(hours=hour), running, waiting, round(usage, 4), preempt))
    return out


def vllm_metrics(d: Deployment, m: Measured, series: list[Series]) -> str:
    v = _version(d.version)
    label = f'model_name="{d.served_name or d.model_path or d.model}"'
    labels = label if v < (0, 8) else f'engine="0",{label}'
    usage_name = "vllm:kv_cache_usage_perc" if v >= (0, 11) else "vllm:gpu_cache_usage_perc"
    engine = 'engine="0",' if v >= (0, 8) else ""
    cache = (
        f'vllm:cache_config_info{{block_size="{m.est.block_size}",cache_dtype="{d.kv_dtype}",'
        f'enable_prefix_caching="{d.prefix_caching}",{engine}'
        f'gpu_memory_utilization="{d.util}",num_cpu_blocks="None",num_gpu_blocks="{m.est.num_blocks}",'
        f'swap_space="4"}} 1.0'
    )
    lines = [
        "# SAMPLE data (tools/make_sample_fleet.py): hourly scrapes of",
        "#   curl -s http://$POD:8000/metrics | grep -E '^vllm:(num_requests_(running|waiting)|(kv|gpu)_cache_usage_perc|num_preemptions_total|cache_config_info)'",
    ]
    for s in series:
        lines += [
            f"# scraped_at: {s.ts.strftime('%Y-%m-%dT%H:%M:%SZ')}",
            f"vllm:num_requests_running{{{labels}}} {s.running}.0",
            f"vllm:num_requests_waiting{{{labels}}} {s.waiting}.0",
            f"{usage_name}{{{labels}}} {s.usage}",
            f"vllm:num_preemptions_total{{{labels}}} {s.preemptions}.0",
            cache,
        ]
    return "\n".join(lines) + "\n"


# vLLM's bucket bounds (vllm/v1/metrics/buckets.py in 0.33.0: INTER_TOKEN_LATENCY_BUCKETS,
# TIME_TO_FIRST_TOKEN_BUCKETS; the same lists as the older time_per_output_token / ttft histograms)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
SPEED_DEPLOYMENTS = frozenset(
    {"chat-llama8b-h100", "chat-llama8b-l4", "rag-llama70b-h100-tp4", "qwen3-30b-moe-h100", "deepseek-v3-h200-tp8",
     "gpt-oss-20b-l40s", "qwen72b-h200-tp2"}
)  # fmt: skip


def _lognormal_cdf(x: float, mean: float, sigma: float) -> float:
    """P(X <= x) for a lognormal with this mean (not median) and log-sd."""
    mu = math.log(mean) - sigma * sigma / 2
    return 0.5 * (1 + math.erf((math.log(x) - mu) / (sigma * math.sqrt(2))))


def _histogram(name: str, labels: str, bounds: tuple[float, ...], counts: list[float], total: float, sums: float) -> list[str]:
    lines = [f'{name}_bucket{{{labels},le="{le}"}} {float(c)}' for le, c in zip(bounds, counts, strict=True)]
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(total)}')
    lines.append(f"{name}_count{{{labels}}} {float(total)}")
    lines.append(f"{name}_sum{{{labels}}} {round(sums, 6)}")
    return lines


def speed_metrics(d: Deployment, model: ModelSpec, m: Measured, gpu: GpuSku, series: list[Series]) -> str:
    """Token counters and latency histograms every 3 hours (cumulative since the engine started)."""
    rng = random.Random(f"{SEED}:speed:{d.id}")
    v = _version(d.version)
    label = f'model_name="{d.served_name or d.model_path or d.model}"'
    labels = label if v < (0, 8) else f'engine="0",{label}'
    itl_name = "vllm:inter_token_latency_seconds" if v >= (0, 11) else "vllm:time_per_output_token_seconds"
    mean_tokens = max(256, int(d.max_model_len * d.context_fraction))
    output = max(32, mean_tokens // 5)
    prompt = max(1, round(mean_tokens * 0.9))
    slow = rng.lognormvariate(0.08, 0.05)
    chunk = m.est.pool.max_num_batched_tokens or prompt
    generated = prompted = requests = 0.0
    itl = [0.0] * len(ITL_BUCKETS)
    ttft = [0.0] * len(TTFT_BUCKETS)
    itl_n = itl_sum = ttft_sum = 0.0
    lines = [
        "# SAMPLE data (tools/make_sample_fleet.py): scrapes every 3 hours of",
        "#   curl -s http://$POD:8000/metrics | grep -E '^vllm:(generation_tokens|prompt_tokens)_total|"
        "^vllm:(inter_token_latency|time_per_output_token|time_to_first_token)_seconds'",
    ]
    hours = 6.0  # the engine started at 18:00 the evening before: six quiet hours at the first scrape's load
    for s in series[::3]:
        running = max(1, s.running)
        perf = performance(
            model, m.est, gpu, concurrency=running, input_tokens=prompt, output_tokens=output, chunk_tokens=chunk,
            weight_dtype=d.weight_dtype,
        )  # fmt: skip
        tpot_s = perf.tpot_ms / 1e3 * slow * rng.lognormvariate(0, 0.03)
        ttft_s = perf.ttft_ms / 1e3 * 1.3
        tokens = round(running * 3600 * hours / tpot_s)
        n_requests = round(tokens / output)
        steps = tokens - n_requests  # the first token of a request is its TTFT, not an inter-token gap
        generated += tokens
        prompted += n_requests * prompt
        requests += n_requests
        itl_n += steps
        itl_sum += steps * tpot_s
        ttft_sum += n_requests * ttft_s
        for i, le in enumerate(ITL_BUCKETS):
            itl[i] += round(steps * _lognormal_cdf(le, tpot_s, 0.3))
        for i, le in enumerate(TTFT_BUCKETS):
            ttft[i] += round(n_requests * _lognormal_cdf(le, ttft_s, 0.5))
        hours = 3.0
        lines += [
            f"# scraped_at: {s.ts.strftime('%Y-%m-%dT%H:%M:%SZ')}",
            f"vllm:generation_tokens_total{{{labels}}} {generated}",
            f"vllm:prompt_tokens_total{{{labels}}} {prompted}",
            *_histogram(itl_name, labels, ITL_BUCKETS, itl, itl_n, itl_sum),
            *_histogram("vllm:time_to_first_token_seconds", labels, TTFT_BUCKETS, ttft, requests, ttft_sum),
        ]
    return "\n".join(lines) + "\n"


def dcgm_metrics(d: Deployment, m: Measured, gpu: GpuSku, smi_mib: int, rng: random.Random) -> str:
    name, _ = DCGM_NAMES[gpu.id]
    host = f"gpu-node-{rng.randrange(1, 60):02d}"
    pod = f"{d.id}-{rng.getrandbits(32):08x}"[:50]
    lines = ["# SAMPLE data (tools/make_sample_fleet.py): DCGM exporter, every 3 hours"]
    uuids = [f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}" for _ in range(d.tp * d.pp)]
    for hour in range(0, 24, 3):
        ts = DAY + dt.timedelta(hours=hour)
        lines.append(f"# scraped_at: {ts.strftime('%Y-%m-%dT%H:%M:%SZ')}")
        for i, uuid in enumerate(uuids):
            used = round((m.requested + m.cuda_graphs + 0.5 * GIB) / MIB + rng.uniform(-40, 40))
            free = smi_mib - used - 461
            labels = f'gpu="{i}",UUID="{uuid}",device="nvidia{i}",modelName="{name}",Hostname="{host}",container="vllm",namespace="llm",pod="{pod}"'
            lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {used}")
            lines.append(f"DCGM_FI_DEV_FB_FREE{{{labels}}} {free}")
    return "\n".join(lines) + "\n"


# --- CSV export and malformed files ------------------------------------------------------------------

CSV_COLUMNS = (
    "deployment_id,observed_at,model,gpu,tp,pp,engine,engine_version,gpu_memory_utilization,max_model_len,dtype,"
    "kv_cache_dtype,block_size,weights_gib,activation_peak_gib,non_torch_gib,kv_cache_memory_gib,num_gpu_blocks,"
    "kv_cache_tokens,max_concurrency,max_concurrency_tokens,peak_kv_usage,peak_requests_running,"
    "peak_requests_waiting,preemptions_total"
)


def csv_row(d: Deployment, model: ModelSpec, m: Measured, series: list[Series]) -> str:
    dtype = "float16" if model.torch_dtype == "float16" else "bfloat16"
    return ",".join(
        str(x)
        for x in (
            d.id,
            "2025-06-02T23:59:00Z",
            d.model,
            DCGM_NAMES[d.gpu][0],
            d.tp,
            d.pp,
            "vllm",
            d.version,
            d.util,
            d.max_model_len,
            dtype,
            d.kv_dtype,
            m.est.block_size,
            g2(m.weights),
            g2(m.activation),
            g2(m.non_torch),
            g2(m.kv),
            m.est.num_blocks,
            m.est.kv_cache_tokens,
            f"{m.est.max_concurrency:.2f}",
            d.max_model_len,
            max(s.usage for s in series),
            max(s.running for s in series),
            max(s.waiting for s in series),
            series[-1].preemptions,
        )
    )


def malformed(out: Path, first_metrics: str) -> None:
    """Files that go wrong the ways real drops do; each reject is part of the expected counts."""
    root = out / "malformed"
    (root / "llama8b-l4-pasted").mkdir(parents=True)
    (root / "llama8b-l4-pasted" / "startup.log").write_text(
        "$ vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.9\n"
        "(APIServer pid=1) INFO 06-01 19:02:44 [api_server.py:1805] vLLM API server version 0.10.1.1\n"
        "(APIServer pid=1) INFO 06-01 19:02:44 [utils.py:326] non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', 'model': 'meta-llama/Ll\n"
        "(EngineCore_0 pid=180) INFO 06-01 19:03:40 [gpu_model_runner.py:1953] Model loading took 14.9889 GiB and 37.225461 seconds\n"
        "(EngineCore_0 pid=180) INFO 06-01 19:03:55 [gpu_worker.py:276] Available KV cache memory: 3.62 GiB\n"
        "(EngineCore_0 pid=180) INFO 06-01 19:03:55 [kv_cache_utils.py:849] GPU KV cache size: 29,6\n"
        "(EngineCore_0 pid=180) INFO 06-01 19:03:55 [kv_cache_utils.py:853] Maximum concurrency for 8,192 tokens per req\n",
        encoding="utf-8",
    )
    (root / "llama8b-l4-pasted" / "deployment.yaml").write_text(
        "# SAMPLE: a log pasted from a terminal that cut lines short\ngpu: NVIDIA L4\nobserved_at: 2025-06-01T19:04:00Z\n",
        encoding="utf-8",
    )
    (root / "acme-13b-h100").mkdir()
    (root / "acme-13b-h100" / "startup.log").write_text(
        "$ vllm serve acme/secret-llm-13b --max-model-len 16384\n"
        "(EngineCore_DP0 pid=283) INFO 06-01 20:11:03 [gpu_model_runner.py:2653] Model loading took 24.31 GiB and 51.2 seconds\n"
        "(EngineCore_DP0 pid=283) INFO 06-01 20:11:20 [gpu_worker.py:298] Available KV cache memory: 45.02 GiB\n"
        "(EngineCore_DP0 pid=283) INFO 06-01 20:11:21 [kv_cache_utils.py:1087] GPU KV cache size: 147,520 tokens\n",
        encoding="utf-8",
    )
    (root / "qwen14b-l40s-b").mkdir()
    model = 'model_name="Qwen/Qwen2.5-14B-Instruct"'
    (root / "qwen14b-l40s-b" / "vllm-metrics.prom").write_text(
        "# SAMPLE: a scraper that wrote percents, negative gauges and a cut line\n"
        "# scraped_at: 2025-06-02T12:00:00Z\n"
        f'vllm:num_requests_running{{engine="0",{model}}} 9.0\n'
        f'vllm:num_requests_waiting{{engine="0",{model}}} -1.0\n'
        f'vllm:kv_cache_usage_perc{{engine="0",{model}}} 87.5\n'
        f'vllm:num_preemptions_total{{engine="0",{model}}} 3.0\n'
        "# scraped_at: 2025-06-02T13:00:00Z\n"
        f'vllm:num_requests_running{{engine="0",{model}}} 11.0\n'
        f'vllm:num_requests_waiting{{engine="0",{model[:24]}\n'
        f'vllm:kv_cache_usage_perc{{engine="0",{model}}} 0.91\n',
        encoding="utf-8",
    )
    (root / "qwen14b-l40s-b" / "vllm-speed.prom").write_text(
        "# SAMPLE: histograms from a buggy exporter: buckets that decrease, and one without its +Inf bucket\n"
        "# scraped_at: 2025-06-02T12:00:00Z\n"
        f'vllm:time_per_output_token_seconds_bucket{{engine="0",{model},le="0.025"}} 120.0\n'
        f'vllm:time_per_output_token_seconds_bucket{{engine="0",{model},le="0.05"}} 90.0\n'
        f'vllm:time_per_output_token_seconds_bucket{{engine="0",{model},le="+Inf"}} 130.0\n'
        "# scraped_at: 2025-06-02T13:00:00Z\n"
        f'vllm:time_to_first_token_seconds_bucket{{engine="0",{model},le="0.5"}} 40.0\n'
        f'vllm:time_to_first_token_seconds_bucket{{engine="0",{model},le="1.0"}} 52.0\n',
        encoding="utf-8",
    )
    gpu = 'gpu="0",UUID="GPU-5e1f0a77-0001",device="nvidia0",modelName="NVIDIA L40S",Hostname="gpu-node-61"'
    (root / "qwen14b-l40s-b" / "dcgm.prom").write_text(
        "# SAMPLE: an exporter relabelled to bytes\n"
        "# scraped_at: 2025-06-02T12:00:00Z\n"
        f"DCGM_FI_DEV_FB_USED{{{gpu}}} 44023414784\n"
        f"DCGM_FI_DEV_FB_FREE{{{gpu}}} 1521\n",
        encoding="utf-8",
    )
    scrapes = first_metrics.split("# scraped_at: ")
    (root / "duplicate-scrape.prom").write_text(
        "# SAMPLE: two scrapes collected twice by a second scraper\n# deployment_id: chat-llama8b-h100\n"
        + "".join("# scraped_at: " + s for s in scrapes[1:3]),
        encoding="utf-8",
    )
    (root / "grafana-dashboard.json").write_text('{"title": "vLLM", "panels": []}\n', encoding="utf-8")


ASSUMPTIONS = (__doc__ or "").split("Assumptions")[1].split("Also written")[0].strip(" :\n")
ASSUMPTIONS = "Assumptions " + ASSUMPTIONS

README = """# SAMPLE telemetry fleet — not real measurements

Everything under this folder is **made-up SAMPLE data**, written by `tools/make_sample_fleet.py`
(seed {seed}). It exists so a default capplan run shows the whole flow — predictions, measurements,
errors, calibration, placements, limits — without a real fleet. Do not calibrate production
limits on it. Point `CAPPLAN_TELEMETRY_DIR` at your own drop folder instead.

How it was made: each deployment's numbers are capplan's own prediction for its settings,
perturbed by documented errors (activation and non-torch drift per vLLM generation and GPU, small
weight noise), then written the way that vLLM version logs them. Metrics cover {day} (UTC):
hourly vLLM scrapes, DCGM every 3 hours.

{assumptions}

Layout (one folder per deployment; the folder name is the deployment id):

- `<deployment>/startup.log` — the vLLM startup log as pasted from a terminal
- `<deployment>/deployment.yaml` — sidecar: start time, and the GPU when the log does not show it
- `<deployment>/vllm-metrics.prom` — 24 hourly scrapes of vLLM's /metrics (the lines capplan reads)
- `<deployment>/vllm-speed.prom` — {n_speed} deployments: token counters and the ITL / TTFT histograms every 3 hours
- `<deployment>/dcgm.prom` — DCGM exporter framebuffer used/free per GPU (NVIDIA only)
- `fleet-export.csv` — an export from another team's platform: {n_csv} deployments seen only there,
  plus two bad rows
- `malformed/` — files that go wrong on purpose: truncated lines, a percent where vLLM reports a
  fraction, negative gauges, framebuffer in bytes, an unknown model, a duplicate scrape, a file
  type capplan does not read

| deployment | model | GPU | TP x PP | vLLM | max_model_len | load |
|---|---|---|---|---|---|---|
{table}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rng = random.Random(SEED)
    smi_mib = {r.id: r.memory_total_mib_smi for r in read_gpu_catalog()[0]}
    csv_lines = ["# SAMPLE data (tools/make_sample_fleet.py): export of the batch platform's deployments", CSV_COLUMNS]
    first_metrics = ""
    table = []
    for d in FLEET:
        model, ckpt = load_model(d.model)
        gpu = find_gpu_sku(d.gpu)
        m = measure(d, model, ckpt, gpu, d.max_model_len)
        series = load_series(d, m, rng)
        table.append(
            f"| {d.id} | {d.model} | {gpu.id} | {d.tp} x {d.pp} | {d.version} | {d.max_model_len:,} | {d.load}"
            f"{' (CSV only)' if d.csv_only else ''} |"
        )
        if d.csv_only:
            csv_lines.append(csv_row(d, model, m, series))
            continue
        folder = out / d.id
        folder.mkdir()
        log, started = startup_log(d, model, ckpt, gpu, random.Random(f"{SEED}:{d.id}"))
        (folder / "startup.log").write_text(log, encoding="utf-8")
        sidecar = [
            "# SAMPLE data (tools/make_sample_fleet.py)",
            f"observed_at: {started.strftime('%Y-%m-%dT%H:%M:%SZ')}",
        ]
        if d.gpu_source == "sidecar":
            sidecar.append(f"gpu: {DCGM_NAMES[gpu.id][0]}")
        if d.served_name:
            sidecar.append(f"model: {d.model}  # the served name {d.served_name!r} is an alias")
        (folder / "deployment.yaml").write_text("\n".join(sidecar) + "\n", encoding="utf-8")
        metrics = vllm_metrics(d, m, series)
        first_metrics = first_metrics or metrics
        (folder / "vllm-metrics.prom").write_text(metrics, encoding="utf-8")
        if d.id in SPEED_DEPLOYMENTS:
            (folder / "vllm-speed.prom").write_text(speed_metrics(d, model, m, gpu, series), encoding="utf-8")
        if gpu.vendor.lower() == "nvidia":
            mib = smi_mib.get(gpu.id) or round(gpu.memory_total_bytes / MIB) + 469
            (folder / "dcgm.prom").write_text(dcgm_metrics(d, m, gpu, mib, rng), encoding="utf-8")
    csv_lines.append(
        "ext-bad-gpu,2025-06-02T23:59:00Z,meta-llama/Llama-3.1-8B-Instruct,NVIDIA B40,1,1,vllm,0.11.0,0.9,8192,"
        "bfloat16,auto,16,14.99,0.41,0.12,18.20,9318,149088,18.20,8192,0.41,12,0,0"
    )
    csv_lines.append("ext-cut-row,2025-06-02T23:59:00Z,meta-llama/Llama-3.1-8B-Instruct,NVIDIA L4,1")
    (out / "fleet-export.csv").write_text("\n".join(csv_lines) + "\n", encoding="utf-8")
    malformed(out, first_metrics)
    (out / "README.md").write_text(
        README.format(
            seed=SEED,
            day=DAY.date(),
            n_csv=sum(d.csv_only for d in FLEET),
            n_speed=len(SPEED_DEPLOYMENTS),
            table="\n".join(table),
            assumptions=ASSUMPTIONS,
        ),
        encoding="utf-8",
    )
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({size / 1e6:.2f} MB, {sum(1 for p in out.rglob('*') if p.is_file())} files)")


if __name__ == "__main__":
    main()
