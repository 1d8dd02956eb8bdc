"""Prometheus text-format snapshots: vLLM's /metrics and the DCGM exporter's.

Each non-comment line is parsed on its own with prometheus_client's text parser, so one bad line
is one reject (with its line number) and never hides the rest of the scrape. Lines of metric
families capplan does not read are counted as ignored. A snapshot may hold one scrape or many
concatenated, each introduced by a `# scraped_at: <ISO 8601>` comment (that time applies to the
lines after it); a sample's own timestamp (milliseconds after the value) wins over the comment.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from telemetry.common import FileContext, FileReport, deployment_problem, observation_id
from telemetry.normalize import (
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
from telemetry.observation import field_problems

# source metric -> (canonical metric, kind)
VLLM_METRICS: dict[str, tuple[str, str]] = {
    "vllm:kv_cache_usage_perc": ("kv_cache_usage", "fraction"),
    "vllm:gpu_cache_usage_perc": ("kv_cache_usage", "fraction"),  # renamed in vLLM 0.10/0.11
    "vllm:num_requests_running": ("requests_running", "count"),
    "vllm:num_requests_waiting": ("requests_waiting", "count"),
    "vllm:num_preemptions_total": ("preemptions_total", "count"),
}
DCGM_METRICS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_FB_USED": ("fb_used_bytes", "mib"),
    "DCGM_FI_DEV_FB_FREE": ("fb_free_bytes", "mib"),
}
# How fast: token counters and SGLang's gauges (vLLM 0.33 `vllm:generation_tokens` is exposed as
# `vllm:generation_tokens_total`; SGLang 0.5 splits its counters by an `is_streaming` label).
SPEED_METRICS: dict[str, tuple[str, str]] = {
    **{
        f"{engine}:{counter}": (counter, "count")
        for engine in ("vllm", "sglang")
        for counter in ("generation_tokens_total", "prompt_tokens_total")
    },
    "sglang:num_running_reqs": ("requests_running", "count"),
    "sglang:num_queue_reqs": ("requests_waiting", "count"),
    "sglang:gen_throughput": ("gen_throughput", "tokens_per_second"),
}
# The prefix cache: vLLM 0.33's counters of prompt tokens looked up and found (v1/metrics/loggers.py
# `vllm:prefix_cache_queries` / `vllm:prefix_cache_hits`, exposed with `_total`; the connector's own are
# `vllm:external_prefix_cache_*`), SGLang 0.5.23's gauge of the recent hit rate (observability/metrics_collector.py
# `sglang:cache_hit_rate`). `warehouse/marts/prefix_cache_hit_rates.sql` turns them into a hit rate per deployment.
PREFIX_CACHE_METRICS: dict[str, tuple[str, str]] = {
    **{
        f"vllm:{counter}": (counter, "count")
        for counter in (
            "prefix_cache_queries_total",
            "prefix_cache_hits_total",
            "external_prefix_cache_queries_total",
            "external_prefix_cache_hits_total",
        )
    },
    "sglang:cache_hit_rate": ("prefix_cache_hit_rate", "fraction"),
}
# counters and gauges read per series (their labels beyond the deployment's kept in `series`)
SERIES_METRICS = frozenset({*SPEED_METRICS, *PREFIX_CACHE_METRICS})
ENGINE_METRICS: dict[str, tuple[str, str]] = {**VLLM_METRICS, **SPEED_METRICS, **PREFIX_CACHE_METRICS}
# Latency histograms: Prometheus base name -> canonical base. Each is read as its `_bucket` (with
# `le`), `_sum` and `_count` series. The inter-token latency (= TPOT at steady state) was
# `vllm:time_per_output_token_seconds` before vLLM 0.11 and is `vllm:inter_token_latency_seconds`
# since (0.33 has only the new name; `request_time_per_output_token_seconds` is a per-request mean,
# not read).
HISTOGRAMS: dict[str, str] = {
    "vllm:inter_token_latency_seconds": "itl_seconds",
    "vllm:time_per_output_token_seconds": "itl_seconds",
    "sglang:inter_token_latency_seconds": "itl_seconds",
    "sglang:time_per_output_token_seconds": "itl_seconds",
    "vllm:time_to_first_token_seconds": "ttft_seconds",
    "sglang:time_to_first_token_seconds": "ttft_seconds",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# full series name -> (histogram base name, canonical metric of the sample)
HISTOGRAM_PARTS: dict[str, tuple[str, str]] = {
    base + suffix: (base, canonical + suffix) for base, canonical in HISTOGRAMS.items() for suffix in HISTOGRAM_SUFFIXES
}
CACHE_CONFIG_INFO = "vllm:cache_config_info"
READ_METRICS = frozenset({*ENGINE_METRICS, *HISTOGRAM_PARTS, *DCGM_METRICS, CACHE_CONFIG_INFO})

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?[ \t]+(\S+)(?:[ \t]+(-?\d{1,16}))?[ \t]*$", re.ASCII)
_GPU_INDEX = re.compile(r"\d{1,6}", re.ASCII)
_DIRECTIVE = re.compile(r"^#\s*(scraped_at|deployment_id)\s*:\s*(.*?)\s*$", re.IGNORECASE)
DEPLOYMENT_LABELS = ("deployment_id", "deployment")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)
_MAX_MIB_UNKNOWN_GPU = 1 << 20  # 1 TiB in MiB: more than any GPU holds
_FB_SLACK = 1.1  # DCGM's framebuffer total is a little above the driver-visible memory


@dataclass(frozen=True, slots=True)
class _Line:
    number: int
    raw: str
    name: str
    labels: dict[str, str]
    value: float
    ts: dt.datetime | None
    ts_source: str
    ts_error: RowError | None
    deployment_id: str


class Dedupe:
    """Series + timestamp keys and observation fingerprints seen so far in one ingest.

    A sample's key costs one int to int entry (about 100 bytes, not the 300 of a tuple holding a
    datetime and a where-tuple): its series (deployment, metric, labels) numbered once, its time
    in microseconds, the file numbered once and the line, packed exactly (no hashing, no collision).
    """

    def __init__(self) -> None:
        self.series: dict[int, int] = {}
        self.series_ids: dict[tuple[Any, ...], int] = {}
        self.files: dict[str, int] = {}
        self.file_names: list[str] = []
        self.observations: dict[str, tuple[str, int | None]] = {}

    def series_seen(self, key: tuple[Any, ...], where: tuple[str, int]) -> tuple[str, int] | None:
        """`key`: (deployment, metric, labels, ts as an aware datetime); where it was first seen."""
        *series, ts = key
        number = self.series_ids.setdefault(tuple(series), len(self.series_ids))
        packed = number << 64 | (ts - _EPOCH) // _MICROSECOND
        first = self.series.get(packed)
        if first is None:
            file = self.files.get(where[0])
            if file is None:
                file = self.files[where[0]] = len(self.file_names)
                self.file_names.append(where[0])
            self.series[packed] = file << 40 | where[1]
            return None
        return self.file_names[first >> 40], first & ((1 << 40) - 1)

    def observation_seen(self, fp: str, where: tuple[str, int | None]) -> tuple[str, int | None] | None:
        first = self.observations.get(fp)
        if first is None:
            self.observations[fp] = where
        return first


def looks_like_prometheus(lines: list[str]) -> bool:
    """Sniff: `# TYPE`/`# HELP`/`# scraped_at` comments, or a sample line of a metric capplan reads."""
    for line in lines[:200]:
        text = line.strip()
        if text.startswith(("# TYPE ", "# HELP ")) or _DIRECTIVE.match(text):
            return True
        if re.match(r"^(vllm:[a-z_]+|sglang:[a-z_]+|DCGM_FI_[A-Z_]+)(\{|\s)", text):
            return True
    return False


def parse_prometheus(
    ctx: FileContext,
    text: DecodedText,
    report: FileReport,
    dedupe: Dedupe,
    served_models: dict[tuple[str, str], set[str]] | None = None,
    first_line: int = 1,
    known_series: KnownSeries | None = None,
) -> None:
    """Every line of one snapshot into `report`. `served_models`: {(deployment, engine): model
    names} seen outside this text (the other queries of a Prometheus API ingest), added to the
    ones this text names, for `cache_config_info`, which has no `model_name` label. `first_line`:
    the number of the text's first line (a Prometheus answer is read a batch of series at a time);
    `known_series`: {(name, '{labels}' as written): (name, labels)} for lines whose writer already
    holds the labels (the API's), so that 500,000 distinct series are not each parsed again."""
    report.lines_total = len(text.lines)
    try:
        default_ts, default_source = ctx.default_time()
        default_error: RowError | None = None
    except RowError as exc:  # only the samples that need the file's time are rejected
        default_ts, default_source, default_error = None, "mtime", exc
    current_ts: dt.datetime | None = None
    ts_error: RowError | None = None
    deployment = ctx.deployment_id
    parsed: list[_Line] = []
    for number, raw in enumerate(text.lines, start=first_line):
        stripped = raw.strip()
        if not stripped:
            report.lines_ignored += 1
            continue
        if report.rejects_unreadable(text, number, raw, len(stripped), deployment):
            continue
        if stripped.startswith("#"):
            report.lines_ignored += 1
            directive = _DIRECTIVE.match(stripped)
            if directive and directive.group(1).lower() == "scraped_at":
                try:
                    current_ts, ts_error = parse_timestamp(directive.group(2), "# scraped_at"), None
                except RowError as exc:
                    current_ts = None
                    ts_error = RowError("bad_timestamp", f"{exc.reason} (line {number}); samples until the next one")
            elif directive:
                deployment = directive.group(2) or ctx.deployment_id
            continue
        try:
            name, labels, value, stamp = parse_sample_line(stripped, known_series)
        except ValueError as exc:
            report.reject(number, RowError("malformed", f"not a Prometheus sample line ({exc})"), raw, deployment)
            continue
        if name not in READ_METRICS:
            report.lines_ignored += 1
            continue
        if stamp is not None:
            try:
                ts, source, error = parse_timestamp(stamp, "sample timestamp"), "sample", None
            except RowError as exc:
                ts, source, error = None, "sample", exc
        elif current_ts is not None or ts_error is not None:
            ts, source, error = current_ts, "comment", ts_error
        else:
            ts, source, error = default_ts, default_source, default_error
        dep = next((labels[k] for k in DEPLOYMENT_LABELS if labels.get(k)), deployment)
        problem = deployment_problem(dep)
        if problem is not None:
            report.reject(number, RowError("bad_value", problem), raw, None)
            continue
        parsed.append(_Line(number, raw, name, labels, value, ts, source, error, dep))

    models_by_engine: dict[tuple[str, str], set[str]] = {k: set(v) for k, v in (served_models or {}).items()}
    for entry in parsed:
        served = entry.labels.get("model_name")
        if served and (entry.name in ENGINE_METRICS or entry.name in HISTOGRAM_PARTS):
            models_by_engine.setdefault((entry.deployment_id, entry.labels.get("engine", "")), set()).add(served)

    histograms: dict[tuple[Any, ...], list[_Line]] = {}
    for entry in parsed:
        if entry.name in HISTOGRAM_PARTS and entry.ts_error is None:
            histograms.setdefault(_histogram_key(entry), []).append(entry)
            continue
        try:
            if entry.ts_error is not None:
                raise entry.ts_error
            if entry.name == CACHE_CONFIG_INFO:
                _cache_config(ctx, report, dedupe, entry, models_by_engine)
            elif entry.name in ENGINE_METRICS:
                _vllm_sample(ctx, report, dedupe, entry)
            else:
                _dcgm_sample(ctx, report, dedupe, entry)
        except RowError as exc:
            report.reject(entry.number, exc, entry.raw, entry.deployment_id)
    for key, entries in histograms.items():
        _histogram(ctx, report, dedupe, key, entries)


def _parse_with_client(line: str) -> tuple[str, dict[str, str], float, float | None]:
    """One line through prometheus_client's parser: exactly one sample, or ValueError."""
    try:
        samples = [s for family in text_string_to_metric_families(line + "\n") for s in family.samples]
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on a bad line
        raise ValueError(str(exc) or type(exc).__name__) from None
    if len(samples) != 1:
        raise ValueError(f"{len(samples)} samples in one line")
    sample = samples[0]
    try:
        stamp = float(sample.timestamp) if sample.timestamp is not None else None
    except (OverflowError, ValueError, TypeError):
        raise ValueError("timestamp is not a number capplan can hold") from None
    return sample.name, dict(sample.labels), float(sample.value), stamp


@lru_cache(maxsize=4096)
def _series(name: str, labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    parsed, parsed_labels, _, _ = _parse_with_client(f"{name}{labels} 0")
    return parsed, tuple(parsed_labels.items())


KnownSeries = dict[tuple[str, str], tuple[str, tuple[tuple[str, str], ...]]]


def parse_sample_line(line: str, known: KnownSeries | None = None) -> tuple[str, dict[str, str], float, float | None]:
    """(name, labels, value, timestamp seconds or None); ValueError for a line that is not a sample.

    prometheus_client parses the name and labels (cached per distinct series, so a day of scrapes
    costs one parse per series); the value and the millisecond timestamp are plain numbers.
    """
    tail = line[line.rfind("}") + 1 :]
    if not tail.isascii():  # float() reads '١٢' and '３', Prometheus does not
        raise ValueError("the value or timestamp is not written in ASCII digits")
    m = _SAMPLE.match(line)
    if m is None:
        return _parse_with_client(line)
    if "_" in m.group(3):  # Python's float() reads 1_000, Prometheus does not
        return _parse_with_client(line)
    series = known.get((m.group(1), m.group(2) or "")) if known else None
    name, labels = series if series is not None else _series(m.group(1), m.group(2) or "")
    try:
        value = float(m.group(3))
    except ValueError:
        return _parse_with_client(line)
    stamp = int(m.group(4)) / 1000 if m.group(4) else None
    return name, dict(labels), value, stamp


def _check_value(entry: _Line, what: str) -> None:
    if not math.isfinite(entry.value):
        raise RowError("not_finite", f"{what} is {entry.value}")
    if entry.value < 0:
        raise RowError("negative", f"{what} is negative ({entry.value:g})")
    check_float(entry.value, what)


def _model(ctx: FileContext, name: str | None) -> tuple[str, str | None]:
    if ctx.sidecar.model_id:
        return ctx.sidecar.model_id, name or ctx.sidecar.model_raw
    if not name:
        raise RowError("missing_field", "no model_name label and no model in a sidecar")
    return ctx.models.resolve(name), name


def _series_key(entry: _Line, metric: str) -> tuple[Any, ...]:
    labels = tuple(sorted((k, v) for k, v in entry.labels.items() if k not in DEPLOYMENT_LABELS))
    assert entry.ts is not None
    return (entry.deployment_id, metric, labels, entry.ts)


def _not_duplicate(ctx: FileContext, dedupe: Dedupe, entry: _Line, metric: str) -> None:
    first = dedupe.series_seen(_series_key(entry, metric), (ctx.rel, entry.number))
    if first is not None:
        assert entry.ts is not None
        raise RowError(
            "duplicate",
            f"duplicate sample: {metric} at {entry.ts.isoformat()} already read from {first[0]} line {first[1]}",
        )


def _series_labels(labels: dict[str, str]) -> str:
    """The labels that tell one series of a metric from another within a deployment (not the
    deployment labels, not `le`), as `k=v,...`: SGLang's `is_streaming` halves, vLLM's engines."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in DEPLOYMENT_LABELS and k != "le")


def _vllm_sample(ctx: FileContext, report: FileReport, dedupe: Dedupe, entry: _Line) -> None:
    metric, kind = ENGINE_METRICS[entry.name]
    _check_value(entry, entry.name)
    if kind == "fraction" and entry.value > 1:
        raise RowError(
            "wrong_unit", f"{entry.name} = {entry.value:g} > 1: vLLM reports a fraction in [0, 1] (a percent?)"
        )
    model = _model(ctx, entry.labels.get("model_name"))
    _not_duplicate(ctx, dedupe, entry, metric)
    series = _series_labels(entry.labels) if entry.name in SERIES_METRICS else None
    report.samples.append(_engine_row(ctx, entry, metric, model, series=series))
    report.accepted += 1


def _engine_row(
    ctx: FileContext, entry: _Line, metric: str, model: tuple[str, str | None], **extra: object
) -> dict[str, Any]:
    """One vLLM / SGLang sample row (`extra`: le, series)."""
    return {
        "deployment_id": entry.deployment_id,
        "ts": entry.ts,
        "ts_source": entry.ts_source,
        "metric": metric,
        "value": entry.value,
        "source_metric": entry.name,
        "model_id": model[0],
        "model_name_raw": model[1],
        "engine_index": entry.labels.get("engine"),
        **extra,
        "file": ctx.rel,
        "line": entry.number,
    }


def _histogram_key(entry: _Line) -> tuple[Any, ...]:
    """One histogram = one base name, one label set without `le`, one time, in one deployment."""
    base, _ = HISTOGRAM_PARTS[entry.name]
    return (entry.deployment_id, base, _series_labels(entry.labels), entry.ts)


def _bucket_bound(entry: _Line) -> float:
    text = entry.labels.get("le")
    if text is None:
        raise RowError("bad_histogram", f"line {entry.number}: a _bucket sample without an le label")
    try:
        if "_" in text:
            raise ValueError(text)
        bound = float(text)
    except ValueError:
        raise RowError("bad_histogram", f"line {entry.number}: le={text!r} is not a number") from None
    if math.isnan(bound):
        raise RowError("bad_histogram", f"line {entry.number}: le is NaN")
    return bound


def check_histogram(entries: list[_Line]) -> dict[int, float]:
    """The bucket bounds of one histogram's lines ({line number: le}), or RowError saying why the
    lines are not one histogram: a NaN / infinite / negative count, a missing or repeated `le`, no
    `+Inf` bucket, cumulative counts that decrease as `le` grows, a `_count` other than the `+Inf`
    bucket. A group of only `_sum` / `_count` lines (a Prometheus API query per series name) is
    checked as counters."""
    for entry in entries:
        try:
            _check_value(entry, entry.name)
        except RowError as exc:
            raise RowError(exc.code, f"line {entry.number}: {exc.reason}") from None
    bounds: dict[int, float] = {}
    seen: dict[float, int] = {}
    buckets = [e for e in entries if e.name.endswith("_bucket")]
    for entry in buckets:
        bound = _bucket_bound(entry)
        if bound in seen:
            raise RowError("bad_histogram", f"le={entry.labels['le']} twice (lines {seen[bound]} and {entry.number})")
        seen[bound] = entry.number
        bounds[entry.number] = bound
    if not buckets:
        return bounds
    if math.inf not in seen:
        raise RowError("bad_histogram", 'no le="+Inf" bucket: the total count is unknown')
    ordered = sorted(buckets, key=lambda e: bounds[e.number])
    for lower, upper in itertools.pairwise(ordered):
        if upper.value < lower.value:
            raise RowError(
                "bad_histogram",
                f"cumulative counts decrease: le={upper.labels['le']} has {upper.value:g} < "
                f"{lower.value:g} at le={lower.labels['le']}",
            )
    total = ordered[-1].value
    for entry in entries:
        if entry.name.endswith("_count") and not math.isclose(entry.value, total, rel_tol=1e-9, abs_tol=1e-9):
            raise RowError("bad_histogram", f"_count is {entry.value:g} but the +Inf bucket holds {total:g}")
    return bounds


def _histogram(
    ctx: FileContext, report: FileReport, dedupe: Dedupe, key: tuple[Any, ...], entries: list[_Line]
) -> None:
    """The lines of one histogram, all accepted or all rejected with one reason (a quantile from a
    histogram with a bad bucket would be wrong without saying so)."""
    base = key[1]
    where = f"histogram {base}{{{key[2]}}} at {key[3].isoformat() if key[3] else '?'}"
    try:
        bounds = check_histogram(entries)
        model = _model(ctx, entries[0].labels.get("model_name"))  # one label set (le aside): one model
        rows = []
        for entry in entries:
            _, metric = HISTOGRAM_PARTS[entry.name]
            _not_duplicate(ctx, dedupe, entry, metric)
            rows.append(_engine_row(ctx, entry, metric, model, le=bounds.get(entry.number), series=key[2]))
    except RowError as exc:
        error = RowError(exc.code, f"{where}: {exc.reason}; its {len(entries)} line(s) rejected")
        for entry in entries:
            report.reject(entry.number, error, entry.raw, entry.deployment_id)
        return
    report.samples.extend(rows)
    report.accepted += len(rows)


def _dcgm_sample(ctx: FileContext, report: FileReport, dedupe: Dedupe, entry: _Line) -> None:
    metric, _ = DCGM_METRICS[entry.name]
    _check_value(entry, entry.name)
    gpu_name = entry.labels.get("modelName")
    sku = ctx.gpus.resolve(gpu_name) if gpu_name else None
    sku_id = sku.id if sku else ctx.sidecar.gpu_sku
    memory = sku.memory_total_bytes if sku else None
    if memory is None and ctx.sidecar.gpu_sku:
        memory = ctx.gpus.resolve(ctx.sidecar.gpu_sku).memory_total_bytes
    limit_mib = memory / MIB * _FB_SLACK if memory else _MAX_MIB_UNKNOWN_GPU
    if entry.value > limit_mib:
        if entry.value / MIB <= limit_mib:
            raise RowError(
                "wrong_unit",
                f"{entry.name} = {entry.value:,.0f} is more than the GPU's {limit_mib:,.0f} MiB; "
                f"DCGM reports MiB and this looks like bytes ({entry.value / MIB:,.0f} MiB)",
            )
        raise RowError("out_of_range", f"{entry.name} = {entry.value:,.0f} MiB exceeds the GPU's {limit_mib:,.0f} MiB")
    gpu_index = entry.labels.get("gpu")
    _not_duplicate(ctx, dedupe, entry, metric)
    report.samples.append(
        {
            "deployment_id": entry.deployment_id,
            "ts": entry.ts,
            "ts_source": entry.ts_source,
            "metric": metric,
            "value": float(round(entry.value * MIB)),
            "source_metric": entry.name,
            "model_id": ctx.sidecar.model_id,
            "model_name_raw": ctx.sidecar.model_raw,
            "gpu_index": int(gpu_index) if gpu_index and _GPU_INDEX.fullmatch(gpu_index) else None,
            "gpu_uuid": entry.labels.get("UUID"),
            "gpu_sku": sku_id,
            "hostname": entry.labels.get("Hostname"),
            "pod": entry.labels.get("pod"),
            "file": ctx.rel,
            "line": entry.number,
        }
    )
    report.accepted += 1


def _label_number(labels: dict[str, str], key: str, *, integer: bool) -> Any:
    text = null_text(labels.get(key))
    if text is None:
        return None
    return parse_int(text, key) if integer else parse_number(text, key)


def _cache_config(
    ctx: FileContext,
    report: FileReport,
    dedupe: Dedupe,
    entry: _Line,
    models_by_engine: dict[tuple[str, str], set[str]],
) -> None:
    labels = entry.labels
    prefix = null_text(labels.get("enable_prefix_caching"))
    values: dict[str, Any] = {
        "block_size": _label_number(labels, "block_size", integer=True),
        "num_gpu_blocks": _label_number(labels, "num_gpu_blocks", integer=True),
        "num_cpu_blocks": _label_number(labels, "num_cpu_blocks", integer=True),
        "gpu_memory_utilization": _label_number(labels, "gpu_memory_utilization", integer=False),
    }
    problems = field_problems(values, None)
    if problems:
        raise RowError(problems[0][1].code, "; ".join(p.reason for _, p in problems))
    if values["num_gpu_blocks"] is None:
        raise RowError("missing_field", "cache_config_info without num_gpu_blocks")
    names = labels.get("model_name")
    if not names and not ctx.sidecar.model_id:
        candidates = models_by_engine.get((entry.deployment_id, labels.get("engine", "")), set())
        if len(candidates) > 1:
            raise RowError(
                "missing_field", f"cache_config_info has no model_name and the snapshot serves {len(candidates)} models"
            )
        names = next(iter(candidates), None)
    model_id, model_raw = _model(ctx, names)
    _not_duplicate(ctx, dedupe, entry, "cache_config_info")
    assert entry.ts is not None
    sidecar = ctx.sidecar
    report.observations.append(
        {
            "observation_id": observation_id(ctx.rel, entry.number),
            "deployment_id": entry.deployment_id,
            "source_kind": ctx.kind,
            "observed_at": entry.ts,
            "observed_at_source": entry.ts_source,
            "model_id": model_id,
            "model_name_raw": model_raw,
            "served_model_name": names,
            "gpu_sku": sidecar.gpu_sku,
            "gpu_name_raw": sidecar.gpu_raw,
            "tp": sidecar.tp,
            "pp": sidecar.pp,
            "engine": sidecar.engine or "vllm",
            "engine_version": sidecar.engine_version,
            "kv_cache_dtype": canonical_dtype(labels.get("cache_dtype")),
            "enable_prefix_caching": parse_bool(prefix, "enable_prefix_caching") if prefix else None,
            **values,
            "input_rows": 1,
            "file": ctx.rel,
            "line": entry.number,
        }
    )
    report.accepted += 1
