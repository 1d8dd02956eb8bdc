"""The options of `capplan estimate`, `limits`, `place`, `pack` and `procure`: each option's type, default and
typer declaration (flags, metavar, help), written once. Each command has a table of its options in the order
its help lists them (`takes` builds the signature typer reads from it, and the command receives them as keyword
arguments); an option two commands share is the estimate's (`shared`), a command's own variant (a required
MODEL, several GPUs, lengths with defaults) is declared in its table."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args

import typer
from typer.models import ParameterInfo

from capacity.dtypes import KV_DTYPES, WEIGHT_DTYPES
from capacity.engines import ENGINE_NAMES
from capacity.grid import TARGET_CONCURRENCIES
from capacity.spec import DeploymentSpec
from pipelines.commands.common import WarehouseOption
from recommendations.deploy import ManifestKind
from recommendations.serving_plan import DEFAULT_TOP, MAX_SIMULATIONS, Percentile

# vLLM's spellings of `--dtype` / `--kv-cache-dtype` values, so a `vllm serve` command line pastes as is.
_VLLM_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float": "float32", "fp32": "float32"}

REQUIRED = inspect.Parameter.empty  # the default of a parameter the command line must give


def dtype_name(value: str) -> str:
    """The dtype in capplan's spelling, so that vLLM's (bfloat16, half...) pastes as is."""
    return _VLLM_DTYPES.get(value.lower(), value.lower())


@dataclass(frozen=True, slots=True)
class Param:
    """One command-line parameter: its Python type, its default (REQUIRED: none) and typer's declaration."""

    kind: Any
    default: Any
    declared: ParameterInfo

    def parameter(self, name: str) -> inspect.Parameter:
        """The parameter `name` as typer reads it from a signature (`Annotated[type, typer.Option(...)]`)."""
        # built at run time: mypy reads `Annotated[...]` as a static type and cannot name `self.kind`
        annotation = Annotated[self.kind, self.declared]  # type: ignore[name-defined]
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=self.default, annotation=annotation)


def option(kind: Any, *flags: str, default: Any = None, **declared: Any) -> Param:
    """A `typer.Option` of this type; `declared`: typer's metavar, help, callback..."""
    return Param(kind, default, typer.Option(*flags, **declared))


def argument(kind: Any, *, default: Any = None, **declared: Any) -> Param:
    """A `typer.Argument` of this type."""
    return Param(kind, default, typer.Argument(**declared))


def aliased(alias: Any, *, default: Any = None) -> Param:
    """A parameter from a typer alias (`Annotated[type, typer.Option(...)]`) that commands outside the table share."""
    kind, declared = get_args(alias)
    return Param(kind, default, declared)


Command = TypeVar("Command", bound=Callable[..., None])


def takes(table: Mapping[str, Param]) -> Callable[[Command], Command]:
    """The command takes the options of `table`, in its order, after its other parameters (`ctx`): typer
    reads the signature built here and passes each option by keyword (as `**options`, or to a keyword-only
    parameter of the same name)."""

    def build(command: Command) -> Command:
        own = inspect.signature(command, eval_str=True).parameters.values()
        fixed = [p for p in own if p.name not in table and p.kind is not inspect.Parameter.VAR_KEYWORD]
        added = [param.parameter(name) for name, param in table.items()]
        command.__signature__ = inspect.Signature([*fixed, *added])  # type: ignore[attr-defined]
        return command

    return build


def shared(*names: str) -> dict[str, Param]:
    """The estimate's options `names`, for a command that takes them too."""
    return {name: ESTIMATE_OPTIONS[name] for name in names}


def given_fields(options: Mapping[str, Any], spec: type) -> dict[str, Any]:
    """The options named after a field of the dataclass `spec`, as given: they pass through unrenamed."""
    return {field.name: options[field.name] for field in dataclasses.fields(spec) if field.name in options}


