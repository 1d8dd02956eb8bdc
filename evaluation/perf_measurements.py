"""Public LLM serving throughput / latency measurements (evaluation/data/perf_measurements.yaml): the
reference set the performance model is fitted on and scored against (leave-one-source_group-out).

`load_perf_measurements()` returns the valid rows as typed `PerfMeasurement`s and, for every bad
row, a `SkippedRow` with a one-line reason: one malformed entry never stops the others from loading.
Numbers in the file are copied from the cited sources; this module only reads and checks them
(the few derived quantities below are computed here, never stored in the file).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

PERF_MEASUREMENTS_PATH = Path(__file__).resolve().parent / "data" / "perf_measurements.yaml"
# The blind holdout (README-perf-holdout.md): same schema, other source families, never fitted on.
PERF_HOLDOUT_PATH = Path(__file__).resolve().parent / "data" / "perf_holdout.yaml"

ENGINES = frozenset({"vllm", "sglang", "trtllm"})
BENCHMARK_KINDS = frozenset(
    {
        "serving",  # online server + load generator (vllm bench serve, sglang.bench_serving)
        "offline_throughput",  # all requests queued at once (benchmark_throughput, trtllm-bench throughput)
        "offline_batch_latency",  # one static batch end to end (vLLM benchmark_latency.py)
        "static_batch",  # static batching, fixed batch size (TRT-LLM gptSessionBenchmark)
        "static_batch_ttft",  # static batch with one output token: time to first token
    }
)

# Plausibility bounds (a row outside them is skipped with a reason, not loaded).
MAX_STEP_MS = 10_000.0  # TPOT / ITL: 10 s per token
MAX_TTFT_MS = 3_600_000.0  # one hour
MAX_TOKENS_PER_S = 5_000_000.0
MAX_LEN = 10_000_000
MAX_GPUS = 1024


class BenchTool(StrEnum):
    """The benchmark client a row names, where its random dataset draws lengths its own way
    (`PerfMeasurement.sglang_random_lengths`, `PerfMeasurement.length_spread`)."""

    SGLANG_BENCH_SERVING = "sglang.bench_serving"
    VLLM_BENCH_SERVE = "vllm bench serve"


_INT_FIELDS = (
    "num_gpus",
    "tp",
    "pp",
    "ep",
    "dp_attention",
    "input_len",
    "output_len",
    "concurrency",
    "batch_size",
    "num_prompts",
    "total_input_tokens",
    "total_output_tokens",
)
_THROUGHPUT_FIELDS = (
    "output_tokens_per_s",
    "output_tokens_per_s_per_gpu",
    "total_tokens_per_s",
    "total_tokens_per_s_per_gpu",
    "request_throughput",
)
_TTFT_FIELDS = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms")
_STEP_FIELDS = ("mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms")
_LATENCY_FIELDS = ("mean_e2e_latency_ms", "median_e2e_latency_ms", "batch_latency_s")
MEASURED_FIELDS = _THROUGHPUT_FIELDS + _TTFT_FIELDS + _STEP_FIELDS + _LATENCY_FIELDS
_STR_FIELDS = (
    "source_family",
    "engine_version",
    "catalog_model",
    "checkpoint",
    "gpu_as_stated",
    "weight_dtype",
    "kv_cache_dtype",
    "dataset",
    "notes",
)


@dataclass(frozen=True, slots=True)
class PerfMeasurement:
    """One measured operating point: deployment, workload and whatever metrics the source states."""

    id: str
    source: str
    source_group: str
    engine: str
    benchmark_kind: str
    model: str
    gpu: str
    tp: int
    pp: int
    num_gpus: int
    model_in_catalog: bool = True
    source_family: str | None = None
    engine_version: str | None = None
    catalog_model: str | None = None
    checkpoint: str | None = None
    gpu_as_stated: str | None = None
    ep: int | None = None
    dp_attention: int | None = None
    weight_dtype: str | None = None
    kv_cache_dtype: str | None = None
    dataset: str | None = None
    # the client that ran it, where its random dataset's lengths follow its own rule
    bench_tool: BenchTool | None = None
    input_len: int | None = None
    output_len: int | None = None
    random_range_ratio: float | None = None
    concurrency: int | None = None
    batch_size: int | None = None
    request_rate: float | None = None  # requests/s; math.inf for "inf" (all at once)
    num_prompts: int | None = None
    mean_concurrency: float | None = None  # requests in flight on average, as the benchmark tool reports it
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    output_tokens_per_s: float | None = None
    output_tokens_per_s_per_gpu: float | None = None
    total_tokens_per_s: float | None = None
    total_tokens_per_s_per_gpu: float | None = None
    request_throughput: float | None = None
    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    mean_itl_ms: float | None = None
    median_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    mean_e2e_latency_ms: float | None = None
    median_e2e_latency_ms: float | None = None
    batch_latency_s: float | None = None
    notes: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def config_model(self) -> str:
        """The catalog entry whose config describes this row's model (the proxy when the checkpoint is not in the catalog)."""
        return self.model if self.model_in_catalog or not self.catalog_model else self.catalog_model

    @property
    def sglang_random_lengths(self) -> bool:
        """A random dataset of `sglang.bench_serving`: each length uniform in [max(1, L x r), L], r its
        `--random-range-ratio` (0 by default: anywhere from 1 to L), where vLLM's client draws around L."""
        return self.bench_tool is BenchTool.SGLANG_BENCH_SERVING and self.dataset == "random"

    @property
    def mean_input_len(self) -> float | None:
        """Mean prompt length: total input tokens over requests where the source states both, else the nominal length
        (the middle of `sglang.bench_serving`'s range for its random dataset)."""
        if self.total_input_tokens is not None and self.num_prompts:
            return self.total_input_tokens / self.num_prompts
        return self._nominal_mean(self.input_len)

    @property
    def mean_output_len(self) -> float | None:
        """Mean generated length, likewise."""
        if self.total_output_tokens is not None and self.num_prompts:
            return self.total_output_tokens / self.num_prompts
        return self._nominal_mean(self.output_len)

    def _nominal_mean(self, length: int | None) -> float | None:
        if length is None:
            return None
        if self.sglang_random_lengths:
            return length * (1 + (self.random_range_ratio or 0.0)) / 2
        return float(length)

    @property
    def length_spread(self) -> float:
        """How far lengths spread around their mean, as vLLM's `--random-range-ratio` says it (uniform in
        [M(1 - s), M(1 + s)]): `sglang.bench_serving`'s [L x r, L] is (1 - r) / (1 + r) around L(1 + r) / 2; vLLM's
        own ratio where the source states no token totals (with totals the mean is known and the lengths are
        simulated at it); 0 otherwise."""
        if self.sglang_random_lengths:
            r = self.random_range_ratio or 0.0
            return (1 - r) / (1 + r)
        if self.random_range_ratio and self.total_input_tokens is None:
            return self.random_range_ratio
        return 0.0

    @property
    def output_throughput(self) -> float | None:
        """Output tokens/s of the whole deployment (per-GPU figures scaled by the GPU count)."""
        if self.output_tokens_per_s is not None:
            return self.output_tokens_per_s
        if self.output_tokens_per_s_per_gpu is not None:
            return self.output_tokens_per_s_per_gpu * self.num_gpus
        return None

    @property
    def tpot_ms(self) -> float | None:
        """The best stated per-output-token latency: mean TPOT, else median TPOT, else mean ITL."""
        for value in (self.mean_tpot_ms, self.median_tpot_ms, self.mean_itl_ms, self.median_itl_ms):
            if value is not None:
                return value
        return None

    @property
    def ttft_ms(self) -> float | None:
        return self.mean_ttft_ms if self.mean_ttft_ms is not None else self.median_ttft_ms

    @property
    def effective_concurrency(self) -> int | None:
        """Requests in flight: max concurrency (serving) or batch size (static batch); None when unbounded."""
        return self.concurrency if self.concurrency is not None else self.batch_size


