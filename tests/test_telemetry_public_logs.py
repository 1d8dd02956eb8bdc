"""Real startup-log excerpts (evaluation/data/vllm_public_measurements.yaml, copied from public
issue threads and benchmark logs) parse to the numbers recorded next to them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from telemetry import ingest_dir
from tests.test_telemetry_support import GIB, model_ids, write

MEASUREMENTS = Path(__file__).resolve().parent.parent / "evaluation" / "data" / "vllm_public_measurements.yaml"
# recorded field -> (observation column, scale, tolerance in recorded units)
FIELDS = {
    "weights_gib": ("weights_bytes", GIB, 0.006),
    "activation_peak_gib": ("activation_peak_bytes", GIB, 0.006),
    "non_torch_gib": ("non_torch_bytes", GIB, 0.006),
    "kv_cache_memory_gib": ("kv_cache_memory_bytes", GIB, 0.006),
    "kv_cache_tokens": ("kv_cache_tokens", 1, 0),
    "max_concurrency": ("max_concurrency", 1, 0.0),
    "num_gpu_blocks": ("num_gpu_blocks", 1, 0),
}
# excerpts that are not one engine's log, with why
NOT_ONE_LOG = {"vllm-pr2031-llama2-70b-a100-tp4": "a PR description quoting two builds' block counts"}


def _raw_logs() -> list[dict[str, Any]]:
    if not MEASUREMENTS.exists():
        return []
    document = yaml.safe_load(MEASUREMENTS.read_text(encoding="utf-8"))
    return [m for m in document["measurements"] if m.get("evidence") == "raw_log" and m.get("log_excerpt")]


@pytest.mark.skipif(not MEASUREMENTS.exists(), reason="public measurements file not present")
def test_public_log_excerpts_match_their_recorded_numbers(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {}
    for m in _raw_logs():
        model = m["model"].split(" ")[0]
        files[f"{m['id']}/startup.log"] = m["log_excerpt"]
        files[f"{m['id']}/deployment.yaml"] = f"model: {model}\n"
    extra_models = {m["model"].split(" ")[0] for m in _raw_logs()}
    write(tmp_path, files)
    result = ingest_dir(tmp_path, model_ids=[*model_ids(), *extra_models])
    assert result.check_reconciliation() == []
    by_deployment: dict[str, dict[str, Any]] = {}
    for row in result.observations.iter_rows(named=True):
        by_deployment[row["deployment_id"]] = row  # the last engine start of each excerpt
    compared = 0
    mismatches = []
    for m in _raw_logs():
        obs = by_deployment.get(m["id"])
        if obs is None or m["id"] in NOT_ONE_LOG:
            continue
        for field, (column, scale, tolerance) in FIELDS.items():
            want, got = m.get(field), obs.get(column)
            if want is None or got is None:
                continue
            compared += 1
            if abs(got / scale - want) > tolerance + 1e-9:
                mismatches.append((m["id"], field, want, got / scale))
    assert mismatches == []
    assert compared >= 30
    assert len(by_deployment) >= 10