def stated_deployment(options: Mapping[str, Any]) -> DeploymentSpec:
    """The deployment the options state as given: each option named after a `DeploymentSpec` field, and
    `--dtype` (the weights'); a command adds what it derives (LoRA, offload, byte sizes) with `dataclasses.replace`."""
    return DeploymentSpec(weight_dtype=options["dtype"], **given_fields(options, DeploymentSpec))


# `capplan estimate`'s options, in the order its help lists them; `limits`, `place` and `pack` share some.
ESTIMATE_OPTIONS: dict[str, Param] = {
    # the model, the layout, the lengths
    "model": argument(
        str | None,
        metavar="MODEL",
        show_default=False,
        help="Registry id, path to a config.json, or a directory with one (or --from-command).",
    ),
    "gpu": option(str | None, "--gpu", metavar="SKU", help="GPU catalog id or alias (nvidia-smi/DCGM names too)."),
    "tp": option(int, "--tp", "--tensor-parallel-size", "-tp", default=1, metavar="N", help="Tensor-parallel size."),
    "pp": option(
        int, "--pp", "--pipeline-parallel-size", "-pp", default=1, metavar="N", help="Pipeline-parallel size."
    ),
    "dtype": option(
        str,
        "--dtype",
        default="auto",
        metavar="DTYPE",
        callback=dtype_name,
        help=f"Weight dtype: {', '.join(WEIGHT_DTYPES)} (vLLM's bfloat16, float16, half, float too).",
    ),
    "kv_dtype": option(
        str,
        "--kv-dtype",
        "--kv-cache-dtype",
        default="auto",
        metavar="DTYPE",
        callback=dtype_name,
        help=f"KV cache dtype: {', '.join(KV_DTYPES)}.",
    ),
    "context": option(int | None, "--context", metavar="T", help="Tokens per sequence T (default: max model len)."),
    "concurrency": option(int | None, "--concurrency", metavar="B", help="Target concurrent sequences B."),
    "input_len": option(
        int | None, "--input-len", metavar="I", help="Prompt tokens per request, for the speed block (TTFT)."
    ),
    "output_len": option(
        int | None,
        "--output-len",
        metavar="O",
        help="Generated tokens per request (default: min(256, T / 2)); T = I + O.",
    ),
    "max_model_len": option(
        int | None,
        "--max-model-len",
        metavar="T",
        help="Engine max model length (-1: the largest that starts, vLLM's auto-fit).",
    ),
    # engine switches
    "async_scheduling": option(
        bool | None,
        "--async-scheduling/--no-async-scheduling",
        metavar="",
        help="vLLM async scheduling (default on, as on GPUs; off keeps one batch in flight, as the CPU build).",
    ),
    "enforce_eager": option(
        bool,
        "--enforce-eager",
        default=False,
        help="No CUDA graphs (vLLM --enforce-eager: from 0.21 the graph estimate is not deducted; SGLang "
        "--disable-cuda-graph: from 0.5.14 the default fraction reserves none).",
    ),
    "allow_long_max_model_len": option(
        bool,
        "--allow-long-max-model-len",
        default=False,
        help="The engine's override for a --max-model-len beyond the model's limit is set "
        "(VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1); without it the "
        "engine refuses to start.",
    ),
    "extensible_kv_cache": option(
        bool | None,
        "--extensible-kv-cache/--no-extensible-kv-cache",
        metavar="",
        help="vLLM 0.34+'s extensible KV cache, sized after warmup (default on where vLLM turns it on; off: the "
        "profiling-run sizing at utilization 0.92, as with --no-enable-extensible-kv-cache).",
    ),
    "vllm_v0_engine": option(
        bool,
        "--vllm-v0-engine",
        default=False,
        help="vLLM 0.8-0.10 run with VLLM_USE_V1=0: their V0 engine (read from a pasted command's environment too).",
    ),
    "hf_overrides": option(
        str | None,
        "--hf-overrides",
        "--json-model-override-args",
        metavar="JSON",
        help="Config overrides as the engine applies them (vLLM --hf-overrides, SGLang --json-model-override-args): "
        'the length keys, rope and layers it runs with, e.g. \'{"max_position_embeddings": 131072}\'.',
    ),
    "triton_kernels": option(
        bool | None,
        "--triton-kernels/--no-triton-kernels",
        metavar="",
        help="The triton_kernels package installed beside vLLM 0.10.2-0.11.x (0.12+ bundles it): "
        "gpt-oss's MXFP4 experts on Hopper run the OAI Triton kernels, else Marlin (default: a pip install, without; "
        "--no-triton-kernels: Marlin on any release, as VLLM_MXFP4_USE_MARLIN=1).",
    ),
    "disable_custom_all_reduce": option(
        bool,
        "--disable-custom-all-reduce",
        default=False,
        help="vLLM without its custom all-reduce: at TP > 1 the CUDA graphs capture NCCL's all-reduce.",
    ),
    "gpu_peer_access": option(
        bool | None,
        "--gpu-peer-access/--no-gpu-peer-access",
        metavar="",
        help="Whether the GPUs pass vLLM's P2P test (default: over NVLink yes, over PCIe no): at TP 2 on PCIe, "
        "with it vLLM's custom all-reduce runs.",
    ),
    # LoRA (capacity.features.lora)
    "enable_lora": option(
        bool,
        "--enable-lora",
        default=False,
        help="LoRA adapters are served: their GPU slots are charged before the KV cache.",
    ),
    "max_loras": option(
        int | None, "--max-loras", metavar="N", help="LoRA slots on the GPU (vLLM default 1; SGLang's per-batch 8)."
    ),
    "max_lora_rank": option(int | None, "--max-lora-rank", metavar="R", help="The largest adapter rank (default 16)."),
    "max_cpu_loras": option(
        int | None, "--max-cpu-loras", metavar="N", help="Adapters kept in host memory (default: --max-loras)."
    ),
    "lora_dtype": option(str | None, "--lora-dtype", metavar="DTYPE", help="auto (the model's) | float16 | bfloat16."),
    "lora_target_modules": option(
        str | None,
        "--lora-target-modules",
        metavar="NAMES",
        help="Modules with LoRA, e.g. 'q_proj,v_proj' or all (default: vLLM every supported one).",
    ),
    "fully_sharded_loras": option(
        bool, "--fully-sharded-loras", default=False, help="vLLM splits the adapters' rank / output over TP too."
    ),
    # weights in host memory (read by offload_options)
    "cpu_offload_gb": option(
        float | None,
        "--cpu-offload-gb",
        metavar="GIB",
        help="Weights per GPU kept in host memory (the GPU holds the rest).",
    ),
    "kt_weight_path": option(
        str | None,
        "--kt-weight-path",
        metavar="PATH",
        help="SGLang with KTransformers: the CPU experts' copy (turns it on; with --kt-num-gpu-experts sized).",
    ),
    "kt_num_gpu_experts": option(
        int | None,
        "--kt-num-gpu-experts",
        metavar="N",
        help="KTransformers: routed experts per MoE layer kept on the GPU; the others run on the CPU.",
    ),
    "kt_method": option(
        str | None, "--kt-method", metavar="NAME", help="KTransformers: the CPU experts' format (host memory, not sized)."
    ),
    # speculative decoding (read by speculative.SpeculativeArgs)
    "speculative": option(
        bool, "--speculative", default=False, help="Speculative decoding of an unstated method (not sized: flagged)."
    ),
    "speculative_config": option(
        str | None,
        "--speculative-config",
        metavar="JSON",
        help='vLLM\'s speculative config, e.g. \'{"method": "eagle3", "model": "ID", "num_speculative_tokens": 3}\': '
        "the draft's weights and KV layers are sized (MTP from the model's own layers).",
    ),
    "speculative_algorithm": option(
        str | None,
        "--speculative-algorithm",
        metavar="NAME",
        help="SGLang: EAGLE, EAGLE3, NEXTN, STANDALONE or NGRAM (sized).",
    ),
    "speculative_draft_model_path": option(
        str | None, "--speculative-draft-model-path", metavar="ID", help="SGLang: the draft checkpoint (id or path)."
    ),
    "speculative_num_steps": option(
        int | None, "--speculative-num-steps", metavar="N", help="SGLang: draft steps per decode step."
    ),
    "speculative_eagle_topk": option(
        int | None, "--speculative-eagle-topk", metavar="N", help="SGLang: branches per draft step."
    ),
    "speculative_num_draft_tokens": option(
        int | None, "--speculative-num-draft-tokens", metavar="N", help="SGLang: tokens verified per sequence."
    ),
    "acceptance_rate": option(
        float | None,
        "--acceptance-rate",
        metavar="A",
        help="Per-token acceptance rate of the draft's proposals (0-1): TPOT and throughput with speculative "
        "decoding (default 0: every step emits one token).",
    ),
    # data and expert parallelism
    "enable_dp_attention": option(
        bool,
        "--enable-dp-attention",
        default=False,
        help="SGLang's spelling beside --dp: --dp is the attention DP size.",
    ),
    "dp": option(
        int, "--dp", "--data-parallel-size", default=1, metavar="N", help="Attention DP ranks, a KV pool each."
    ),
    "ep": option(
        int, "--ep", default=1, metavar="N", help="Expert-parallel width: whole experts per rank (1: split by TP)."
    ),
    "enable_expert_parallel": option(
        bool,
        "--enable-expert-parallel",
        default=False,
        help="Experts split whole over EP = tp x dp (vLLM) or tp (SGLang).",
    ),
    "dcp": option(
        int, "--dcp", default=1, metavar="N", help="vLLM decode context parallel: a request's KV over N TP ranks."
    ),
    "redundant_experts": option(
        int, "--redundant-experts", default=0, metavar="N", help="EPLB's redundant experts, spread over the EP ranks."
    ),
    # KV tiers behind the GPU pool (read by offload_options)
    "kv_transfer_config": option(
        str | None,
        "--kv-transfer-config",
        metavar="JSON",
        help="vLLM KV connector: LMCacheConnectorV1 and OffloadingConnector are sized (GPU buffers, CPU tiers); "
        "others are flagged.",
    ),
    "kv_offloading_size": option(
        float | None,
        "--kv-offloading-size",
        metavar="GIB",
        help="vLLM KV offloading to CPU: GiB of host memory, summed over the TP ranks (sized: the CPU tier's tokens).",
    ),
    "kv_offloading_backend": option(
        str,
        "--kv-offloading-backend",
        default="native",
        metavar="NAME",
        help="vLLM's offloading backend: native or lmcache.",
    ),
    "lmcache_max_local_cpu_size": option(
        float | None,
        "--lmcache-max-local-cpu-size",
        metavar="GIB",
        help="LMCache's CPU tier per GPU (LMCACHE_MAX_LOCAL_CPU_SIZE; default 5.0) with LMCacheConnectorV1.",
    ),
    "lmcache_max_local_disk_size": option(
        float | None,
        "--lmcache-max-local-disk-size",
        metavar="GIB",
        help="LMCache's local disk tier per GPU (LMCACHE_MAX_LOCAL_DISK_SIZE; default 0).",
    ),
    "lmcache_chunk_size": option(
        int | None,
        "--lmcache-chunk-size",
        metavar="TOKENS",
        help="LMCache's chunk (LMCACHE_CHUNK_SIZE; default 256): its GPU buffer.",
    ),
    "enable_hierarchical_cache": option(
        bool, "--enable-hierarchical-cache", default=False, help="SGLang HiCache: a host KV pool behind the GPU pool."
    ),
    "hicache_ratio": option(
        float | None, "--hicache-ratio", metavar="RATIO", help="SGLang HiCache host pool / device pool (default 2.0)."
    ),
    "hicache_size": option(
        int | None, "--hicache-size", metavar="GB", help="SGLang HiCache host pool in GB (overrides the ratio)."
    ),
    "host_cache_size": option(
        int | None,
        "--host-cache-size",
        metavar="BYTES",
        help="TensorRT-LLM kv_cache_config.host_cache_size: a host KV pool.",
    ),
    # multimodal, prefix caching
    "limit_mm_per_prompt": option(
        str | None,
        "--limit-mm-per-prompt",
        metavar="JSON",
        help='vLLM items per prompt by modality, e.g. \'{"image":0,"video":0}\' (all 0: served text-only, no '
        "encoder profiling; from 0.11 no tower weights).",
    ),
    "language_model_only": option(
        bool,
        "--language-model-only",
        default=False,
        help="vLLM serves a multimodal model text-only (every modality 0).",
    ),
    "enable_prefix_caching": option(
        bool | None,
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="Prefix caching (default: the engine's; on in vLLM V1, SGLang and TensorRT-LLM).",
    ),
    "shared_prefix_tokens": option(
        int | None, "--shared-prefix-tokens", metavar="S", help="A prompt prefix every sequence shares (held once)."
    ),
    "prefix_hit_rate": option(
        float | None, "--prefix-hit-rate", metavar="H", help="Share of prompt tokens from the prefix cache (TTFT)."
    ),
    # the engine and its memory
    "gpu_memory_utilization": option(
        float | None,
        "--gpu-memory-utilization",
        metavar="FRACTION",
        help="Share of device memory the engine may use (vLLM --gpu-memory-utilization, SGLang "
        "--mem-fraction-static, TensorRT-LLM --free_gpu_memory_fraction). Default: the release's: vLLM 0.92 "
        "from 0.22 (0.9 before), SGLang by GPU memory and TP, TensorRT-LLM 0.9 of the free memory.",
    ),
    "engine": option(
        str, "--engine", default="vllm", metavar="ENGINE", help=f"Serving engine: {', '.join(ENGINE_NAMES)}."
    ),
    "engine_version": option(
        str | None,
        "--engine-version",
        metavar="VERSION",
        help="Engine release whose rules apply (default: the latest profile).",
    ),
    "block_size": option(int | None, "--block-size", metavar="TOKENS", help="KV block size (default: the engine's)."),
    "max_num_batched_tokens": option(
        int | None,
        "--max-num-batched-tokens",
        metavar="TOKENS",
        help="Tokens per scheduler step (sizes the activation peak).",
    ),
    "max_num_seqs": option(
        int | None, "--max-num-seqs", metavar="N", help="Most sequences the engine runs at once (caps B_max)."
    ),
    "gpu_memory_gib": option(
        float | None, "--gpu-memory-gib", metavar="GIB", help="Device total (GiB), for hardware not in the catalog."
    ),
    "weights_gib": option(
        float | None, "--weights-gib", metavar="GIB", help="Weights per GPU (GiB), overriding the checkpoint."
    ),
    "overhead_gib": option(float | None, "--overhead-gib", metavar="GIB", help="All non-KV overhead per GPU (GiB)."),
    "other_process_gib": option(
        float | None,
        "--other-process-gib",
        metavar="GIB",
        help="Memory other processes hold on each GPU when the engine starts (GiB; on a unified-memory GPU such "
        "as GB10, the host's own use): vLLM >= 0.9.1 refuses to start below its request, SGLang and "
        "TensorRT-LLM size a smaller pool.",
    ),
    "kv_cache_memory_gib": option(
        float | None, "--kv-cache-memory-gib", metavar="GIB", help="KV budget per GPU (GiB), skipping the budget."
    ),
    "kv_cache_memory_bytes": option(
        int | None,
        "--kv-cache-memory-bytes",
        metavar="BYTES",
        help="KV budget per GPU in bytes, skipping the budget (vLLM's spelling; not with --kv-cache-memory-gib).",
    ),
    "cuda_graph_max_batch": option(
        int | None,
        "--cuda-graph-max-batch",
        metavar="N",
        help="Largest decode batch CUDA graphs are captured for (SGLang --cuda-graph-max-bs[-decode]): its reserve.",
    ),
    "max_total_tokens": option(
        int | None,
        "--max-total-tokens",
        metavar="TOKENS",
        help="SGLang's cap on the token pool (min of the profiled pool and this; the memory fraction is unchanged).",
    ),
    # load simulation, output, latency targets
    "request_rate": option(
        float | None,
        "--request-rate",
        metavar="R",
        help="Simulate Poisson arrivals at R requests/s on one replica (vllm bench serve --request-rate).",
    ),
    "burst": option(
        int | None,
        "--burst",
        metavar="N",
        help="Simulate N requests sent at once (vllm bench serve --request-rate inf).",
    ),
    "num_prompts": option(
        int,
        "--num-prompts",
        default=1000,
        metavar="N",
        help="Requests a simulated closed or open loop sends (default 1000).",
    ),
    "random_range_ratio": option(
        float,
        "--random-range-ratio",
        default=0.0,
        metavar="R",
        help="A simulated benchmark's lengths drawn uniformly in [L(1-R), L(1+R)] around --input-len and "
        "--output-len (vllm bench serve --random-range-ratio; 0, the default: fixed lengths).",
    ),
    "simulate_load": option(
        bool,
        "--simulate",
        default=False,
        help="Fail where the closed loop at --concurrency (vllm bench serve --max-concurrency) cannot be "
        "simulated; it is simulated wherever the deployment starts, and its TPOT and tokens/s are reported.",
    ),
    "as_json": option(bool, "--json", default=False, metavar="", help="Print the contract JSON object."),
    "from_command": option(
        str | None,
        "--from-command",
        metavar="CMDLINE",
        help="A whole engine command, quoted: `vllm serve M ...`, `python -m sglang.launch_server ...`, "
        "`trtllm-serve M ...`, `docker run ... IMAGE ...`, with NAME=value prefixes and \\ continuations. "
        "Every flag the engine accepts is taken: the sizing ones applied, the rest named in one note, "
        "unsized ones (LoRA, drafts, offload) flagged; a capplan option given beside it wins.",
    ),
    "tpot_ms": option(
        float | None,
        "--tpot-ms",
        metavar="MS",
        help="Find the largest batch whose TPOT is at most MS: the mean of a closed loop of that batch (closed form), "
        "or the simulated closed loop's p99 with --simulate or --request-rate (JSON: latency_targets).",
    ),
    "ttft_ms": option(
        float | None, "--ttft-ms", metavar="MS", help="The same for the time to first token (with or beside --tpot-ms)."
    ),
}

