"""SGLang startup logs: the phrases SGLang prints (read in its sources, 0.3-0.5 era formats), as a dialect of
the shared startup-log parser (`startup_log.parse_engine_log`).

- "KV Cache is allocated. [dtype: ..., ]#tokens: N, K size: X GB, V size: Y GB" (or "KV size: X GB"; older
  releases print only the sizes) -> kv_cache_tokens, kv_cache_memory_bytes = K + V. SGLang's "GB" is bytes /
  2^30, like vLLM's. Repeats combine by max: TP ranks print the same pool, a speculative draft model prints a
  second, smaller one after the target's.
- "Load weight end. ... mem usage=X GB" -> weights_bytes (older releases print no mem usage);
- "max_total_num_tokens=N, chunked_prefill_size=C, ..., max_running_requests=R, context_len=L" -> the pool's
  tokens and the settings SGLang resolved;
- `server_args=ServerArgs(...)` and `python -m sglang.launch_server ...` -> settings (mem_fraction_static is
  the observation's gpu_memory_utilization: the fraction of the device SGLang sizes its static pool from);
- "Not enough memory. Please try to increase --mem-fraction-static" -> a failed start; "The server is fired
  up and ready to roll!" -> started.
"""

from __future__ import annotations

import re

from telemetry.normalize import RowError, parse_int, size_bytes
from telemetry.speculative_log import SPECULATIVE_KEYS
from telemetry.startup_log import (
    FEATURE_KEYS,
    NUM,
    P_ARGS,
    P_CONFIG,
    SHARED_RULES,
    SIZE,
    LogDialect,
    Rule,
    Values,
    count_field,
    failed_start,
    rx,
    size_field,
    started_on,
    text_field,
)


def _kv_pool(m: re.Match[str]) -> Values:
    """K + V (or the one KV size of MLA pools), and the token count where the release prints it."""
    if m.group("k") is not None:
        k = size_bytes(m.group("k"), m.group("ku"), "K size")
        v = size_bytes(m.group("v"), m.group("vu"), "V size")
        total = k + v
    else:
        total = size_bytes(m.group("kv"), m.group("kvu"), "KV size")
    values: Values = {"kv_cache_memory_bytes": total}
    if m.group("tokens") is not None:
        values["kv_cache_tokens"] = parse_int(m.group("tokens"), "#tokens")
    return values


_RESOLVED = {
    "max_total_num_tokens": "kv_cache_tokens",
    "chunked_prefill_size": "max_num_batched_tokens",
    "max_running_requests": "max_num_seqs",
    "context_len": "max_model_len",
}


def _resolved_settings(m: re.Match[str]) -> Values:
    """The scheduler's summary line; chunked_prefill_size -1 (chunking off) is not a token budget."""
    values: Values = {}
    for key, target in _RESOLVED.items():
        km = re.search(r"\b" + key + r"=\s*(-?\d[\d,]*)", m.string, re.ASCII)
        if km:
            value = parse_int(km.group(1), key)
            if key == "chunked_prefill_size" and value < 0:
                continue
            values[target] = value
    if "kv_cache_tokens" not in values:
        raise RowError("malformed", "max_total_num_tokens= without a number (truncated line?)")
    return values


_KV_POOL = rx(
    r"KV Cache is allocated\.(?:\s*dtype:\s*[\w.]+,)?\s*(?:#tokens:\s*" + NUM.replace("(", "(?P<tokens>", 1) + r",\s*)?"
    r"(?:K size:\s*(?P<k>-?\d+(?:\.\d+)?)\s*(?P<ku>GB|GiB|MB|MiB),\s*V size:\s*(?P<v>-?\d+(?:\.\d+)?)\s*(?P<vu>GB|GiB|MB|MiB)"
    r"|KV size:\s*(?P<kv>-?\d+(?:\.\d+)?)\s*(?P<kvu>GB|GiB|MB|MiB))"
)

RULES: tuple[Rule, ...] = (
    Rule("KV pool", "KV Cache is allocated", _KV_POOL, _kv_pool),
    Rule(
        "weights",
        "Load weight end",
        rx(r"Load weight end\..*?mem usage=\s*" + SIZE),
        size_field("weights_bytes"),
        strict=False,  # releases before 0.4.3 print only avail mem
    ),
    Rule("pool summary", "max_total_num_tokens=", rx(r"max_total_num_tokens="), _resolved_settings, priority=P_ARGS),
    Rule(
        "not enough memory",
        "Not enough memory",
        rx(r"Not enough memory\. Please try to increase --mem-fraction-static"),
        failed_start("no memory left for the KV cache pool (Not enough memory: increase --mem-fraction-static)"),
        strict=False,
    ),
    started_on("fired up and ready to roll"),
    Rule(
        "version",
        "sglang",
        rx(r"^\s*sglang(?:\s+version)?\s*[:=]\s*v?(\d+\.\d[\w.+-]*)\s*$"),
        text_field("engine_version"),
        strict=False,
        priority=P_CONFIG,
    ),
    Rule("page size", "page_size=", rx(r"\bpage_size=\s*" + NUM), count_field("block_size"), strict=False),
    *SHARED_RULES,
)

ARG_KEYS = {
    "model_path": "model",
    "model": "model",
    "served_model_name": "served_model_name",
    "tp_size": "tp",
    "tp": "tp",
    "tensor_parallel_size": "tp",
    "pp_size": "pp",
    "pipeline_parallel_size": "pp",
    "dp_size": "dp",  # attention DP ranks where enable_dp_attention is on, else whole replicas
    "dp": "dp",
    "attn_dp_size": "dp",
    "ep_size": "ep",
    "ep": "ep",
    "expert_parallel_size": "ep",
    "mem_fraction_static": "gpu_memory_utilization",
    "context_length": "max_model_len",
    "dtype": "weight_dtype",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "page_size": "block_size",
    "max_running_requests": "max_num_seqs",
    "chunked_prefill_size": "max_num_batched_tokens",
    "disable_cuda_graph": "enforce_eager",
    **FEATURE_KEYS,
    **SPECULATIVE_KEYS,
}

BOOLEAN_FLAGS = frozenset(
    {
        "trust_remote_code",
        "enable_p2p_check",
        "enable_metrics",
        "disable_radix_cache",
        "disable_cuda_graph",
        "enable_dp_attention",
        "enable_torch_compile",
        "rm",
        "it",
        "d",
        "enable_mixed_chunk",
        "disable_overlap_schedule",
        "enable_ep_moe",
    }
)
MARKERS = (
    "KV Cache is allocated",
    "sglang.launch_server",
    "server_args=ServerArgs(",
    "max_total_num_tokens=",
    "Load weight end",
    "fired up and ready to roll",
)

SGLANG = LogDialect(
    engine="sglang",
    rules=RULES,
    command=re.compile(
        r"^\s*(?:[$#>]\s*)?(?:sudo\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*"
        r"(?P<cmd>python3?(?:\.\d+)?\s+-m\s+sglang\.launch_server\b|sglang\s+serve\b|docker\s+run\b)"
    ),
    image=re.compile(r"^lmsysorg/sglang(?::v?(\d[\w.+-]*?))?(?:-(?:cu|rocm)\w*)?$"),
    arg_keys=ARG_KEYS,
    boolean_flags=BOOLEAN_FLAGS,
    namespace_markers=("server_args=ServerArgs(",),
    markers=MARKERS,
    max_fields=frozenset({"kv_cache_memory_bytes", "kv_cache_tokens"}),
)
