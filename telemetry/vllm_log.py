"""vLLM startup logs as people paste them: the phrases vLLM prints (V0 and V1 engines, 0.4-0.33 era
formats), its command lines and argument names, as a dialect of the shared parser (`startup_log`).
"""

from __future__ import annotations

import re

from telemetry.normalize import parse_int, parse_number, size_bytes
from telemetry.startup_log import (
    ARG_KEYS,
    GPU_NAME_RULES,
    NUM,
    OUT_OF_MEMORY,
    P_ARGS,
    P_BANNER,
    P_CONFIG,
    P_FORCED,
    SERVER_UP,
    SIZE,
    LogDialect,
    Rule,
    Values,
    count_field,
    counted,
    failed_start,
    rx,
    size_field,
    sized,
    started_on,
    text_field,
)


def _concurrency(m: re.Match[str]) -> Values:
    return {
        "max_concurrency_tokens": parse_int(m.group(1), "tokens per request"),
        "max_concurrency": parse_number(m.group(2), "maximum concurrency"),
        "max_model_len": parse_int(m.group(1), "tokens per request"),
    }


def _blocks(m: re.Match[str]) -> Values:
    values: Values = {"num_gpu_blocks": parse_int(m.group(1), "GPU blocks"), "engine_generation": "v0"}
    if m.group(2):
        values["num_cpu_blocks"] = parse_int(m.group(2), "CPU blocks")
    return values


def _requested(m: re.Match[str]) -> Values:
    return {
        "gpu_memory_utilization": parse_number(m.group(1), "gpu_memory_utilization"),
        "requested_memory_bytes": size_bytes(m.group(2), m.group(3), "requested memory"),
    }


def _stats(m: re.Match[str]) -> Values:
    return {
        "peak_requests_running": parse_number(m.group(1), "running requests"),
        "peak_requests_waiting": parse_number(m.group(2), "waiting requests"),
        "peak_kv_usage": parse_number(m.group(3), "KV cache usage") / 100,
    }


def _kv_needed(m: re.Match[str]) -> Values:
    return {
        "max_model_len": parse_int(m.group(1), "max seq len"),
        "kv_cache_memory_bytes": size_bytes(m.group(3), "GiB", "available KV cache memory"),
        "startup_outcome": "failed",
        "startup_error": f"KV cache for one {m.group(1)}-token request needs {m.group(2)} GiB, {m.group(3)} GiB available",
    }


def _tokens_exceeded(m: re.Match[str]) -> Values:
    return {
        "max_model_len": parse_int(m.group(1), "max seq len"),
        "kv_cache_tokens": parse_int(m.group(2), "KV cache tokens"),
        "startup_outcome": "failed",
        "startup_error": f"max seq len {m.group(1)} exceeds the {m.group(2)} tokens the KV cache holds",
    }


_PRINTED_GIB = (1 << 30) // 100  # vLLM prints GiB to 2 places


def _free_at_start(m: re.Match[str]) -> Values:
    """vLLM's "Free memory on device (F/T GiB) on startup" (0.9.1+: the start refusal of `request_memory`; 0.33 also
    the suggestion line after the CUDA graphs), with the utilization and the request where the line goes on.
    In use at start = T - F, less the printing's 0.01 GiB so that a start the log shows is never re-read as a
    refusal (the refusal itself is the next rule's)."""
    free, total = size_bytes(m.group(1), "GiB", "free memory"), size_bytes(m.group(2), "GiB", "total memory")
    values: Values = {"other_process_bytes": max(total - free - _PRINTED_GIB, 0)}
    if m.group(3):
        values["gpu_memory_utilization"] = parse_number(m.group(3), "gpu_memory_utilization")
        values["requested_memory_bytes"] = size_bytes(m.group(4), "GiB", "requested memory")
    return values


def _says(label: str, phrase: str, values: Values) -> Rule:
    """A line whose fixed wording states a setting (a warning that names what the engine turned off)."""
    return Rule(label, phrase, rx(re.escape(phrase)), lambda m: dict(values), strict=False)


