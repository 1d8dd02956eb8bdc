"""TensorRT-LLM startup logs (the PyTorch backend of trtllm-serve / the LLM API, and prebuilt engines), as a
dialect of the shared startup-log parser (`startup_log.parse_engine_log`). The phrases, read in
cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp and tensorrt_llm/_torch/pyexecutor/_util.py:

- "[MemUsageChange] Allocated X GiB for max tokens in paged KV cache (N)" -> kv_cache_memory_bytes,
  kv_cache_tokens (N = primary blocks x tokens per block); the PyTorch backend of 1.x prints it twice, for the
  small pool of its memory-estimation run and then for the final pool: the last line wins;
- before the GiB line, as the public logs of the 0.5-0.10 lines print it (TensorRT-LLM issues #224, #1400,
  tensorrtllm_backend#456): "Allocate N bytes for k/v cache." (0.8), "Max tokens in paged KV cache: T.
  Allocating N bytes." (0.10 dev) -> kv_cache_memory_bytes (and kv_cache_tokens); "Using T tokens in paged KV
  cache." -> kv_cache_tokens;
- "Memory usage when calculating max tokens in paged kv cache: total: X GiB, available: Y GiB" ->
  total_gpu_memory_bytes (what is available is what the fraction applies to);
- 1.x memory profiling: "Memory used after loading model weights (inside torch) ...: X GiB" -> weights_bytes,
  "Memory dynamically allocated during inference (inside torch) ...: X GiB" -> activation_peak_bytes, "Memory
  used outside torch (e.g., NCCL and CUDA graphs) ...: X GiB" -> non_torch_bytes, "Peak memory during memory
  usage profiling (torch + non-torch): P GiB, available KV cache memory ...: A GiB, fraction is set F, ...
  device total memory T GiB" -> non_kv_bytes, gpu_memory_utilization, total_gpu_memory_bytes (A = (T - P +
  the estimation pool) x F);
- "Number of tokens per block: N." -> block_size; "Number of blocks in KV cache primary pool: N" or
  "primary blocks=N" -> num_gpu_blocks;
- "max_seq_len=N, max_num_requests=R, max_num_tokens=T" -> max_model_len, max_num_seqs,
  max_num_batched_tokens; "TensorRT-LLM version: V" (1.2: "TensorRT LLM version") -> engine_version;
- `trtllm-serve MODEL --tp_size ... --kv_cache_free_gpu_memory_fraction F` -> settings (F is the observation's
  gpu_memory_utilization: for TensorRT-LLM the fraction of the memory free after the model, not of the device).
"""

from __future__ import annotations

import re

from telemetry.normalize import parse_int, size_bytes
from telemetry.startup_log import (
    NUM,
    P_ARGS,
    P_CONFIG,
    SHARED_RULES,
    SIZE,
    LogDialect,
    Rule,
    Values,
    count_field,
    counted,
    rx,
    sized,
    text_field,
)


def _allocated(m: re.Match[str]) -> Values:
    return {
        "kv_cache_memory_bytes": size_bytes(m.group(1), m.group(2), "paged KV cache"),
        "kv_cache_tokens": parse_int(m.group(3), "max tokens in paged KV cache"),
    }


def _tokens_and_bytes(m: re.Match[str]) -> Values:
    return {
        "kv_cache_tokens": parse_int(m.group(1), "max tokens in paged KV cache"),
        "kv_cache_memory_bytes": parse_int(m.group(2), "paged KV cache bytes"),
    }


def _limits(m: re.Match[str]) -> Values:
    return {
        "max_model_len": parse_int(m.group(1), "max_seq_len"),
        "max_num_seqs": parse_int(m.group(2), "max_num_requests"),
        "max_num_batched_tokens": parse_int(m.group(3), "max_num_tokens"),
    }


def _profiling_peak(m: re.Match[str]) -> Values:
    """1.x `_util.py` after its estimation run: the KV budget is (total - peak + the estimation pool) x fraction."""
    return {
        "non_kv_bytes": size_bytes(m.group(1), m.group(2), "peak memory"),
        "gpu_memory_utilization": round(float(m.group(5)), 6),
        "total_gpu_memory_bytes": size_bytes(m.group(6), m.group(7), "device total memory"),
    }


