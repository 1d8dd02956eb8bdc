"""A deployment capplan cannot size is kept with advice that fits where its telemetry came from
(issue 24): one seen only through Prometheus metrics (a scrape or the HTTP API: the same parser) is
told to add the DCGM exporter's series, which name the GPU in their modelName label, not to paste
`nvidia-smi -L` into a log it does not have. The oracle: vLLM's own /metrics scrape and DCGM's
(tests/fixtures/telemetry/prometheus), and that the advice, once followed, sizes the deployment."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from models_registry.planning import Catalog, bundled_catalog
from telemetry.predictions import predict_row
from telemetry.summary import deployment_summary
from tests.test_telemetry_support import FIXTURES, ingest

PROM = FIXTURES / "prometheus"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return bundled_catalog([LLAMA], ["h100-sxm-80gb"])


def _predict(tmp_path: Path, names: list[str], catalog: Catalog) -> dict[str, Any]:
    (tmp_path / "dep").mkdir()
    for name in names:
        shutil.copy(PROM / name, tmp_path / "dep" / name)
    result = ingest(tmp_path)
    rows = deployment_summary(result.observations.lazy(), result.samples.lazy()).collect().to_dicts()
    assert [row["deployment_id"] for row in rows] == ["dep"]
    return predict_row(rows[0], catalog)[1]


def test_a_metrics_only_deployment_without_a_gpu_is_told_to_scrape_dcgm(tmp_path: Path, catalog: Catalog) -> None:
    out = _predict(tmp_path, ["vllm_v1_scrape.prom"], catalog)
    assert out["prediction_status"] == "skipped"
    reason = out["prediction_reason"]
    assert "DCGM_FI_DEV_FB_USED" in reason and "modelName" in reason and "deployment label" in reason
    assert "nvidia-smi" not in reason and "deployment.yaml" not in reason


def test_following_the_advice_sizes_it(tmp_path: Path, catalog: Catalog) -> None:
    out = _predict(tmp_path, ["vllm_v1_scrape.prom", "dcgm_h100.prom"], catalog)
    assert out["gpu"] == "h100-sxm-80gb"
    assert "nothing to size the deployment on" not in (out["prediction_reason"] or "")


def test_a_deployment_with_a_log_is_told_to_name_the_gpu_in_it(catalog: Catalog) -> None:
    row = {"deployment_id": "d", "model_id": LLAMA, "gpu_sku": None, "sources": "prometheus,vllm_log", "engine": "vllm"}
    out = predict_row(row, catalog)[1]
    assert out["prediction_status"] == "skipped"
    assert "`nvidia-smi -L` output in the log" in out["prediction_reason"]


def test_the_sensor_says_prometheus_telemetry_comes_with_runs_not_files(tmp_path: Path) -> None:
    import dagster as dg

    from pipelines.assets.telemetry import telemetry_sensor
    from pipelines.resources import PlanningResource

    def skip_reason(planning: PlanningResource) -> str:
        result = telemetry_sensor(dg.build_sensor_context(cursor=None, resources={"planning": planning}))
        assert isinstance(result, dg.SensorResult) and not result.run_requests
        return str(result.skip_reason)

    empty = str(tmp_path / "nothing-here")
    files_only = skip_reason(PlanningResource(telemetry_dir=empty))
    assert "no telemetry files in" in files_only and "Prometheus" not in files_only
    url = "http://capplan:s3cr3t@127.0.0.1:9090/"  # never queried: the sensor reads files only
    prometheus_only = skip_reason(PlanningResource(telemetry_dir=empty, prometheus_url=url))
    assert "telemetry from Prometheus" in prometheus_only and "telemetry_job" in prometheus_only
    assert "127.0.0.1:9090" in prometheus_only and "s3cr3t" not in prometheus_only