# the other commands' options beside the estimate's: the workload profiles (`place`, `procure`), the
# published warehouse (`limits`, `procure`)
WORKLOADS = option(
    Path | None,
    "--workloads",
    metavar="FILE",
    help="Workload profiles (default: CAPPLAN_WORKLOADS, else ./workloads.yaml, else the bundled examples).",
)
WAREHOUSE = aliased(WarehouseOption)

# `capplan limits`: a registry MODEL (no --from-command), several concurrencies, the warehouse.
LIMITS_OPTIONS = {
    "model": argument(str, default=REQUIRED, metavar="MODEL", help="Registry id, or a path to a config.json."),
    **shared("gpu", "tp", "pp", "dtype", "kv_dtype", "engine", "engine_version", "max_model_len"),
    **shared("gpu_memory_utilization", "hf_overrides"),
    "concurrency": option(
        list[int] | None,
        "--concurrency",
        metavar="B",
        help=f"Concurrent sequences to give the limit at (repeat; default {', '.join(map(str, TARGET_CONCURRENCIES))}).",
    ),
    "warehouse": WAREHOUSE,
    **shared("as_json"),
}

# `capplan place`: a load and latency targets for the whole fleet, several GPUs, lengths with defaults.
PLACE_OPTIONS = {
    "model": argument(str | None, metavar="MODEL", show_default=False, help="Registry id, or a path to a config.json."),
    "tpot_ms": option(
        float | None, "--tpot-ms", metavar="MS", help="Time per output token each request must meet (at --percentile)."
    ),
    "ttft_ms": option(
        float | None, "--ttft-ms", metavar="MS", help="Time to first token each request must meet (at --percentile)."
    ),
    "request_rate": option(
        float | None,
        "--request-rate",
        metavar="R",
        help="Requests/s to serve, all replicas together (Poisson arrivals; the targets are then checked by "
        "simulating a replica at its share).",
    ),
    "concurrency": option(
        int | None, "--concurrency", metavar="C", help="Concurrent requests to hold, all replicas together."
    ),
    "input_len": option(int, "--input-len", default=1024, metavar="I", help="Prompt tokens per request."),
    "output_len": option(int, "--output-len", default=256, metavar="O", help="Generated tokens per request."),
    "percentile": option(
        Percentile,
        "--percentile",
        default=Percentile.P99,
        case_sensitive=False,
        help="Where the simulated latency distribution must meet the targets (with --request-rate).",
    ),
    "gpu": option(
        list[str] | None,
        "--gpu",
        metavar="SKU",
        help="Only this GPU (repeat for several; default: every GPU with a price).",
    ),
    **shared("engine", "engine_version"),
    "max_model_len": option(
        int | None, "--max-model-len", metavar="T", help="Engine max model length (default: input + output)."
    ),
    "dtype_policy": option(
        str,
        "--dtype-policy",
        default="fp8",
        metavar="POLICY",
        help="Weight / KV dtypes allowed: native (the checkpoint as published), fp8-kv, fp8 (fp8 weights and "
        "KV where the GPU has fp8), any (also int4 weights).",
    ),
    "top": option(int, "--top", default=DEFAULT_TOP, metavar="N", help="Options to show, cheapest first."),
    "max_simulations": option(
        int,
        "--max-simulations",
        default=MAX_SIMULATIONS,
        metavar="N",
        help="Replica simulations the check may run before it answers.",
    ),
    "explain": option(bool, "--explain", default=False, help="Show the derivation of the cheapest option."),
    "allow_estimated_prices": option(
        bool,
        "--allow-estimated-prices",
        default=False,
        help="Also place on GPUs whose catalog price is an estimate, not a list or contract price.",
    ),
    "manifest": option(
        ManifestKind | None,
        "--manifest",
        metavar="KIND",
        case_sensitive=False,
        help=f"Print what deploys option --rank: {', '.join(k.value for k in ManifestKind)} "
        "(YAML; with --json, under the key `manifest`).",
    ),
    "rank": option(int, "--rank", default=1, metavar="N", help="The option --manifest deploys (1: cheapest)."),
    "workload": option(
        str | None,
        "--workload",
        metavar="NAME",
        help="Take the load, lengths, targets, dtype policy, engine and GPUs from this workload of --workloads "
        "(an option given beside it wins; MODEL defaults to its model).",
    ),
    "workloads": WORKLOADS,
    **shared("as_json"),
}

# `capplan pack`: several models, one GPU (required).
PACK_OPTIONS = {
    "models": option(
        list[str],
        "--model",
        default=REQUIRED,
        metavar="MODEL=BxT",
        help="A model and what it must hold at once: B sequences of T tokens (e.g. Qwen/Qwen2.5-0.5B-Instruct=16x4096); "
        "repeat for each model, in the order the engines start.",
    ),
    "gpu": option(
        str, "--gpu", default=REQUIRED, metavar="SKU", help="The GPU they share (catalog id, name or alias)."
    ),
    **shared("engine", "engine_version", "as_json"),
}

# `capplan procure`: a workloads file planned against the published warehouse.
PROCURE_OPTIONS = {"workloads": WORKLOADS, "warehouse": WAREHOUSE, **shared("as_json")}
