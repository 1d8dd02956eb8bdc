"""`capplan estimate`'s arguments and options, one typer alias each: the commands that share an option
(`limits`, `place`, `pack`, `procure`) import it from here, so it is declared once."""

from __future__ import annotations

from typing import Annotated

import typer

from capacity.dtypes import KV_DTYPES, WEIGHT_DTYPES
from capacity.engines import ENGINE_NAMES

# vLLM's spellings of `--dtype` / `--kv-cache-dtype` values, so a `vllm serve` command line pastes as is.
_VLLM_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float": "float32", "fp32": "float32"}


def dtype_name(value: str) -> str:
    """The dtype in capplan's spelling, so that vLLM's (bfloat16, half...) pastes as is."""
    return _VLLM_DTYPES.get(value.lower(), value.lower())


# `capplan estimate`'s arguments and options, one alias each (typer reads them from the annotations).
ModelArgument = Annotated[
    str | None,
    typer.Argument(
        metavar="MODEL",
        show_default=False,
        help="Registry id, path to a config.json, or a directory with one (or --from-command).",
    ),
]
FromCommandOption = Annotated[
    str | None,
    typer.Option(
        "--from-command",
        metavar="CMDLINE",
        help="A whole engine command, quoted: `vllm serve M ...`, `python -m sglang.launch_server ...`, "
        "`trtllm-serve M ...`, `docker run ... IMAGE ...`, with NAME=value prefixes and \\ continuations. "
        "Every flag the engine accepts is taken: the sizing ones applied, the rest named in one note, "
        "unsized ones (LoRA, drafts, offload) flagged; a capplan option given beside it wins.",
    ),
]
GpuOption = Annotated[
    str | None, typer.Option("--gpu", metavar="SKU", help="GPU catalog id or alias (nvidia-smi/DCGM names too).")
]
TpOption = Annotated[
    int, typer.Option("--tp", "--tensor-parallel-size", "-tp", metavar="N", help="Tensor-parallel size.")
]
PpOption = Annotated[
    int, typer.Option("--pp", "--pipeline-parallel-size", "-pp", metavar="N", help="Pipeline-parallel size.")
]
DtypeOption = Annotated[
    str,
    typer.Option(
        "--dtype",
        metavar="DTYPE",
        callback=dtype_name,
        help=f"Weight dtype: {', '.join(WEIGHT_DTYPES)} (vLLM's bfloat16, float16, half, float too).",
    ),
]
KvDtypeOption = Annotated[
    str,
    typer.Option(
        "--kv-dtype",
        "--kv-cache-dtype",
        metavar="DTYPE",
        callback=dtype_name,
        help=f"KV cache dtype: {', '.join(KV_DTYPES)}.",
    ),
]
ContextOption = Annotated[
    int | None, typer.Option("--context", metavar="T", help="Tokens per sequence T (default: max model len).")
]
ConcurrencyOption = Annotated[
    int | None, typer.Option("--concurrency", metavar="B", help="Target concurrent sequences B.")
]
InputLenOption = Annotated[
    int | None,
    typer.Option("--input-len", metavar="I", help="Prompt tokens per request, for the speed block (TTFT)."),
]
OutputLenOption = Annotated[
    int | None,
    typer.Option(
        "--output-len", metavar="O", help="Generated tokens per request (default: min(256, T / 2)); T = I + O."
    ),
]
MaxModelLenOption = Annotated[
    int | None,
    typer.Option(
        "--max-model-len",
        metavar="T",
        help="Engine max model length (-1: the largest that starts, vLLM's auto-fit).",
    ),
]
AsyncSchedulingOption = Annotated[
    bool | None,
    typer.Option(
        "--async-scheduling/--no-async-scheduling",
        metavar="",
        help="vLLM async scheduling (default on, as on GPUs; off keeps one batch in flight, as the CPU build).",
    ),
]
EnforceEagerOption = Annotated[
    bool,
    typer.Option(
        "--enforce-eager",
        help="No CUDA graphs (vLLM --enforce-eager): from 0.21 the graph estimate is then not deducted.",
    ),
]
AllowLongMaxModelLenOption = Annotated[
    bool,
    typer.Option(
        "--allow-long-max-model-len",
        help="The engine's override for a --max-model-len beyond the model's limit is set "
        "(VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1); without it the "
        "engine refuses to start.",
    ),
]
TritonKernelsOption = Annotated[
    bool | None,
    typer.Option(
        "--triton-kernels/--no-triton-kernels",
        metavar="",
        help="The triton_kernels package installed beside vLLM 0.10.2-0.11.x (0.12+ bundles it): "
        "gpt-oss's MXFP4 experts on Hopper run the OAI Triton kernels, else Marlin (default: a pip install, without; "
        "--no-triton-kernels: Marlin on any release, as VLLM_MXFP4_USE_MARLIN=1).",
    ),
]
DisableCustomAllReduceOption = Annotated[
    bool,
    typer.Option(
        "--disable-custom-all-reduce",
        help="vLLM without its custom all-reduce: at TP > 1 the CUDA graphs capture NCCL's all-reduce.",
    ),
]
GpuPeerAccessOption = Annotated[
    bool | None,
    typer.Option(
        "--gpu-peer-access/--no-gpu-peer-access",
        metavar="",
        help="Whether the GPUs pass vLLM's P2P test (default: over NVLink yes, over PCIe no): at TP 2 on PCIe, "
        "with it vLLM's custom all-reduce runs.",
    ),
]
EnableLoraOption = Annotated[
    bool,
    typer.Option("--enable-lora", help="LoRA adapters are served: their GPU slots are charged before the KV cache."),
]
MaxLorasOption = Annotated[
    int | None,
    typer.Option("--max-loras", metavar="N", help="LoRA slots on the GPU (vLLM default 1; SGLang's per-batch 8)."),
]
MaxLoraRankOption = Annotated[
    int | None, typer.Option("--max-lora-rank", metavar="R", help="The largest adapter rank (default 16).")
]
MaxCpuLorasOption = Annotated[
    int | None,
    typer.Option("--max-cpu-loras", metavar="N", help="Adapters kept in host memory (default: --max-loras)."),
]
LoraDtypeOption = Annotated[
    str | None, typer.Option("--lora-dtype", metavar="DTYPE", help="auto (the model's) | float16 | bfloat16.")
]
LoraTargetModulesOption = Annotated[
    str | None,
    typer.Option(
        "--lora-target-modules",
        metavar="NAMES",
        help="Modules with LoRA, e.g. 'q_proj,v_proj' or all (default: vLLM every supported one).",
    ),
]
FullyShardedLorasOption = Annotated[
    bool, typer.Option("--fully-sharded-loras", help="vLLM splits the adapters' rank / output over TP too.")
]
CpuOffloadGbOption = Annotated[
    float | None,
    typer.Option(
        "--cpu-offload-gb", metavar="GIB", help="Weights per GPU kept in host memory (the GPU holds the rest)."
    ),
]
EnableDpAttentionOption = Annotated[
    bool, typer.Option("--enable-dp-attention", help="SGLang's spelling beside --dp: --dp is the attention DP size.")
]
DpOption = Annotated[
    int, typer.Option("--dp", "--data-parallel-size", metavar="N", help="Attention DP ranks, a KV pool each.")
]
EpOption = Annotated[
    int, typer.Option("--ep", metavar="N", help="Expert-parallel width: whole experts per rank (1: split by TP).")
]
EnableExpertParallelOption = Annotated[
    bool,
    typer.Option("--enable-expert-parallel", help="Experts split whole over EP = tp x dp (vLLM) or tp (SGLang)."),
]
DcpOption = Annotated[
    int, typer.Option("--dcp", metavar="N", help="vLLM decode context parallel: a request's KV over N TP ranks.")
]
RedundantExpertsOption = Annotated[
    int, typer.Option("--redundant-experts", metavar="N", help="EPLB's redundant experts, spread over the EP ranks.")
]
LimitMmPerPromptOption = Annotated[
    str | None,
    typer.Option(
        "--limit-mm-per-prompt",
        metavar="JSON",
        help='vLLM items per prompt by modality, e.g. \'{"image":0,"video":0}\' (all 0: served text-only, no '
        "encoder profiling; from 0.11 no tower weights).",
    ),
]
LanguageModelOnlyOption = Annotated[
    bool,
    typer.Option("--language-model-only", help="vLLM serves a multimodal model text-only (every modality 0)."),
]
KvTransferConfigOption = Annotated[
    str | None,
    typer.Option(
        "--kv-transfer-config",
        metavar="JSON",
        help="vLLM KV connector: LMCacheConnectorV1 and OffloadingConnector are sized (GPU buffers, CPU tiers); "
        "others are flagged.",
    ),
]
EnablePrefixCachingOption = Annotated[
    bool | None,
    typer.Option(
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="Prefix caching (default: the engine's; on in vLLM V1, SGLang and TensorRT-LLM).",
    ),
]
SharedPrefixTokensOption = Annotated[
    int | None,
    typer.Option("--shared-prefix-tokens", metavar="S", help="A prompt prefix every sequence shares (held once)."),
]
PrefixHitRateOption = Annotated[
    float | None,
    typer.Option("--prefix-hit-rate", metavar="H", help="Share of prompt tokens from the prefix cache (TTFT)."),
]
GpuMemoryUtilizationOption = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory-utilization",
        metavar="FRACTION",
        help="Share of device memory the engine may use (vLLM --gpu-memory-utilization, SGLang "
        "--mem-fraction-static, TensorRT-LLM --free_gpu_memory_fraction). Default: the release's: vLLM 0.92 "
        "from 0.22 (0.9 before), SGLang by GPU memory and TP, TensorRT-LLM 0.9 of the free memory.",
    ),
]
EngineOption = Annotated[
    str, typer.Option("--engine", metavar="ENGINE", help=f"Serving engine: {', '.join(ENGINE_NAMES)}.")
]
EngineVersionOption = Annotated[
    str | None,
    typer.Option(
        "--engine-version",
        metavar="VERSION",
        help="Engine release whose rules apply (default: the latest profile).",
    ),
]
BlockSizeOption = Annotated[
    int | None, typer.Option("--block-size", metavar="TOKENS", help="KV block size (default: the engine's).")
]
MaxNumBatchedTokensOption = Annotated[
    int | None,
    typer.Option(
        "--max-num-batched-tokens", metavar="TOKENS", help="Tokens per scheduler step (sizes the activation peak)."
    ),
]
MaxNumSeqsOption = Annotated[
    int | None,
    typer.Option("--max-num-seqs", metavar="N", help="Most sequences the engine runs at once (caps B_max)."),
]
GpuMemoryGibOption = Annotated[
    float | None,
    typer.Option("--gpu-memory-gib", metavar="GIB", help="Device total (GiB), for hardware not in the catalog."),
]
WeightsGibOption = Annotated[
    float | None,
    typer.Option("--weights-gib", metavar="GIB", help="Weights per GPU (GiB), overriding the checkpoint."),
]
OverheadGibOption = Annotated[
    float | None, typer.Option("--overhead-gib", metavar="GIB", help="All non-KV overhead per GPU (GiB).")
]
OtherProcessGibOption = Annotated[
    float | None,
    typer.Option(
        "--other-process-gib",
        metavar="GIB",
        help="Memory other processes hold on each GPU when the engine starts (GiB; on a unified-memory GPU such "
        "as GB10, the host's own use): vLLM >= 0.9.1 refuses to start below its request, SGLang and "
        "TensorRT-LLM size a smaller pool.",
    ),
]
KvCacheMemoryGibOption = Annotated[
    float | None,
    typer.Option("--kv-cache-memory-gib", metavar="GIB", help="KV budget per GPU (GiB), skipping the budget."),
]
KvCacheMemoryBytesOption = Annotated[
    int | None,
    typer.Option(
        "--kv-cache-memory-bytes",
        metavar="BYTES",
        help="KV budget per GPU in bytes, skipping the budget (vLLM's spelling; not with --kv-cache-memory-gib).",
    ),
]
MaxTotalTokensOption = Annotated[
    int | None,
    typer.Option(
        "--max-total-tokens",
        metavar="TOKENS",
        help="SGLang's cap on the token pool (min of the profiled pool and this; the memory fraction is unchanged).",
    ),
]
RequestRateOption = Annotated[
    float | None,
    typer.Option(
        "--request-rate",
        metavar="R",
        help="Simulate Poisson arrivals at R requests/s on one replica (vllm bench serve --request-rate).",
    ),
]
BurstOption = Annotated[
    int | None,
    typer.Option(
        "--burst", metavar="N", help="Simulate N requests sent at once (vllm bench serve --request-rate inf)."
    ),
]
NumPromptsOption = Annotated[
    int,
    typer.Option("--num-prompts", metavar="N", help="Requests a simulated closed or open loop sends (default 1000)."),
]
SimulateOption = Annotated[
    bool,
    typer.Option(
        "--simulate",
        help="Also simulate --concurrency as a closed loop (vllm bench serve --max-concurrency); "
        "above B_max the simulation is the answer whether or not this is given.",
    ),
]
AsJsonOption = Annotated[bool, typer.Option("--json", metavar="", help="Print the contract JSON object.")]
TpotMsOption = Annotated[
    float | None,
    typer.Option(
        "--tpot-ms",
        metavar="MS",
        help="Find the largest batch whose TPOT is at most MS: steady state, or the simulated closed loop's p99 "
        "with --simulate or --request-rate (JSON: latency_targets).",
    ),
]
TtftMsOption = Annotated[
    float | None,
    typer.Option("--ttft-ms", metavar="MS", help="The same for the time to first token (with or beside --tpot-ms)."),
]
