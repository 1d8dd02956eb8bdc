"""capplan's vLLM profile against public vLLM startup logs (evaluation/data/vllm_public_measurements.yaml).

The numbers on the right-hand side are what vLLM printed in those logs, not what capplan computed.
"""

from __future__ import annotations

import pytest

from capacity.dtypes import GIB
from capacity.spec import ModelSpec
from evaluation.measurements import Comparison, compare, load_measurements, summarize
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku


def _resolve(repo_id: str) -> tuple[ModelSpec, int | None]:
    resolved = load_model(repo_id)
    return resolved.spec, resolved.checkpoint_bytes


@pytest.fixture(scope="module")
def comparisons() -> dict[str, Comparison]:
    return {c.row.id: c for c in compare(load_measurements(), _resolve, find_gpu_sku)}


def test_every_row_is_predicted_or_skipped_with_a_reason(comparisons: dict[str, Comparison]) -> None:
    rows = load_measurements()
    assert len(rows) == len(comparisons) >= 50
    for comparison in comparisons.values():
        assert (comparison.predicted is None) == (comparison.skipped is not None)


def test_kv_pool_and_tokens_accuracy_on_rows_with_a_stated_version(comparisons: dict[str, Comparison]) -> None:
    stated = [c for c in comparisons.values() if c.predicted is not None and c.row.vllm_version]
    pool = summarize([e for c in stated if (e := c.kv_pool_error) is not None])
    tokens = summarize([e for c in stated if (e := c.kv_tokens_error) is not None])
    assert pool.n >= 15 and tokens.n >= 12
    assert pool.median_abs_error < 0.02
    assert pool.within_5pct >= 0.8
    assert tokens.median_abs_error < 0.02
    assert tokens.within_5pct >= 0.8


@pytest.mark.parametrize(
    ("row_id", "kv_gib", "tokens"),
    [
        # vLLM 0.19.0 on H100 (llm-d-planner sweep): "Available KV cache memory" and "GPU KV cache size"
        ("llmd-planner-v0190-codellama-7b-h100-tp1-8k", 61.66, 126_256),
        ("llmd-planner-v0190-llama-3.1-8b-h100-tp1-16k", 58.11, 476_016),
        ("llmd-planner-v0190-gemma-2-9b-it-h100-tp1-8k", 54.12, 168_880),
        ("llmd-planner-v0190-qwen1.5-moe-a2.7b-h100-tp1-8k", 45.83, 250_304),
    ],
)
def test_single_logs_within_one_percent(
    comparisons: dict[str, Comparison], row_id: str, kv_gib: float, tokens: int
) -> None:
    predicted = comparisons[row_id].predicted
    assert predicted is not None
    assert predicted.kv_budget_bytes_per_gpu / GIB == pytest.approx(kv_gib, rel=0.01)
    assert predicted.kv_cache_tokens == pytest.approx(tokens, rel=0.01)


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ("  inferred: 5\n", "must be a mapping"),
        ("  inferred:\n    engine: sglang\n", "must be a mapping"),
        ("  inferred:\n    vllm_version: 0.10\n", "quoted release"),  # YAML reads 0.10 as the number 0.1
        ("  inferred:\n    vllm_version: latest\n", "quoted release"),
        ("  inferred:\n    gpu_memory_utilization: 1.7\n", "in (0, 1]"),
        ("  inferred:\n    gpu_memory_utilization: true\n", "in (0, 1]"),
        ("  triton_kernels: 'true'\n", "true, false or null"),
    ],
)
def test_a_malformed_row_setting_is_refused_in_one_line(tmp_path, extra: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "rows.yaml"
    path.write_text("schema_version: 1\nmeasurements:\n- id: bad-row\n  model: Qwen/Qwen3-8B\n" + extra, encoding="utf-8")
    with pytest.raises(ValueError, match="bad-row") as refused:
        load_measurements(path)
    assert reason in str(refused.value) and "\n" not in str(refused.value)
