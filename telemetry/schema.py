"""Column names and types of the telemetry frames (the `raw.telemetry_*` tables).

One dict per frame, in column order; README.md in this package documents every column. Bytes are
integers, times are UTC microseconds, fractions are in [0, 1].
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import polars as pl

from models_registry.redact import redact

UTC_US = pl.Datetime("us", "UTC")

# One row per deployment observation: a startup-log segment, a CSV/Parquet row, or a
# `vllm:cache_config_info` sample. Settings and measured values; null = not reported by that source.
OBSERVATION_SCHEMA: dict[str, Any] = {
    "observation_id": pl.String,
    "deployment_id": pl.String,
    "source_kind": pl.String,  # vllm_log | vllm_metrics | csv | parquet
    "observed_at": UTC_US,
    "observed_at_source": pl.String,  # sample | comment | sidecar | column | mtime
    "model_id": pl.String,
    "model_name_raw": pl.String,
    "served_model_name": pl.String,
    "gpu_sku": pl.String,
    "gpu_name_raw": pl.String,
    "tp": pl.Int32,
    "pp": pl.Int32,
    # vLLM --data-parallel-size; SGLang --dp-size (attention DP ranks with enable_dp_attention, else whole replicas)
    "dp": pl.Int32,
    "ep": pl.Int32,  # SGLang --ep-size (vLLM's --enable-expert-parallel is the feature `expert_parallel`)
    "engine": pl.String,
    "engine_version": pl.String,
    "engine_generation": pl.String,  # v0 | v1
    "gpu_memory_utilization": pl.Float64,
    "max_model_len": pl.Int64,
    "max_num_seqs": pl.Int64,
    "max_num_batched_tokens": pl.Int64,
    "weight_dtype": pl.String,
    "quantization": pl.String,
    "kv_cache_dtype": pl.String,
    "block_size": pl.Int32,
    "enable_prefix_caching": pl.Boolean,
    "enforce_eager": pl.Boolean,  # no CUDA graphs (--enforce-eager)
    # whether gpt-oss's MXFP4 experts ran the OAI Triton kernels (the log's "Using Triton backend") or Marlin
    # ("Using Marlin backend", Marlin's weight-only FP4 warning, which NVFP4 on pre-Blackwell GPUs prints too)
    "triton_kernels": pl.Boolean,
    "disable_custom_all_reduce": pl.Boolean,  # vLLM --disable-custom-all-reduce (the graphs capture NCCL's)
    "gpu_peer_access": pl.Boolean,  # False where vLLM says the P2P test failed (custom all-reduce off)
    # features the engine ran with that capplan does not size: lora, speculative, cpu_offload, dp_attention
    # (comma-separated; the prediction of such a deployment is flagged not modelled)
    "unmodelled_features": pl.String,
    # speculative decoding as the log states it: a JSON object in the engine's terms (method, model,
    # num_speculative_tokens, eagle_topk, num_draft_tokens), which the prediction sizes (telemetry/speculative_log.py)
    "speculative_config": pl.String,
    "startup_outcome": pl.String,  # started | failed | unknown
    "startup_error": pl.String,
    "total_gpu_memory_bytes": pl.Int64,
    "requested_memory_bytes": pl.Int64,
    # memory in use on the GPU when the engine started, as its log prints it (vLLM's "Free memory on device
    # (F/T GiB) on startup": T - F): other processes', and the engine's own CUDA context
    "other_process_bytes": pl.Int64,
    "weights_bytes": pl.Int64,
    "activation_peak_bytes": pl.Int64,
    "non_torch_bytes": pl.Int64,
    "cuda_graph_bytes": pl.Int64,
    "non_kv_bytes": pl.Int64,
    "kv_cache_memory_bytes": pl.Int64,
    "num_gpu_blocks": pl.Int64,
    "num_cpu_blocks": pl.Int64,
    "kv_cache_tokens": pl.Int64,
    "max_concurrency": pl.Float64,
    "max_concurrency_tokens": pl.Int64,
    "peak_kv_usage": pl.Float64,
    "peak_requests_running": pl.Float64,
    "peak_requests_waiting": pl.Float64,
    "preemptions_total": pl.Float64,
    "fb_used_bytes": pl.Int64,
    "fb_free_bytes": pl.Int64,
    "input_rows": pl.Int32,
    "file": pl.String,
    "line": pl.Int64,
}

# One row per metric sample (time series), canonical units.
SAMPLE_SCHEMA: dict[str, Any] = {
    "deployment_id": pl.String,
    "ts": UTC_US,
    "ts_source": pl.String,  # sample | comment | sidecar | mtime
    "metric": pl.String,  # kv_cache_usage | requests_running | requests_waiting | preemptions_total | fb_used_bytes | fb_free_bytes | generation_tokens_total | prompt_tokens_total | gen_throughput | itl_seconds_{bucket,sum,count} | ttft_seconds_{bucket,sum,count}
    "value": pl.Float64,
    "source_metric": pl.String,
    "model_id": pl.String,
    "model_name_raw": pl.String,
    "engine_index": pl.String,
    "le": pl.Float64,  # a histogram bucket's upper bound (seconds; inf for +Inf), null for other metrics
    "series": pl.String,  # speed metrics: the series' labels besides the deployment and le (k=v,...)
    "gpu_index": pl.Int32,
    "gpu_uuid": pl.String,
    "gpu_sku": pl.String,
    "hostname": pl.String,
    "pod": pl.String,
    "file": pl.String,
    "line": pl.Int64,
}

# One row per rejected input row.
REJECT_SCHEMA: dict[str, Any] = {
    "file": pl.String,
    "line": pl.Int64,
    "source_kind": pl.String,
    "deployment_id": pl.String,
    "reason_code": pl.String,
    "reason": pl.String,
    "raw_excerpt": pl.String,
}

# One row per file found in the drop folder: how its lines were accounted for.
FILE_SCHEMA: dict[str, Any] = {
    "file": pl.String,
    "source_kind": pl.String,  # vllm_metrics | vllm_log | csv | parquet | sidecar | doc | unknown
    "size_bytes": pl.Int64,
    "sha256": pl.String,
    "encoding": pl.String,
    "deployment_id": pl.String,
    "lines_total": pl.Int64,
    "lines_ignored": pl.Int64,
    "rows_in": pl.Int64,
    "accepted": pl.Int64,
    "rejected": pl.Int64,
    "observations": pl.Int64,
    "samples": pl.Int64,
    "notes": pl.String,
}

# Why a row was rejected (reason_code), with what it means.
REASON_CODES: dict[str, str] = {
    "malformed": "the row does not parse (truncated line, bad syntax, wrong number of CSV fields)",
    "bad_value": "a field is not a number, boolean or timestamp where one is expected",
    "negative": "a count, size or fraction is negative",
    "not_finite": "a value is NaN or infinite",
    "wrong_unit": "a value is out of range for its documented unit (a percent where a fraction belongs, bytes where MiB belong)",
    "out_of_range": "a value is impossible for the deployment (per-GPU memory above the GPU's memory, utilization > 1, TP < 1)",
    "unknown_model": "the model name matches no registry id (exactly, case-insensitively, or by basename)",
    "unknown_gpu": "the GPU name matches no catalog SKU or alias",
    "missing_field": "a required field is absent (no model name, no deployment id, no measured value)",
    "bad_timestamp": "the scrape or observation time cannot be read",
    "bad_histogram": "a histogram's buckets at one time are not a histogram (no +Inf bucket, a missing or repeated le, cumulative counts that decrease, _count other than the +Inf bucket): all its lines rejected",
    "duplicate": "the same series and timestamp, or the same observation, was already ingested",
    "encoding": "the line or file is not UTF-8 (or UTF-16 with a BOM) text",
    "empty": "the file holds nothing but whitespace",
    "no_data": "a readable file in which no line is telemetry capplan reads (every line ignored)",
    "unknown_file_type": "the file is neither a Prometheus snapshot, a vLLM log, a CSV/Parquet export nor a sidecar",
    "bad_sidecar": "a sidecar (deployment.yaml / *.meta.yaml) is not a mapping of known keys with valid values, or nests too deep",
    "too_large": "the file is larger than the ingest reads (MAX_FILE_BYTES; sidecars MAX_SIDECAR_BYTES), or a line longer than MAX_LINE_CHARS",
    "not_a_file": "a FIFO, socket, device or link to a directory: not opened",
    "outside_folder": "a symbolic link whose target is outside the drop folder: not followed",
    "unreadable": "the file or folder cannot be opened or read (permissions, broken link)",
    "parse_error": "reading the file failed in a way no other code names; the reason says how (the rest of the run goes on)",
}


_EMPTY: dict[int, pl.DataFrame] = {}


def empty_frame(schema: dict[str, Any]) -> pl.DataFrame:
    """A frame with no rows and exactly `schema` (built once per schema)."""
    key = id(schema)
    if key not in _EMPTY or dict(_EMPTY[key].schema) != schema:
        _EMPTY[key] = pl.DataFrame(schema=schema)
    return _EMPTY[key].clear()


def clean_text(value: object) -> str | None:
    """A value for a String column: secrets redacted, lone surrogates (from file names or JSON
    escapes, which no UTF-8 column can hold) shown as escapes."""
    if value is None:
        return None
    return _clean(value if isinstance(value, str) else str(value))


@lru_cache(maxsize=1 << 16)
def _clean(text: str) -> str:
    """Cached: a frame repeats its labels, ids and file names on every row."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return redact(text)


_INT_BOUNDS = {pl.Int32: 1 << 31, pl.Int64: 1 << 63}


def schema_problem(row: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The first value of `row` its column cannot hold (an integer beyond Int32/Int64), or None."""
    for name, dtype in schema.items():
        value = row.get(name)
        bound = _INT_BOUNDS.get(dtype)
        if bound is not None and isinstance(value, int) and not -bound <= value < bound:
            return f"{name} = {value:.3e} does not fit {dtype}"
    return None


def frame(rows: list[dict[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
    """Rows (dicts, missing keys = null) -> a frame with exactly `schema`; every string cleaned
    (`clean_text`). Raises when a value does not fit its column: callers range-check first."""
    if not rows:
        return empty_frame(schema).clear()  # a zero-row frame costs nothing to copy
    columns = {
        name: [clean_text(row.get(name)) for row in rows] if dtype == pl.String else [row.get(name) for row in rows]
        for name, dtype in schema.items()
    }
    return pl.DataFrame(columns, schema=schema)