RULES: tuple[Rule, ...] = (
    Rule(
        "init memory snapshot",
        "memory snapshot",
        rx(r"\btotal_memory=\s*" + SIZE),
        size_field("total_gpu_memory_bytes"),
        strict=False,
        exclusive=True,
    ),
    sized("model loading", "Model loading took", r"Model loading took\s+", "weights_bytes"),
    sized("model weights", "Loading model weights took", r"Loading model weights took\s+", "weights_bytes"),
    sized("model weights", "model weights take", r"model weights take\s+", "weights_bytes"),
    sized("weights memory", "weights memory:", r"weights memory:\s*", "weights_bytes"),
    sized("KV cache memory", "Available KV cache memory", r"Available KV cache memory:\s*", "kv_cache_memory_bytes"),
    sized("KV cache memory", "reserved for KV Cache is", r"reserved for KV Cache is\s*", "kv_cache_memory_bytes"),
    sized("KV cache memory", "available_kv_cache_memory", r"available_kv_cache_memory[\s=:]+", "kv_cache_memory_bytes"),
    sized("KV cache memory", "kv_cache_size=", r"kv_cache_size=\s*", "kv_cache_memory_bytes"),
    # a given budget (--kv-cache-memory-bytes; 0.33 `gpu_worker.determine_available_memory`): "Initial free memory F
    # GiB, reserved B GiB memory for KV Cache as specified by kv_cache_memory_bytes config ..."
    sized("KV cache memory", "memory for KV Cache as specified", r"reserved\s+", "kv_cache_memory_bytes"),
    Rule(
        "KV cache size",
        "KV cache size:",
        rx(r"KV cache size:\s*" + NUM + r"\s*tokens"),
        count_field("kv_cache_tokens"),
    ),
    Rule(
        "maximum concurrency",
        "Maximum concurrency for",
        rx(r"Maximum concurrency for\s*" + NUM + r"\s*tokens per request:\s*" + NUM + r"\s*x"),
        _concurrency,
    ),
    Rule(
        "GPU blocks",
        "GPU blocks:",
        rx(r"GPU blocks:\s*" + NUM + r"(?:,\s*#\s*CPU blocks:\s*" + NUM + ")?"),
        _blocks,
    ),
    Rule(
        "GPU blocks",
        "# CUDA blocks",
        rx(r"#\s*CUDA blocks:\s*" + NUM + r"(?:,\s*#\s*CPU blocks:\s*" + NUM + ")?"),
        _blocks,
    ),
    counted("GPU blocks", "num_gpu_blocks is:", r"num_gpu_blocks is:\s*", "num_gpu_blocks"),
    sized("total GPU memory", "total_gpu_memory", r"total_gpu_memory\s*(?:=|\(|\s)\s*", "total_gpu_memory_bytes"),
    sized("total GPU memory", "total_memory=", r"\btotal_memory=\s*", "total_gpu_memory_bytes"),
    Rule(
        "utilization",
        "gpu_memory_utilization",
        rx(r"gpu_memory_utilization\s*(?:=|\(|\s)\s*" + NUM),
        count_field("gpu_memory_utilization", False),
        strict=False,
    ),
    Rule(
        "requested memory",
        "Requested memory:",
        rx(r"Requested memory:\s*" + NUM + r"\s*\(util\),\s*" + SIZE),
        _requested,
    ),
    Rule(
        "usable memory",
        "instance can use",
        rx(r"instance can use\s+(?:.*?=\s*)?" + SIZE + r"\s*\.?\s*$"),
        lambda m: {"requested_memory_bytes": size_bytes(m.group(1), m.group(2), "usable memory")},
    ),
    sized("non-torch memory", "non_torch_memory", r"non_torch_memory(?:\s+takes|\s*=|\s+)\s*", "non_torch_bytes"),
    sized(
        "non-torch memory",
        "non-torch forward increase memory",
        r"non-torch forward increase memory:\s*",
        "non_torch_bytes",
    ),
    sized(
        "activation peak",
        "PyTorch activation peak memory",
        r"PyTorch activation peak memory(?:\s+takes)?\s+",
        "activation_peak_bytes",
    ),
    sized("activation peak", "torch peak memory increase", r"torch peak memory increase:\s*", "activation_peak_bytes"),
    sized("peak torch memory", "peak_torch_memory=", r"peak_torch_memory=\s*", "peak_torch_bytes"),
    sized("non-KV memory", "Total non KV cache memory", r"Total non KV cache memory:\s*", "non_kv_bytes"),
    Rule(
        "CUDA graphs",
        "Graph capturing finished",
        rx(r"Graph capturing finished in\s*" + NUM + r"\s*(?:secs?|s)\b(?:,\s*took\s*|\s*\(\s*)" + SIZE),
        lambda m: {"cuda_graph_bytes": size_bytes(m.group(2), m.group(3), "CUDA graphs")},
        strict=False,  # V0 prints no size: "Graph capturing finished in 15 secs."
    ),
    Rule(
        "CUDA graph pool",
        "CUDA graph pool memory",
        rx(r"CUDA graph pool memory:\s*" + SIZE + r"\s*\(actual\)"),
        size_field("cuda_graph_bytes"),
    ),
    sized(
        "CUDA graph estimate",
        "Estimated CUDA graph memory",
        r"Estimated CUDA graph memory:\s*",
        "cuda_graph_estimate_bytes",
    ),
    counted(
        "batched tokens", "Chunked prefill is enabled with", r"max_num_batched_tokens=\s*", "max_num_batched_tokens"
    ),
    counted("max_num_seqs default", "Defaulting max_num_seqs to", r"Defaulting max_num_seqs to\s*", "max_num_seqs"),
    counted(
        "batched tokens default",
        "Defaulting max_num_batched_tokens to",
        r"Defaulting max_num_batched_tokens to\s*",
        "max_num_batched_tokens",
    ),
    Rule(
        "hybrid block size",
        "Setting attention block size to",
        rx(r"Setting attention block size to\s*" + NUM + r"\s*tokens"),
        count_field("block_size"),
        priority=P_FORCED,
    ),
    Rule(
        "max model len",
        "Using max model len",
        rx(r"Using max model len\s*" + NUM),
        count_field("max_model_len"),
        priority=P_ARGS,
    ),
    Rule(
        "engine stats",
        "reqs,",
        rx(
            r"Running:\s*"
            + NUM
            + r"\s*reqs.*?(?:Waiting|Pending):\s*"
            + NUM
            + r"\s*reqs.*?(?:GPU )?KV cache usage:\s*"
            + NUM
            + r"\s*%"
        ),
        _stats,
        strict=False,
    ),
    Rule(
        "KV too small",
        "KV cache is needed",
        rx(
            r"max seq len \("
            + NUM
            + r"\),\s*\("
            + NUM
            + r"\s*GiB KV cache is needed, which is larger than the available KV cache memory \("
            + NUM
            + r"\s*GiB\)"
        ),
        _kv_needed,
    ),
    Rule(
        "KV too small",
        "maximum number of tokens that can be stored in KV cache",
        rx(
            r"max seq len \("
            + NUM
            + r"\) is larger than the maximum number of tokens that can be stored in KV cache \("
            + NUM
            + r"\)"
        ),
        _tokens_exceeded,
    ),
    OUT_OF_MEMORY,
    Rule(
        "no KV memory",
        "No available memory for the cache blocks",
        rx(r"No available memory for the cache blocks"),
        failed_start("no memory left for the KV cache"),
    ),
    Rule(
        "free memory at start",
        "on startup",
        rx(
            r"Free memory on device(?:\s+[\w:]+)?\s*\(\s*" + NUM + r"\s*/\s*" + NUM + r"\s*GiB\)\s*on startup"
            + r"(?:\.?\s*(?:is less than desired GPU memory utilization|Desired GPU memory utilization is)\s*\(\s*"
            + NUM + r"\s*,\s*" + NUM + r"\s*GiB\))?"
        ),
        _free_at_start,
        strict=False,
    ),
    Rule(
        "not enough free memory",
        "less than desired GPU memory utilization",
        rx(r"less than desired GPU memory utilization"),
        failed_start("free memory below the requested utilization"),
    ),
    _says("no GPU peer access", "Custom allreduce is disabled because your platform lacks GPU P2P capability",
          {"gpu_peer_access": False}),
    Rule(
        "MXFP4 backend",
        "backend",
        rx(r"\[mxfp4\.py:\d+\] Using (Marlin|Triton) backend"),
        lambda m: {"triton_kernels": m.group(1) == "Triton"},
        strict=False,
    ),
    _says("MXFP4 backend", "Weight-only FP4 compression will be used leveraging the Marlin kernel",
          {"triton_kernels": False}),
    SERVER_UP,
    started_on("Starting vLLM API server"),
    Rule(
        "model",
        "Starting to load model",
        rx(r"Starting to load model\s+(\S+?)(?:\.\.\.)?\s*$"),
        text_field("model"),
        strict=False,
    ),
    Rule(
        "server version",
        "vLLM API server version",
        rx(r"vLLM API server version\s+v?(\d[\w.+-]*)"),
        text_field("engine_version"),
        priority=P_CONFIG,
        marker=True,
    ),
    Rule(
        "banner version",
        "█",
        rx(r"█\s+version\s+v?(\d[\w.+-]*)"),
        text_field("engine_version"),
        strict=False,
        priority=P_CONFIG,
        marker=True,
    ),
    Rule("banner model", "█", rx(r"█\s+model\s+(\S+)"), text_field("model"), strict=False, priority=P_BANNER),
    *GPU_NAME_RULES,
)

