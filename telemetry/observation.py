"""Checks every source applies to a deployment observation's values, whatever the source.

`field_problems` returns one (field, RowError) per impossible value, so a log parser can reject
the line that carried it and a CSV parser the row.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from capacity.columns import OBSERVED_MEMORY_TERMS
from telemetry.normalize import FLOAT_LIMIT, RowError

# Per-GPU memory values: never negative, never above the GPU's memory.
PER_GPU_BYTES = (
    *OBSERVED_MEMORY_TERMS,
    "non_kv_bytes",
    "kv_cache_memory_bytes",
    "fb_used_bytes",
    "fb_free_bytes",
)
COUNTS = (
    "num_gpu_blocks",
    "num_cpu_blocks",
    "kv_cache_tokens",
    "max_concurrency",
    "max_concurrency_tokens",
    "peak_requests_running",
    "peak_requests_waiting",
    "preemptions_total",
    "max_num_seqs",
    "max_num_batched_tokens",
)
POSITIVE_INTS = ("tp", "pp", "max_model_len", "block_size")
MEASURED = (
    "total_gpu_memory_bytes",
    *PER_GPU_BYTES,
    "num_gpu_blocks",
    "kv_cache_tokens",
    "max_concurrency",
    "peak_kv_usage",
    "peak_requests_running",
    "peak_requests_waiting",
    "preemptions_total",
)
# The largest value each kind of field may hold: parallel sizes a real deployment could have, and
# for every other integer 2**50 (a PiB in bytes, 10^15 blocks or tokens): far beyond any GPU, yet
# small enough that the products the marts compute (blocks x block bytes) stay within int64.
PLAUSIBLE_MAX: dict[str, int] = {"tp": 1024, "pp": 1024, "block_size": 1 << 20, "input_rows": (1 << 31) - 1}
INT_MAX = 1 << 50
_GIB = 1 << 30
_SLACK = 1.02  # rounding in logs (2 decimals of GiB) and driver-reported totals


def field_problems(values: dict[str, Any], gpu_memory_bytes: int | None) -> list[tuple[str, RowError]]:
    """Every value that cannot be right, with why (sizes and ranges first: a value a typed
    column cannot hold never reaches one)."""
    problems = _range_problems(values)
    if problems:
        return problems
    total = values.get("total_gpu_memory_bytes")
    if isinstance(total, int) and total <= 0:
        problems.append(("total_gpu_memory_bytes", RowError("negative", f"total GPU memory is {total:,} B")))
        total = None
    limit = gpu_memory_bytes or total
    for name in PER_GPU_BYTES:
        value = values.get(name)
        if value is None:
            continue
        if value < 0:
            problems.append((name, RowError("negative", f"{_label(name)} is negative ({value / _GIB:.2f} GiB)")))
        elif limit and value > limit * _SLACK:
            problems.append(
                (
                    name,
                    RowError(
                        "out_of_range",
                        f"{_label(name)} {value / _GIB:.2f} GiB exceeds the GPU's {limit / _GIB:.2f} GiB "
                        "(a whole-model figure, or the wrong unit?)",
                    ),
                )
            )
    for name in COUNTS:
        value = values.get(name)
        if value is not None and value < 0:
            problems.append((name, RowError("negative", f"{_label(name)} is negative ({value:g})")))
    for name in POSITIVE_INTS:
        value = values.get(name)
        if value is not None and value < 1:
            problems.append((name, RowError("out_of_range", f"{_label(name)} must be >= 1, got {value}")))
    util = values.get("gpu_memory_utilization")
    if util is not None:
        if 1 < util <= 100:
            problems.append(
                (
                    "gpu_memory_utilization",
                    RowError("wrong_unit", f"gpu_memory_utilization {util:g} > 1: a fraction in (0, 1] (a percent?)"),
                )
            )
        elif not 0 < util <= 1:
            problems.append(
                ("gpu_memory_utilization", RowError("out_of_range", f"gpu_memory_utilization {util:g} not in (0, 1]"))
            )
    usage = values.get("peak_kv_usage")
    if usage is not None:
        if usage < 0:
            problems.append(("peak_kv_usage", RowError("negative", f"KV cache usage is negative ({usage:g})")))
        elif usage > 1:
            problems.append(
                (
                    "peak_kv_usage",
                    RowError("wrong_unit", f"KV cache usage {usage:g} > 1: a fraction in [0, 1] (a percent?)"),
                )
            )
    return problems


def _range_problems(values: dict[str, Any]) -> list[tuple[str, RowError]]:
    problems: list[tuple[str, RowError]] = []
    for name, value in values.items():
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            limit = PLAUSIBLE_MAX.get(name, INT_MAX)
            if abs(value) > limit:
                shown = f"{value:.3e}" if abs(value) < 10**300 else "a number of more than 300 digits"
                problems.append((name, RowError("out_of_range", f"{_label(name)} {shown} is above {limit:,}")))
        elif isinstance(value, float) and (value != value or abs(value) > FLOAT_LIMIT):
            code = "not_finite" if value != value or abs(value) == float("inf") else "out_of_range"
            problems.append((name, RowError(code, f"{_label(name)} is {value:g}")))
    return problems


def _label(name: str) -> str:
    return name.removesuffix("_bytes").replace("_", " ")


def has_measurement(values: dict[str, Any]) -> bool:
    return any(values.get(name) is not None for name in MEASURED)


def fingerprint(values: dict[str, Any]) -> str:
    """Content of an observation without where it came from: equal content, equal fingerprint."""
    skip = {"observation_id", "file", "line", "input_rows", "observed_at_source"}
    payload = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in values.items() if k not in skip}
    return hashlib.sha1(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
