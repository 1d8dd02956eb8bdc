"""The public throughput / latency reference set (evaluation/data/perf_measurements.yaml) and its loader.

The file is what the performance model is fitted on and scored against by leave-one-source-group-out
cross-validation, so these tests guard its shape: every row cites a source and a group, ids are unique,
GPU and model ids resolve in the catalogs, numbers are plausible and internally consistent, and a
malformed row is skipped with a one-line reason instead of breaking the load.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from evaluation.perf_measurements import (
    BENCHMARK_KINDS,
    ENGINES,
    PERF_MEASUREMENTS_PATH,
    PerfLoadResult,
    PerfMeasurement,
    catalog_gpu_ids,
    load_perf_measurements,
)
from models_registry.sources.bundled import bundled_ids
from tests.conftest import measurement_entries


def perf_file_fixtures(path: Path, load: Callable[[], PerfLoadResult]) -> tuple[Any, Any]:
    """The two module fixtures a perf measurements file's tests start from: `raw_rows`, the file's entries as
    written, and `rows`, what `load` reads from it (asserted to skip none). This module's and the holdout's."""

    @pytest.fixture(scope="module")
    def raw_rows() -> list[dict[str, object]]:
        return measurement_entries(path)

    @pytest.fixture(scope="module")
    def rows() -> list[PerfMeasurement]:
        result = load()
        assert result.skipped == [], result.skipped
        return result.rows

    return raw_rows, rows


raw_rows, rows = perf_file_fixtures(PERF_MEASUREMENTS_PATH, load_perf_measurements)


def test_every_row_loads(raw_rows: list[dict[str, object]], rows: list[PerfMeasurement]) -> None:
    assert len(rows) == len(raw_rows)


def test_ids_are_unique(raw_rows: list[dict[str, object]]) -> None:
    counts = Counter(str(row.get("id")) for row in raw_rows)
    assert [key for key, n in counts.items() if n > 1] == []
    assert all(row.get("id") for row in raw_rows)


def test_every_row_has_a_source_and_a_group(raw_rows: list[dict[str, object]]) -> None:
    for row in raw_rows:
        source, group = row.get("source"), row.get("source_group")
        assert isinstance(source, str) and source.startswith("https://github.com/"), row["id"]
        assert isinstance(group, str) and group.strip(), row["id"]


def test_repository_sources_are_pinned_to_a_commit(rows: list[PerfMeasurement]) -> None:
    for row in rows:
        if "/blob/" in row.source:
            commit = row.source.split("/blob/")[1].split("/")[0]
            assert len(commit) == 40 and all(c in "0123456789abcdef" for c in commit), row.id


def test_gpu_ids_exist_in_the_gpu_catalog(rows: list[PerfMeasurement]) -> None:
    known = catalog_gpu_ids()
    assert {row.gpu for row in rows} <= known


def test_models_resolve_in_the_model_catalog(rows: list[PerfMeasurement]) -> None:
    known = {repo.casefold() for repo in bundled_ids()}
    for row in rows:
        if row.model_in_catalog:
            assert row.model.casefold() in known, row.id
        elif row.catalog_model is not None:
            assert row.catalog_model.casefold() in known, row.id
        assert row.config_model.casefold() in known or not row.model_in_catalog, row.id


def test_coverage_of_the_set(rows: list[PerfMeasurement]) -> None:
    assert len(rows) >= 60
    groups = {row.source_group for row in rows}
    assert len(groups) >= 8
    engines = Counter(row.engine for row in rows)
    assert {"vllm", "sglang"} <= set(engines) <= ENGINES
    gpu_classes = {row.gpu.split("-")[0] for row in rows}
    assert len(gpu_classes) >= 4
    assert {"h100", "a100"} <= gpu_classes
    assert gpu_classes & {"h200", "b200"} and gpu_classes & {"l4", "l40s", "mi300x"}
    concurrencies = {row.effective_concurrency for row in rows if row.effective_concurrency is not None}
    assert 1 in concurrencies and max(concurrencies) >= 256
    kinds = {row.benchmark_kind for row in rows}
    assert kinds <= BENCHMARK_KINDS and "serving" in kinds


def test_numbers_are_plausible(rows: list[PerfMeasurement]) -> None:
    for row in rows:
        for name in ("mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms"):
            value = getattr(row, name)
            assert value is None or 0 < value < 10_000, (row.id, name, value)
        for name in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms"):
            value = getattr(row, name)
            assert value is None or 0 < value < 3_600_000, (row.id, name, value)
        throughput = row.output_throughput
        assert throughput is None or 0 < throughput < 1_000_000, row.id
        if row.output_tokens_per_s is not None and row.total_tokens_per_s is not None:
            assert row.output_tokens_per_s <= row.total_tokens_per_s * 1.001, row.id
        if row.input_len is not None and row.mean_input_len is not None:
            # random datasets sample at most the nominal length (plus a few template tokens)
            assert row.mean_input_len <= row.input_len * 1.05 + 8, row.id
        # a decode step can't beat ~1 ms on any listed GPU, nor a request exceed 1/TPOT tokens/s
        if row.tpot_ms is not None:
            assert row.tpot_ms > 1.0, row.id
            if row.output_throughput is not None and row.effective_concurrency is not None:
                per_user_ceiling = 1000.0 / row.tpot_ms
                assert row.output_throughput <= per_user_ceiling * row.effective_concurrency * 1.5, row.id
        assert row.tp * row.pp <= row.num_gpus
        if row.mean_concurrency is not None and row.concurrency is not None:
            # the tool's time-averaged in-flight count can't exceed the cap (small slack for its rounding)
            assert row.mean_concurrency <= row.concurrency * 1.01, row.id


def test_static_batch_latency_rows_are_self_consistent(rows: list[PerfMeasurement]) -> None:
    """vLLM benchmark_latency rows: throughput = batch * (input + output) / latency, as the source computes it."""
    checked = 0
    for row in rows:
        if row.benchmark_kind != "offline_batch_latency":
            continue
        assert row.batch_size and row.input_len and row.output_len and row.batch_latency_s, row.id
        if row.total_tokens_per_s is None:
            continue  # latency-only tables (ROCm dev-docker)
        implied = row.batch_size * (row.input_len + row.output_len) / row.batch_latency_s
        assert implied == pytest.approx(row.total_tokens_per_s, rel=1e-6), row.id
        checked += 1
    assert checked >= 20


def test_serving_rows_are_self_consistent(rows: list[PerfMeasurement]) -> None:
    """bench_serving totals: output tokens/s over request throughput is the mean output length (up to rounding)."""
    checked = 0
    for row in rows:
        if row.benchmark_kind != "serving" or row.request_throughput is None or row.output_tokens_per_s is None:
            continue
        if row.total_output_tokens is None or not row.num_prompts:
            continue
        # request throughput is printed with two decimals: allow for that rounding
        low = row.output_tokens_per_s / (row.request_throughput + 0.005)
        high = row.output_tokens_per_s / max(row.request_throughput - 0.005, 1e-9)
        mean_output = row.total_output_tokens / row.num_prompts
        assert low * 0.99 <= mean_output <= high * 1.01, row.id
        checked += 1
    assert checked >= 20


def test_request_rate_inf_is_parsed(rows: list[PerfMeasurement]) -> None:
    assert any(row.request_rate == math.inf for row in rows)


GOOD = {
    "id": "good",
    "source": "https://github.com/example/repo/issues/1",
    "source_group": "example",
    "engine": "vllm",
    "benchmark_kind": "serving",
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "gpu": "h100-sxm-80gb",
    "tp": 1,
    "concurrency": 8,
    "mean_tpot_ms": 9.5,
    "request_rate": "inf",
}


def _write(tmp_path: Path, entries: list[object]) -> Path:
    path = tmp_path / "perf.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "measurements": entries}), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"source": None}, "source is missing"),
        ({"source_group": ""}, "source_group is missing"),
        ({"engine": "tgi"}, "engine 'tgi'"),
        ({"benchmark_kind": "vibes"}, "benchmark_kind"),
        ({"gpu": "h900-1tb"}, "not a GPU catalog id"),
        ({"mean_tpot_ms": -3}, "positive"),
        ({"mean_tpot_ms": 25_000}, "implausibly large"),
        ({"mean_tpot_ms": "fast"}, "must be a number"),
        ({"mean_tpot_ms": float("nan")}, "positive finite"),
        ({"tp": 0}, "outside"),
        ({"tp": 4, "num_gpus": 2}, "fewer than tp*pp"),
        ({"concurrency": 2.5}, "must be an integer"),
        ({"mean_tpot_ms": None}, "no measured value"),
        ({"median_ttft_ms": 50.0, "p99_ttft_ms": 10.0}, "exceeds"),
        ({"request_rate": "soon"}, "request_rate"),
        ({"model_in_catalog": "yes"}, "model_in_catalog"),
    ],
)
def test_a_bad_row_is_skipped_with_a_one_line_reason(tmp_path: Path, change: dict[str, object], reason: str) -> None:
    bad = {**GOOD, "id": "bad", **change}
    result = load_perf_measurements(_write(tmp_path, [GOOD, bad]), gpu_ids={"h100-sxm-80gb"})
    assert [row.id for row in result.rows] == ["good"]
    assert len(result.skipped) == 1
    skipped = result.skipped[0]
    assert skipped.key == "bad"
    assert reason in skipped.reason and "\n" not in skipped.reason


def test_duplicates_and_non_mappings_are_skipped(tmp_path: Path) -> None:
    result = load_perf_measurements(_write(tmp_path, [GOOD, dict(GOOD), "nonsense", None]), gpu_ids={"h100-sxm-80gb"})
    assert [row.id for row in result.rows] == ["good"]
    assert [s.key for s in result.skipped] == ["good", "measurements[2]", "measurements[3]"]
    assert "duplicate id" in result.skipped[0].reason


def test_a_file_without_measurements_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("schema_version: 1\n", encoding="utf-8")
    result = load_perf_measurements(path, gpu_ids=set())
    assert result.rows == [] and len(result.skipped) == 1


def test_derived_quantities(tmp_path: Path) -> None:
    entry = {
        **GOOD,
        "num_prompts": 10,
        "total_input_tokens": 6100,
        "total_output_tokens": 4200,
        "input_len": 1000,
        "output_tokens_per_s_per_gpu": 500.0,
        "tp": 2,
    }
    (row,) = load_perf_measurements(_write(tmp_path, [entry]), gpu_ids={"h100-sxm-80gb"}).rows
    assert row.mean_input_len == 610 and row.mean_output_len == 420
    assert row.output_throughput == 1000.0 and row.num_gpus == 2
    assert row.tpot_ms == 9.5 and row.effective_concurrency == 8


def test_sglang_bench_serving_random_lengths_are_its_own() -> None:
    """`sglang.bench_serving --dataset-name random` draws each length uniformly from [max(1, L x r), L] (r: its
    --random-range-ratio, 0 by default), vLLM's client from [L(1 - r), L(1 + r)]: by hand, r = 0 is a mean of L / 2
    spread by 1 around it, r = 0.5 a mean of 3L / 4 spread by 1/3; the simulation caps a spread at 0.99."""
    from dataclasses import replace

    from evaluation.perf_measurements import BenchTool, load_perf_measurements
    from evaluation.perf_sim import MAX_SPREAD, row_load

    rows = load_perf_measurements().rows
    tagged = [r for r in rows if r.bench_tool is BenchTool.SGLANG_BENCH_SERVING and r.dataset == "random"]
    assert tagged and all(r.engine == "sglang" for r in tagged)
    # the sources' own token totals say so: about half the nominal lengths where no ratio was given
    defaults = [r for r in tagged if not r.random_range_ratio and r.total_input_tokens and r.input_len == 1000]
    assert defaults and all(0.45 < r.total_input_tokens / r.num_prompts / 1000 < 0.65 for r in defaults)  # type: ignore[operator]
    row = replace(tagged[0], total_input_tokens=None, total_output_tokens=None, input_len=1000, output_len=2000)
    assert (row.mean_input_len, row.mean_output_len, row.length_spread) == (500.0, 1000.0, 1.0)
    half = replace(row, random_range_ratio=0.5)
    assert (half.mean_input_len, half.length_spread) == (750.0, pytest.approx(1 / 3))
    load = row_load(row, 500, 1000)
    assert not isinstance(load, str) and load.lengths.range_ratio == MAX_SPREAD
    # vLLM's client: around the nominal length, fixed at the mean where the totals are stated
    vllm = replace(row, bench_tool=None, random_range_ratio=0.5)
    assert (vllm.mean_input_len, vllm.length_spread) == (1000.0, 0.5)
