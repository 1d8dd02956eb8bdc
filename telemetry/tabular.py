"""CSV and Parquet exports: one deployment observation per row, columns documented in README.md.

Column names are matched case-insensitively with spaces and dashes read as underscores; a few
aliases are accepted (`model_name`, `gpu_type`, `tensor_parallel_size`, ...). Units are in the
column names: `*_gib` and `*_mib` columns are converted to bytes, `*_bytes` taken as they are.
Unknown columns are listed in the file's notes and otherwise ignored.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from telemetry.common import FileContext, FileReport, checked_deployment_id, observation_id
from telemetry.normalize import (
    GIB,
    MIB,
    DecodedText,
    RowError,
    canonical_dtype,
    check_float,
    null_text,
    parse_bool,
    parse_int,
    parse_number,
    parse_timestamp,
)
from telemetry.observation import field_problems, fingerprint
from telemetry.prometheus import Dedupe


def _text(value: Any) -> str:
    return str(value)


def _int(value: Any) -> int:
    """An integer cell: Parquet ints (UInt64 included) and floats range-checked, text parsed."""
    return parse_int(value if isinstance(value, int | float) and not isinstance(value, bool) else str(value), "value")


def _float(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return check_float(float(value), "value")
    return parse_number(str(value), "value")


def _scaled(scale: int) -> Callable[[Any], int]:
    return lambda value: round(_float(value) * scale)


def _lower(value: Any) -> str:
    return str(value).strip().lower()


# column -> (observation field, converter): the columns read with a rule of their own or into another field
COLUMNS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "observed_at": ("observed_at", lambda v: parse_timestamp(v, "observed_at")),
    "model": ("model_name_raw", _text),
    "gpu": ("gpu_name_raw", _text),
    "engine_version": ("engine_version", lambda v: str(v).strip().lstrip("vV")),
    "dtype": ("weight_dtype", canonical_dtype),
    "kv_cache_dtype": ("kv_cache_dtype", canonical_dtype),
    "enable_prefix_caching": ("enable_prefix_caching", lambda v: parse_bool(v, "enable_prefix_caching")),
}
# the columns read into the field of their own name, by converter
_SAME_NAMED: tuple[tuple[Callable[[Any], Any], tuple[str, ...]], ...] = (
    (_text, ("deployment_id", "served_model_name")),
    (_lower, ("engine", "quantization", "startup_outcome")),
    (_int, ("tp", "pp", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size")),  # settings
    (_float, ("gpu_memory_utilization",)),
    (_int, ("num_gpu_blocks", "num_cpu_blocks", "kv_cache_tokens", "max_concurrency_tokens")),  # the KV pool
    (_float, ("max_concurrency",)),
    (_float, ("peak_kv_usage", "peak_requests_running", "peak_requests_waiting", "preemptions_total")),  # its use
)
for _convert_cell, _names in _SAME_NAMED:
    COLUMNS.update({name: (name, _convert_cell) for name in _names})
for _name in (
    "total_gpu_memory",
    "requested_memory",
    "weights",
    "activation_peak",
    "non_torch",
    "cuda_graph",
    "non_kv",
    "kv_cache_memory",
    "fb_used",
    "fb_free",
):
    COLUMNS[f"{_name}_bytes"] = (f"{_name}_bytes", _int)
    COLUMNS[f"{_name}_gib"] = (f"{_name}_bytes", _scaled(GIB))
    COLUMNS[f"{_name}_mib"] = (f"{_name}_bytes", _scaled(MIB))

ALIASES = {
    "deployment": "deployment_id",
    "model_id": "model",
    "model_name": "model",
    "gpu_type": "gpu",
    "gpu_name": "gpu",
    "gpu_sku": "gpu",
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "vllm_version": "engine_version",
    "weight_dtype": "dtype",
    "kv_dtype": "kv_cache_dtype",
    "timestamp": "observed_at",
    "ts": "observed_at",
    "max_kv_usage": "peak_kv_usage",
}
REQUIRED = ("deployment_id", "model")
MAX_PARQUET_ROWS = 1_000_000  # one row per deployment observation: a million is already a mistake
MAX_PARQUET_UNPACKED_BYTES = 1 << 30  # a small file that decompresses to more is a bomb, not an export
_STARTUP_OUTCOMES = ("started", "failed", "unknown")


def _column_key(name: str) -> str:
    key = name.strip().lower().replace(" ", "_").replace("-", "_")
    return ALIASES.get(key, key)


def _header(names: list[str], report: FileReport) -> list[str | None]:
    keys: list[str | None] = []
    unknown: list[str] = []
    seen: set[str] = set()
    for name in names:
        key = _column_key(name)
        if key not in COLUMNS or COLUMNS[key][0] in seen:
            unknown.append(name)
            keys.append(None)
            continue
        seen.add(COLUMNS[key][0])
        keys.append(key)
    if unknown:
        report.notes.append(f"ignored columns: {', '.join(unknown)}")
    return keys


def parse_csv(ctx: FileContext, text: DecodedText, report: FileReport, dedupe: Dedupe) -> None:
    report.lines_total = len(text.lines)
    header: list[str | None] | None = None
    width = 0
    reader = csv.reader(text.lines)
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # a field above csv.field_size_limit(), a NUL, a stray quote: this row only
            number = reader.line_num
            raw = text.lines[number - 1] if 0 < number <= len(text.lines) else ""
            report.reject(number, RowError("malformed", f"CSV row does not parse: {exc}"), raw, ctx.deployment_id)
            continue
        number = reader.line_num
        raw = text.lines[number - 1] if number - 1 < len(text.lines) else ""
        if not any(c.strip() for c in cells) or (cells and cells[0].lstrip().startswith("#")):
            report.lines_ignored += 1
            continue
        if number in text.bad_lines:
            report.reject(number, RowError("encoding", "line is not UTF-8"), raw, ctx.deployment_id)
            continue
        if header is None:
            header = _header(cells, report)
            width = len(cells)
            report.lines_ignored += 1
            continue
        if len(cells) != width:
            error = RowError("malformed", f"row has {len(cells)} fields, the header has {width} (truncated line?)")
            report.reject(number, error, raw, ctx.deployment_id)
            continue
        row = {key: cell for key, cell in zip(header, cells, strict=True) if key is not None}
        _row(ctx, report, dedupe, number, raw, row)


def parse_parquet(ctx: FileContext, report: FileReport, dedupe: Dedupe) -> None:
    try:
        meta = pq.ParquetFile(io.BytesIO(ctx.raw)).metadata  # the footer only: sizes before anything is decoded
        rows = meta.num_rows
        unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if rows > MAX_PARQUET_ROWS:
            raise RowError("too_large", f"{rows:,} rows, above the {MAX_PARQUET_ROWS:,}-row limit: not read")
        if unpacked > MAX_PARQUET_UNPACKED_BYTES:
            raise RowError(
                "too_large",
                f"{unpacked:,} bytes once decompressed, above the {MAX_PARQUET_UNPACKED_BYTES:,}-byte limit: not read",
            )
        table = pl.read_parquet(io.BytesIO(ctx.raw))
    except RowError as exc:
        report.reject(None, exc, None)
        return
    except Exception as exc:  # polars raises several error types for a bad file
        report.reject(None, RowError("malformed", f"not a readable Parquet file ({type(exc).__name__})"), None)
        return
    header = _header(table.columns, report)
    report.lines_total = table.height
    for number, record in enumerate(table.iter_rows(), start=1):
        row = {key: value for key, value in zip(header, record, strict=True) if key is not None}
        raw = ",".join("" if v is None else str(v) for v in record)
        _row(ctx, report, dedupe, number, raw, row)


def _row(ctx: FileContext, report: FileReport, dedupe: Dedupe, number: int, raw: str, row: dict[str, Any]) -> None:
    deployment = null_text(row.get("deployment_id")) or None
    try:
        checked_deployment_id(deployment)
        values = _convert(row)
        missing = [c for c in REQUIRED if values.get(COLUMNS[c][0]) is None]
        if missing:
            raise RowError("missing_field", f"no {' or '.join(missing)} in this row")
        model_id = ctx.models.resolve(values["model_name_raw"])
        sku = ctx.gpus.resolve(values["gpu_name_raw"]) if values.get("gpu_name_raw") else None
        outcome = values.get("startup_outcome")
        if outcome is not None and outcome not in _STARTUP_OUTCOMES:
            raise RowError("bad_value", f"startup_outcome {outcome!r} is not one of {', '.join(_STARTUP_OUTCOMES)}")
        problems = field_problems(values, sku.memory_total_bytes if sku else None)
        if problems:
            raise RowError(problems[0][1].code, "; ".join(p.reason for _, p in problems))
    except RowError as exc:
        report.reject(number, exc, raw, deployment)
        return
    when = values.get("observed_at")
    observed, source = (when, "column") if when is not None else ctx.default_time()
    observation = {
        **values,
        "observation_id": observation_id(ctx.rel, number),
        "source_kind": ctx.kind,
        "observed_at": observed,
        "observed_at_source": source,
        "model_id": model_id,
        "gpu_sku": sku.id if sku else None,
        "engine": values.get("engine") or "vllm",
        "startup_outcome": outcome or "unknown",
        "input_rows": 1,
        "file": ctx.rel,
        "line": number,
    }
    first = dedupe.observation_seen(fingerprint(observation), (ctx.rel, number))
    if first is not None:
        report.reject(number, RowError("duplicate", f"same row as {first[0]} line {first[1]}"), raw, deployment)
        return
    report.observations.append(observation)
    report.accepted += 1


def _convert(row: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    errors: list[RowError] = []
    for key, cell in row.items():
        if null_text(cell) is None:
            continue
        target, convert = COLUMNS[key]
        try:
            values[target] = convert(cell.strip() if isinstance(cell, str) else cell)
        except RowError as exc:
            errors.append(RowError(exc.code, f"{key}: {exc.reason.removeprefix('value: ')}"))
    if errors:
        raise RowError(errors[0].code, "; ".join(e.reason for e in errors))
    return values


def documented_columns() -> Iterable[str]:
    return COLUMNS.keys()
