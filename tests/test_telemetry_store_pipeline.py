"""The sample store in real Dagster runs: the telemetry assets append the drop folder's samples to a
local store once however often they run, the predictions read usage from the store, and
`telemetry_job` (what the sensor starts) refreshes telemetry and its marts without the registry
sync or the grid, on top of the last published warehouse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from pipelines.resources import PlanningResource
from telemetry.store import SampleStore
from tests.test_telemetry_pipeline import Env, materialize
from tests.test_telemetry_store import s3  # noqa: F401 (the moto S3 server fixture)

DEPLOYMENT = "codellama-h100"


class StoreEnv(Env):
    def __init__(self, root: Path, store_url: str | None = None) -> None:
        super().__init__(root)
        self.store = root / "telemetry-store"
        self.store_url = store_url or str(self.store)

    def resources(self) -> dict[str, Any]:
        return super().resources() | {
            "planning": PlanningResource(
                telemetry_dir=str(self.drop), workloads_path=str(self.workloads), telemetry_store=self.store_url
            )
        }


def ingest_metadata(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    materialization = result.asset_materializations_for_node("telemetry_ingest")
    files = next(m for m in materialization if m.asset_key == dg.AssetKey(["raw", "telemetry_files"]))
    return {k: v.value for k, v in files.metadata.items()}


def store_files(env: StoreEnv) -> dict[str, bytes]:
    return {str(p.relative_to(env.store)): p.read_bytes() for p in sorted(env.store.rglob("*.parquet"))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env = StoreEnv(tmp_path_factory.mktemp("telemetry-store-pipeline"))
    first = materialize(env)
    assert first.success, [e.message for e in first.all_events if e.is_failure]
    after_first = store_files(env)
    second = materialize(env)
    assert second.success, [e.message for e in second.all_events if e.is_failure]
    return {"env": env, "first": first, "second": second, "after_first": after_first}


@pytest.mark.slow  # two whole runs of the pipeline (the `runs` fixture): the slow group holds those
def test_a_rerun_stores_nothing_twice(runs: dict[str, Any]) -> None:
    env: StoreEnv = runs["env"]
    first, second = ingest_metadata(runs["first"]), ingest_metadata(runs["second"])
    # the metrics file: the first scrape's 4 samples, the second's running and preemptions (its -1 waiting
    # and 55.0 usage are rejected), then a cut line and a repeated sample: 6 samples (the startup
    # log gives observations, not samples)
    assert first["samples"] == 6 and first["store_written"] == 6 and first["store_already_stored"] == 0
    assert second["store_written"] == 0 and second["store_already_stored"] == 6 and second["store_rejected"] == 0
    assert first["rows_in"] == first["accepted"] + first["rejected"]
    assert store_files(env) == runs["after_first"] and len(runs["after_first"]) == 1
    assert SampleStore.from_url(str(env.store)).days() == ["2025-06-02"]


@pytest.mark.slow  # two whole runs of the pipeline (the `runs` fixture): the slow group holds those
def test_predictions_take_their_usage_from_the_store(runs: dict[str, Any]) -> None:
    env: StoreEnv = runs["env"]
    ((n_samples, peak, running),) = env.query(
        "select n_samples, peak_kv_usage, peak_requests_running from marts.prediction_vs_measured "
        f"where deployment_id = '{DEPLOYMENT}'"
    )
    assert (n_samples, peak, running) == (6, 0.42, 15.0)


@pytest.mark.slow  # two whole runs of the pipeline (the `runs` fixture): the slow group holds those
def test_the_telemetry_job_refreshes_telemetry_without_the_nightly(runs: dict[str, Any]) -> None:
    from pipelines.assets.telemetry import telemetry_job, telemetry_sensor
    from pipelines.definitions import build_definitions

    env: StoreEnv = runs["env"]
    assert telemetry_sensor.job_name == "telemetry_job"
    built = build_definitions()
    defs = dg.Definitions(
        assets=built.assets, asset_checks=built.asset_checks, jobs=[telemetry_job], resources=env.resources()
    )
    runs_before = env.query("select count(*) from marts.runs")[0][0]
    result = defs.resolve_job_def("telemetry_job").execute_in_process(raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    materialized = {"/".join(e.asset_key.path) for e in result.get_asset_materialization_events() if e.asset_key}
    assert "raw/telemetry_samples" in materialized and "marts/runs" in materialized
    assert "marts/prediction_vs_measured" in materialized and "marts/recommended_placements" in materialized
    assert not {m for m in materialized if m.split("/")[1] in ("models", "gpus", "capacity_grid", "deployments")}
    assert env.query("select count(*) from marts.runs")[0][0] == runs_before + 1
    assert env.query(f"select n_samples from marts.prediction_vs_measured where deployment_id = '{DEPLOYMENT}'") == [(6,)]
    assert env.query("select count(*) > 0 from marts.recommended_placements") == [(True,)]
    assert ingest_metadata(result)["store_written"] == 0


def test_a_store_that_cannot_be_written_fails_the_ingest_with_one_line(tmp_path: Path) -> None:
    env = StoreEnv(tmp_path)
    env.store.write_text("a file where the store's folder should be", encoding="utf-8")
    result = materialize(env)
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure and e.step_key == "telemetry_ingest"]
    (failure,) = failures
    description = failure.event_specific_data.error.message  # type: ignore[union-attr]
    assert description.startswith("dagster._core.definitions.events.Failure: telemetry store:"), description
    assert description.count("\n") <= 1
    assert env.store.read_text(encoding="utf-8").startswith("a file"), "nothing overwritten"


@pytest.mark.slow  # two more Dagster runs; the local store above covers the same assets
def test_the_ingest_appends_to_s3_and_a_rerun_adds_nothing(
    s3: dict[str, Any],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {"AWS_ENDPOINT_URL": s3["endpoint"], "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    env = StoreEnv(tmp_path, "s3://fleet/pipeline-test")
    first, second = materialize(env), materialize(env)
    assert first.success and second.success
    assert (ingest_metadata(first)["store_written"], ingest_metadata(second)["store_written"]) == (6, 0)
    assert ingest_metadata(second)["store_already_stored"] == 6
    assert env.query(f"select n_samples from marts.prediction_vs_measured where deployment_id = '{DEPLOYMENT}'") == [(6,)]