@dataclass(frozen=True, slots=True)
class SkippedRow:
    key: str  # the row's id, or "measurements[i]" when it has none
    reason: str  # one line


@dataclass(frozen=True, slots=True)
class PerfLoadResult:
    rows: list[PerfMeasurement]
    skipped: list[SkippedRow]

    def by_group(self) -> dict[str, list[PerfMeasurement]]:
        groups: dict[str, list[PerfMeasurement]] = {}
        for row in self.rows:
            groups.setdefault(row.source_group, []).append(row)
        return groups


class _Bad(ValueError):
    pass


def _one_line(text: object, limit: int = 240) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _req_str(entry: Mapping[str, Any], key: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _Bad(f"{key} is missing or not a non-empty string")
    return value.strip()


def _opt_str(entry: Mapping[str, Any], key: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _Bad(f"{key} must be a string, got {type(value).__name__}")
    return str(value)


def _opt_int(entry: Mapping[str, Any], key: str, low: int, high: int) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{key} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise _Bad(f"{key}={value} is outside [{low}, {high}]")
    return value


def _opt_positive(entry: Mapping[str, Any], key: str, high: float) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(f"{key} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise _Bad(f"{key}={value!r} must be a positive finite number")
    if number > high:
        raise _Bad(f"{key}={value!r} is implausibly large (limit {high:g})")
    return number


def _request_rate(entry: Mapping[str, Any]) -> float | None:
    value = entry.get("request_rate")
    if value is None:
        return None
    if isinstance(value, str):
        if value.strip().lower() in {"inf", "infinity"}:
            return math.inf
        try:
            value = float(value)
        except ValueError as exc:
            raise _Bad(f"request_rate {value!r} is neither a number nor 'inf'") from exc
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise _Bad(f"request_rate {value!r} must be positive or 'inf'")
    return float(value)


def validate_row(entry: object, gpu_ids: Iterable[str] | None = None) -> PerfMeasurement:
    """The typed row, or `ValueError` with a one-line reason."""
    if not isinstance(entry, Mapping):
        raise _Bad(f"a measurement must be a mapping, got {type(entry).__name__}")
    row_id = _req_str(entry, "id")
    source = _req_str(entry, "source")
    group = _req_str(entry, "source_group")
    engine = _req_str(entry, "engine").lower()
    if engine not in ENGINES:
        raise _Bad(f"engine {engine!r} is not one of {sorted(ENGINES)}")
    kind = _req_str(entry, "benchmark_kind")
    if kind not in BENCHMARK_KINDS:
        raise _Bad(f"benchmark_kind {kind!r} is not one of {sorted(BENCHMARK_KINDS)}")
    model = _req_str(entry, "model")
    gpu = _req_str(entry, "gpu")
    if gpu_ids is not None and gpu not in set(gpu_ids):
        raise _Bad(f"gpu {gpu!r} is not a GPU catalog id")
    in_catalog = entry.get("model_in_catalog", True)
    if not isinstance(in_catalog, bool):
        raise _Bad(f"model_in_catalog must be true/false, got {in_catalog!r}")

    ints: dict[str, int | None] = {}
    for key in _INT_FIELDS:
        high = MAX_GPUS if key in {"num_gpus", "tp", "pp", "ep", "dp_attention"} else MAX_LEN * 1000
        ints[key] = _opt_int(entry, key, 1, high)
    tp = ints["tp"] or 1
    pp = ints["pp"] or 1
    num_gpus = ints["num_gpus"] or tp * pp
    if num_gpus < tp * pp:
        raise _Bad(f"num_gpus={num_gpus} is fewer than tp*pp={tp * pp}")
    for key in ("input_len", "output_len"):
        value = ints[key]
        if value is not None and value > MAX_LEN:
            raise _Bad(f"{key}={value} is implausibly long")

    floats: dict[str, float | None] = {}
    for key in _THROUGHPUT_FIELDS:
        floats[key] = _opt_positive(entry, key, MAX_TOKENS_PER_S)
    for key in _TTFT_FIELDS:
        floats[key] = _opt_positive(entry, key, MAX_TTFT_MS)
    for key in _STEP_FIELDS:
        floats[key] = _opt_positive(entry, key, MAX_STEP_MS)
    floats["mean_e2e_latency_ms"] = _opt_positive(entry, "mean_e2e_latency_ms", 24 * MAX_TTFT_MS)
    floats["median_e2e_latency_ms"] = _opt_positive(entry, "median_e2e_latency_ms", 24 * MAX_TTFT_MS)
    floats["batch_latency_s"] = _opt_positive(entry, "batch_latency_s", 24 * MAX_TTFT_MS / 1000)
    mean_concurrency = _opt_positive(entry, "mean_concurrency", float(MAX_LEN))
    if all(floats[key] is None for key in MEASURED_FIELDS):
        raise _Bad("no measured value (throughput, TTFT, TPOT/ITL or latency)")
    tool = entry.get("bench_tool")
    if tool is not None and (not isinstance(tool, str) or tool not in {t.value for t in BenchTool}):
        raise _Bad(f"bench_tool {tool!r} is none of {', '.join(BenchTool)}")
    ratio = entry.get("random_range_ratio")
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1):
        raise _Bad(f"random_range_ratio {ratio!r} must be within [0, 1]")
    for lo, hi in (
        ("median_ttft_ms", "p99_ttft_ms"),
        ("median_tpot_ms", "p99_tpot_ms"),
        ("median_itl_ms", "p99_itl_ms"),
    ):
        low_value, high_value = floats[lo], floats[hi]
        if low_value is not None and high_value is not None and low_value > high_value * 1.001:
            raise _Bad(f"{lo}={low_value:g} exceeds {hi}={high_value:g}")

    strings = {key: _opt_str(entry, key) for key in _STR_FIELDS}
    return PerfMeasurement(
        id=row_id,
        source=source,
        source_group=group,
        engine=engine,
        benchmark_kind=kind,
        model=model,
        gpu=gpu,
        model_in_catalog=in_catalog,
        random_range_ratio=float(ratio) if ratio is not None else None,
        bench_tool=BenchTool(tool) if tool is not None else None,
        request_rate=_request_rate(entry),
        mean_concurrency=mean_concurrency,
        raw=dict(entry),
        **{**ints, "tp": tp, "pp": pp, "num_gpus": num_gpus},  # type: ignore[arg-type]
        **strings,  # type: ignore[arg-type]
        **floats,  # type: ignore[arg-type]
    )


def catalog_gpu_ids() -> set[str]:
    """The ids of the valid SKUs of the bundled GPU catalog."""
    from models_registry.sources.gpu_catalog import read_gpu_catalog

    records, _ = read_gpu_catalog()
    return {record.id for record in records}


def load_perf_measurements(
    path: Path | str = PERF_MEASUREMENTS_PATH, gpu_ids: Iterable[str] | None = None, *, check_gpus: bool = True
) -> PerfLoadResult:
    """Every valid row of the file and a one-line reason for each skipped one (bad fields, duplicate id,
    GPU id not in the catalog). `gpu_ids` defaults to the bundled GPU catalog when `check_gpus`."""
    document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    entries = document.get("measurements") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        return PerfLoadResult([], [SkippedRow("<file>", "no 'measurements' list at the top level")])
    known = set(gpu_ids) if gpu_ids is not None else (catalog_gpu_ids() if check_gpus else None)
    rows: list[PerfMeasurement] = []
    skipped: list[SkippedRow] = []
    seen: set[str] = set()
    for position, entry in enumerate(entries):
        raw_id = entry.get("id") if isinstance(entry, dict) else None
        key = raw_id if isinstance(raw_id, str) and raw_id else f"measurements[{position}]"
        try:
            row = validate_row(entry, known)
            if row.id in seen:
                raise _Bad(f"duplicate id {row.id!r}")
        except ValueError as exc:
            skipped.append(SkippedRow(key, _one_line(exc)))
            continue
        except Exception as exc:  # whatever one row provokes, the others still load
            skipped.append(SkippedRow(key, _one_line(f"{type(exc).__name__}: {exc}")))
            continue
        seen.add(row.id)
        rows.append(row)
    return PerfLoadResult(rows, skipped)


def load_perf_holdout(gpu_ids: Iterable[str] | None = None, *, check_gpus: bool = True) -> PerfLoadResult:
    """The blind holdout rows (evaluation/data/perf_holdout.yaml), read by the same rules. Score on them; never fit on them."""
    return load_perf_measurements(PERF_HOLDOUT_PATH, gpu_ids, check_gpus=check_gpus)
