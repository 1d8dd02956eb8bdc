"""capplan's sglang profile against public SGLang startup logs (capacity/data/sglang_public_measurements.yaml).

The expected numbers are what SGLang printed ("KV Cache is allocated. #tokens: N, K size: X GB, V size: Y GB"),
not what capplan computed. The profile models SGLang 0.5.23; the public logs are older releases, so the
tolerance is stated per row with the reason it is not tighter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from capacity.memory import GIB, estimate
from capacity.spec import DeploymentSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku

DATA = Path(__file__).resolve().parents[1] / "capacity" / "data" / "sglang_public_measurements.yaml"
# (row id, relative tolerance, why): the one public log is a July-2025 release; capplan's 0.5.23 profile
# leaves 9 % more KV memory (its non-KV reserve is the 0.5.23 constant; the log's weights are not printed)
TOLERANCES = {"vllm21348-sglang-qwen3-235b-a22b-fp8-h100-tp4": 0.10}


def _rows() -> list[dict[str, object]]:
    return list(yaml.safe_load(DATA.read_text(encoding="utf-8"))["measurements"])


@pytest.mark.parametrize("row", _rows(), ids=lambda r: str(r["id"]))
def test_sglang_log_within_stated_tolerance(row: dict[str, object]) -> None:
    resolved = load_model(str(row["model"]))
    gpu = find_gpu_sku("NVIDIA H100 80GB HBM3")
    est = estimate(
        resolved.spec,
        DeploymentSpec(
            tp=int(row["tensor_parallel_size"]),
            engine="sglang",  # type: ignore[call-overload]
            gpu_memory_utilization=float(row["mem_fraction_static"]),
        ),  # type: ignore[arg-type]
        gpu=gpu,
        checkpoint_bytes=resolved.checkpoint_bytes,
    )
    tolerance = TOLERANCES[str(row["id"])]
    assert est.starts
    assert est.kv_cache_tokens == pytest.approx(row["max_total_num_tokens"], rel=tolerance)
    kv_gib = float(row["k_size_gb"]) + float(row["v_size_gb"])  # type: ignore[arg-type]
    assert est.kv_budget_bytes_per_gpu / GIB == pytest.approx(kv_gib, rel=tolerance)