_BOOLEAN_FLAGS = frozenset(
    {
        "enable_prefix_caching",
        "no_enable_prefix_caching",
        "enforce_eager",
        "trust_remote_code",
        "disable_log_requests",
        "disable_log_stats",
        "enable_chunked_prefill",
        "no_enable_chunked_prefill",
        "enable_expert_parallel",
        "disable_custom_all_reduce",
        "enable_auto_tool_choice",
        "disable_frontend_multiprocessing",
        "enable_lora",
        "rm",
        "it",
        "d",
    }
)
_COMMAND = re.compile(
    r"^\s*(?:[$#>]\s*)?(?:sudo\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*"
    r"(?P<cmd>vllm\s+serve\b|python3?(?:\.\d+)?\s+-m\s+vllm\.entrypoints\.(?:openai\.)?api_server\b|docker\s+run\b)"
)
_IMAGE = re.compile(r"^vllm/vllm-openai(?::v?(\d[\w.+-]*))?$")

VLLM = LogDialect(
    engine="vllm",
    rules=RULES,
    command=_COMMAND,
    image=_IMAGE,
    arg_keys=ARG_KEYS,
    boolean_flags=_BOOLEAN_FLAGS,
    namespace_markers=("args: Namespace(",),
    markers=("vllm", "vLLM", "KV cache", "GPU blocks", "Model loading took", "Loading model weights took"),
)