RULES: tuple[Rule, ...] = (
    Rule(
        "profiling peak",
        "Peak memory during memory usage profiling",
        rx(
            r"\(torch \+ non-torch\):\s*" + SIZE + r",\s*available KV cache memory when calculating max tokens:\s*"
            + SIZE + r",\s*fraction is set\s*" + NUM + r".*?device total memory\s*" + SIZE
        ),
        _profiling_peak,
    ),
    sized(
        "weights",
        "after loading model weights (inside torch)",
        r"after loading model weights \(inside torch\) in memory usage profiling:\s*",
        "weights_bytes",
    ),
    sized(
        "activation peak",
        "allocated during inference (inside torch)",
        r"allocated during inference \(inside torch\) in memory usage profiling:\s*",
        "activation_peak_bytes",
    ),
    sized(
        "non-torch memory",
        "Memory used outside torch",
        r"Memory used outside torch[^:]*in memory usage profiling:\s*",
        "non_torch_bytes",
    ),
    Rule(
        "paged KV cache",
        "for max tokens in paged KV cache",
        rx(r"Allocated\s+" + SIZE + r"\s+for max tokens in paged KV cache\s*\(\s*" + NUM + r"\s*\)"),
        _allocated,
    ),
    Rule(
        "paged KV cache bytes",
        "Allocating",
        rx(r"Max tokens in paged KV cache:\s*" + NUM + r"\.\s*Allocating\s+" + NUM + r"\s+bytes"),
        _tokens_and_bytes,
        strict=False,
    ),
    Rule(
        "k/v cache bytes",
        "bytes for k/v cache",
        rx(r"Allocate\s+" + NUM + r"\s+bytes for k/v cache"),
        lambda m: {"kv_cache_memory_bytes": parse_int(m.group(1), "k/v cache bytes")},
    ),
    Rule(
        "tokens in paged KV cache",
        "tokens in paged KV cache.",
        rx(r"Using\s+" + NUM + r"\s+tokens in paged KV cache"),
        count_field("kv_cache_tokens"),
    ),
    Rule(
        "memory for the KV cache",
        "Memory usage when calculating max tokens",
        rx(r"total:\s*" + SIZE + r",\s*available:\s*" + SIZE),
        lambda m: {"total_gpu_memory_bytes": size_bytes(m.group(1), m.group(2), "total GPU memory")},
    ),
    counted("tokens per block", "Number of tokens per block", r"tokens per block:\s*", "block_size"),
    counted("primary pool", "KV cache primary pool:", r"KV cache primary pool:\s*", "num_gpu_blocks"),
    Rule(
        "primary pool",
        "primary blocks=",
        rx(r"primary blocks=\s*" + NUM),
        count_field("num_gpu_blocks"),
        strict=False,
    ),
    Rule(
        "limits",
        "max_num_requests=",
        rx(r"max_seq_len=\s*" + NUM + r",\s*max_num_requests=\s*" + NUM + r",\s*max_num_tokens=\s*" + NUM),
        _limits,
        priority=P_ARGS,
    ),
    Rule(
        "fraction",
        "free_gpu_memory_fraction and max_tokens are set",
        rx(r"\(to\s*" + NUM + r"\s+and\s+" + NUM),
        lambda m: {"gpu_memory_utilization": round(float(m.group(1)), 6)},
        strict=False,
        priority=P_ARGS,
    ),
    Rule(
        "version",
        "LLM version:",
        rx(r"TensorRT[- ]LLM version:\s*v?(\d[\w.+-]*)"),
        text_field("engine_version"),
        priority=P_CONFIG,
        marker=True,
    ),
    *SHARED_RULES,
)

TRTLLM = LogDialect(
    engine="trtllm",
    rules=RULES,
    command=re.compile(
        r"^\s*(?:[$#>]\s*)?(?:sudo\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:mpirun\s+.*?\s+)?"
        r"(?P<cmd>trtllm-serve(?:\s+serve)?\b|docker\s+run\b)"
    ),
    image=re.compile(r"^nvcr\.io/nvidia/tensorrt-llm/release(?::v?(\d[\w.+-]*))?$"),
    arg_keys={
        "model": "model",
        "tp_size": "tp",
        "tensor_parallel_size": "tp",
        "pp_size": "pp",
        "pipeline_parallel_size": "pp",
        "kv_cache_free_gpu_memory_fraction": "gpu_memory_utilization",
        "max_seq_len": "max_model_len",
        "max_batch_size": "max_num_seqs",
        "max_num_tokens": "max_num_batched_tokens",
        "kv_cache_dtype": "kv_cache_dtype",
    },
    boolean_flags=frozenset({"trust_remote_code", "rm", "it", "d"}),
    namespace_markers=(),
    # bracketed tags and phrases only TensorRT-LLM prints (vLLM logs name "TRTLLM" attention kernels)
    markers=("[TensorRT-LLM]", "[TRT-LLM]", "trtllm-serve", "for max tokens in paged KV cache"),
    # the PyTorch backend sizes the pool twice: a small one for its estimation run, then the final one (and
    # max_seq_len is adjusted to each pool)
    last_fields=frozenset({"kv_cache_memory_bytes", "kv_cache_tokens", "num_gpu_blocks", "max_model_len"}),
)
