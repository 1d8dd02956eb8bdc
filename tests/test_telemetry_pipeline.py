"""The telemetry and recommendation assets of the real definitions, materialized in-process.

A drop folder under tmp_path holds a real vLLM V1 startup log (the llm-d-planner vLLM 0.19.0
CodeLlama-7b H100 excerpt of evaluation/data/vllm_public_measurements.yaml, as a user pastes it,
with a sidecar naming the GPU and the image's version), its metrics with malformed rows, a log of
a model the registry does not know and a file capplan does not read. Only the registry, telemetry
and recommendation groups run (the capacity grid is not needed here), twice: the second run
replaces the marts. Sensors and checks are called as plain functions.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest
import yaml

from pipelines.resources import PlanningResource, RegistryResource, WarehouseResource
from telemetry import SAMPLE_DIR
from telemetry.drop_folder import SAMPLE, fingerprint, resolve_drop_folder
from tests.test_warehouse_fixtures import write_catalog
from warehouse.publish import Warehouse
from warehouse.sql import columns, header_comment, sql_path

pytestmark = pytest.mark.slow  # two whole materializations of their own (the slow group holds those)

GIB = 1 << 30
PROJECT_ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = PROJECT_ROOT / "evaluation" / "data" / "vllm_public_measurements.yaml"
LOG_ID = "llmd-planner-v0190-codellama-7b-h100-tp1-8k"
MODELS = ("codellama/CodeLlama-7b-hf", "meta-llama/Llama-3.1-8B-Instruct")
GPUS = ("h100-sxm-80gb", "l4-24gb")
GROUPS = ("registry", "gpu_catalog", "telemetry", "recommendations")

M = 'model_name="codellama/CodeLlama-7b-hf"'
METRICS = f"""# scraped_at: 2025-06-02T00:00:00Z
vllm:num_requests_running{{engine="0",{M}}} 12.0
vllm:num_requests_waiting{{engine="0",{M}}} 0.0
vllm:kv_cache_usage_perc{{engine="0",{M}}} 0.42
vllm:num_preemptions_total{{engine="0",{M}}} 0.0
# scraped_at: 2025-06-02T01:00:00Z
vllm:num_requests_running{{engine="0",{M}}} 15.0
vllm:num_requests_waiting{{engine="0",{M}}} -1.0
vllm:kv_cache_usage_perc{{engine="0",{M}}} 55.0
vllm:num_preemptions_total{{engine="0",{M}}} 0.0
vllm:kv_cache_usage_perc{{engine="0",{M}
# scraped_at: 2025-06-02T00:00:00Z
vllm:num_requests_running{{engine="0",{M}}} 12.0
"""
UNKNOWN_LOG = """$ vllm serve acme/secret-llm-13b --max-model-len 16384
(EngineCore_DP0 pid=283) INFO 06-01 20:11:03 [gpu_model_runner.py:2653] Model loading took 24.31 GiB and 51.2 seconds
(EngineCore_DP0 pid=283) INFO 06-01 20:11:20 [gpu_worker.py:298] Available KV cache memory: 45.02 GiB
"""
WORKLOADS = {
    "workloads": [
        {"name": "chat", "model": "meta-llama/Llama-3.1-8B-Instruct", "target_concurrency": 64, "context_tokens": 4096,
         "request_rate": 4},
        {"name": "code", "model": "codellama/CodeLlama-7b-hf", "target_concurrency": 16, "context_tokens": 8192},
    ]
}


def public_log() -> dict[str, Any]:
    document = yaml.safe_load(MEASUREMENTS.read_text(encoding="utf-8"))
    return next(m for m in document["measurements"] if m["id"] == LOG_ID)


def write_drop_folder(root: Path) -> Path:
    drop = root / "telemetry"
    files = {
        "codellama-h100/startup.log": public_log()["log_excerpt"],
        "codellama-h100/deployment.yaml": "gpu: NVIDIA H100 80GB HBM3\nengine_version: 0.19.0\n",
        "codellama-h100/vllm-metrics.prom": METRICS,
        "acme-13b/startup.log": UNKNOWN_LOG,
        "notes.xlsx": "not telemetry",
    }
    for name, text in files.items():
        path = drop / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return drop


class Env:
    def __init__(self, root: Path) -> None:
        self.catalog = write_catalog(root / "catalog", MODELS, GPUS)
        self.registry_url = f"sqlite:///{root / 'var' / 'registry.db'}"
        self.warehouse = root / "var" / "warehouse.duckdb"
        self.drop = write_drop_folder(root)
        self.workloads = root / "workloads.yaml"
        self.workloads.write_text(yaml.safe_dump(WORKLOADS), encoding="utf-8")

    def resources(self) -> dict[str, Any]:
        return {
            "registry": RegistryResource(url=self.registry_url, catalog_dir=str(self.catalog)),
            "warehouse": WarehouseResource(path=str(self.warehouse)),
            "planning": PlanningResource(telemetry_dir=str(self.drop), workloads_path=str(self.workloads)),
        }

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        con = duckdb.connect(str(self.warehouse), read_only=True)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()


def materialize(env: Env) -> dg.ExecuteInProcessResult:
    from pipelines.definitions import build_definitions

    defs = build_definitions()

    selection = dg.AssetSelection.groups(*GROUPS) | dg.AssetSelection.assets(dg.AssetKey(["marts", "runs"]))
    return dg.materialize(
        [*(defs.assets or []), *(defs.asset_checks or [])],  # type: ignore[list-item]
        selection=selection,
        resources=env.resources(),
        raise_on_error=False,
    )


def checks_of(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    evaluations = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return {ev.check_name: ev.passed for ev in evaluations}  # type: ignore[union-attr]


MARTS = (
    "telemetry_observations",
    "telemetry_samples",
    "telemetry_rejects",
    "telemetry_files",
    "prediction_vs_measured",
    "calibration",
    "effective_context_limits",
    "admission_budgets",
    "recommended_placements",
    "procurement_plan",
    "procurement_buckets",
    "workloads",
)


@pytest.fixture(scope="module")
def twice(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env = Env(tmp_path_factory.mktemp("telemetry-pipeline"))
    results, snapshots = [], []
    for _ in range(2):
        result = materialize(env)
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        results.append(result)
        snapshots.append(
            {t: env.query(f"select * exclude (run_id, run_date) from marts.{t} order by all") for t in MARTS}
        )
    return {"env": env, "results": results, "snapshots": snapshots}


def test_the_pasted_log_is_predicted_side_by_side(twice: dict[str, Any]) -> None:
    env: Env = twice["env"]
    recorded = public_log()
    ((row),) = [
        r
        for r in env.query(
            "select deployment_id, model, gpu, engine_version, prediction_status, measured_kv_pool_bytes, "
            "predicted_kv_pool_bytes, kv_pool_error, measured_kv_cache_tokens, predicted_kv_cache_tokens, "
            "kv_cache_tokens_error, measured_max_concurrency, predicted_max_concurrency, measured_weights_bytes, "
            "predicted_weights_bytes, telemetry_source from marts.prediction_vs_measured"
        )
        if r[0] == "codellama-h100"
    ]
    (_id, model, gpu, version, status, kv_m, kv_p, kv_err, tok_m, tok_p, tok_err, conc_m, conc_p, w_m, w_p, source) = (
        row
    )
    assert (model, gpu, version, status, source) == ("codellama/CodeLlama-7b-hf", "h100-sxm-80gb", "0.19.0", "predicted",
                                                      "drop_folder")  # fmt: skip
    # the engine's numbers, as the log printed them
    assert abs(kv_m / GIB - recorded["kv_cache_memory_gib"]) < 0.006
    assert tok_m == recorded["kv_cache_tokens"] == 126_256
    assert conc_m == recorded["max_concurrency"] == 15.41
    assert abs(w_m / GIB - recorded["weights_gib"]) < 0.006
    # capplan's, next to them, with their errors
    assert kv_p > 0 and tok_p > 0 and conc_p > 0 and w_p > 0
    assert kv_err == pytest.approx((kv_p - kv_m) / kv_m) and abs(kv_err) < 0.03
    assert tok_err == pytest.approx((tok_p - tok_m) / tok_m) and abs(tok_err) < 0.03


def test_malformed_telemetry_is_rejected_row_by_row_and_reconciles(twice: dict[str, Any]) -> None:
    env: Env = twice["env"]
    rejects = env.query("select file, line, reason_code from marts.telemetry_rejects order by file, line")
    codes = {(file, code) for file, _line, code in rejects}
    assert ("codellama-h100/vllm-metrics.prom", "negative") in codes
    assert ("codellama-h100/vllm-metrics.prom", "wrong_unit") in codes  # 55.0 where vLLM reports a fraction
    assert ("codellama-h100/vllm-metrics.prom", "malformed") in codes  # the truncated line
    assert ("codellama-h100/vllm-metrics.prom", "duplicate") in codes  # the same series and time again
    assert ("notes.xlsx", "unknown_file_type") in codes
    unknown = [line for file, line, code in rejects if file == "acme-13b/startup.log"]
    assert len(unknown) == 3 and {c for f, _l, c in rejects if f == "acme-13b/startup.log"} == {"unknown_model"}
    (rows_in, accepted, rejected, files_ok) = env.query(
        "select sum(rows_in), sum(accepted), sum(rejected), bool_and(reconciles) from marts.telemetry_files"
    )[0]
    assert rows_in == accepted + rejected and rejected == len(rejects) and files_ok
    assert checks_of(twice["results"][0])["telemetry_reconciles"] is True


def test_every_mart_is_filled_and_a_rerun_replaces_it(twice: dict[str, Any]) -> None:
    first, second = twice["snapshots"]
    assert first == second, "the second run gives the same marts"
    for table in MARTS:
        assert first[table], f"marts.{table} is empty"
    env: Env = twice["env"]
    runs = env.query("select run_id from marts.runs order by started_at")
    assert [r[0] for r in runs] == [r.run_id for r in twice["results"]]
    for table in MARTS:
        counts = env.query(f"select count(distinct run_id), count(*) from marts.{table}_history")[0]
        assert counts == (2, 2 * len(first[table])), table
    assert not Warehouse(env.warehouse).builds()


def test_limits_budgets_and_placements_for_the_observed_fleet(twice: dict[str, Any]) -> None:
    env: Env = twice["env"]
    limits = env.query(
        "select kind, concurrency, model_limit, memory_limit, calibrated_limit, effective_limit, binding, calibrated "
        "from marts.effective_context_limits where deployment_id = 'codellama-h100' order by concurrency"
    )
    assert [r[1] for r in limits] == [1, 8, 32, 128, 512]
    for _kind, _b, model_limit, memory, calibrated_limit, effective, binding, calibrated in limits:
        assert effective == min(v for v in (model_limit, memory, calibrated_limit) if v is not None)
        assert binding in ("model", "memory") and not calibrated, "one deployment: nothing to calibrate on"
    assert limits[0][2] == 8192 and limits[0][6] == "model"  # one sequence of 8,192 tokens: the model limit binds
    grid = env.query(
        "select count(*), count(distinct model) from marts.effective_context_limits where kind = 'model_gpu_tp'"
    )
    assert grid == [(grid[0][0], 2)] and grid[0][0] > 0
    (budget,) = env.query(
        "select capacity_source, kv_capacity_tokens, token_budget, sequence_budget, max_request_tokens, over_capacity "
        "from marts.admission_budgets where deployment_id = 'codellama-h100'"
    )
    assert budget[0] == "measured" and budget[2] == int(budget[1] * 0.9) and budget[4] == 8192 and not budget[5]
    placed = env.query(
        "select workload, rank, gpu, usd_per_hour, in_fleet_plan from marts.recommended_placements "
        "where feasible and rank = 1 order by workload"
    )
    assert [r[0] for r in placed] == ["chat", "code"] and all(r[3] > 0 for r in placed)
    plan = env.query("select sum(gpus_bought), any_value(method), any_value(optimal) from marts.procurement_plan")
    # optimal with HiGHS (the `solver` extra); without it each request-size bucket takes its cheapest
    # layout and the plan says it is not optimal
    solver = importlib.util.find_spec("highspy") is not None
    assert plan[0][0] > 0 and plan[0][2] is solver


def _header_columns(sql: str) -> list[str]:
    """The names after `columns:` in a SQL file's header comment, up to the next `key:` line."""
    lines = header_comment(sql).split("columns:", 1)[1].splitlines()
    taken = [lines[0]]
    for line in lines[1:]:
        if re.match(r"^[a-z][a-z _]*:", line.strip()):
            break
        taken.append(line)
    return [word for word in re.split(r"[,\s]+", " ".join(taken)) if word]


def test_every_relation_is_documented_and_lists_its_columns(twice: dict[str, Any]) -> None:
    from pipelines.definitions import build_definitions

    defs = build_definitions()

    env: Env = twice["env"]
    graph = defs.resolve_asset_graph()
    ours = sorted(
        (k.path[0], k.path[1])
        for k in graph.get_all_asset_keys()
        if graph.get(k).group_name in ("telemetry", "recommendations")
    )
    # a history kept in place is an asset of its own (a view); the others are tables publish keeps;
    # release_diff compares releases within one run (no run_id, no history); packed_placements is empty for
    # these workloads (no two of them share one GPU for less; tests/test_feature_kv_budget.py fills the same
    # frame through capplan procure)
    marts = {t for layer, t in ours if layer == "marts"}
    assert marts == set(MARTS) | {
        "effective_context_limits_history",
        "release_diff",
        "packed_placements",
        "feature_value",
        "prefix_cache_hit_rates",
    }
    con = duckdb.connect(str(env.warehouse), read_only=True)
    try:
        for layer, table in ours:
            sql = sql_path(layer, table).read_text(encoding="utf-8")
            names = [name for name, _type, _comment in columns(con, layer, table)]
            assert names and _header_columns(sql) == names, f"{layer}.{table}: header columns differ"
            if layer == "marts":
                for relation in (table, f"{table}_history"):
                    missing = [n for n, _t, comment in columns(con, "marts", relation) if not comment]
                    assert not missing, f"marts.{relation}: no COMMENT ON for {missing}"
    finally:
        con.close()


# --- sensor and checks as plain functions ------------------------------------------------------------


def sense(planning: PlanningResource, cursor: str | None) -> dg.SensorResult:
    from pipelines.assets.telemetry import telemetry_sensor

    result = telemetry_sensor(dg.build_sensor_context(cursor=cursor, resources={"planning": planning}))
    assert isinstance(result, dg.SensorResult)
    return result


def test_the_sensor_runs_when_the_drop_folder_changes(tmp_path: Path) -> None:
    drop = write_drop_folder(tmp_path)
    planning = PlanningResource(telemetry_dir=str(drop))
    first = sense(planning, None)
    assert len(first.run_requests or []) == 1
    request = (first.run_requests or [])[0]
    assert request.tags["capplan/files_added"] == "5" and request.run_key and request.run_key.startswith("telemetry-")
    assert json.loads(first.cursor or "{}") == fingerprint(drop)
    same = sense(planning, first.cursor)
    assert not same.run_requests and same.skip_reason is not None
    (drop / "codellama-h100" / "startup.log").write_text(public_log()["log_excerpt"] + "\n# again\n", encoding="utf-8")
    changed = sense(planning, first.cursor)
    (again,) = changed.run_requests or []
    assert again.tags["capplan/files_changed"] == "1" and again.run_key != request.run_key
    empty = PlanningResource(telemetry_dir=str(tmp_path / "nothing-here"))
    idle = sense(empty, None)
    assert not idle.run_requests and "no telemetry files" in str(idle.skip_reason)


def test_without_a_drop_folder_the_sample_fleet_is_ingested(tmp_path: Path) -> None:
    folder = resolve_drop_folder(None, default=tmp_path / "var" / "telemetry")
    assert folder.source == SAMPLE and folder.path == SAMPLE_DIR and "SAMPLE" in folder.describe()
    (tmp_path / "var" / "telemetry").mkdir(parents=True)
    assert resolve_drop_folder(None, default=tmp_path / "var" / "telemetry").source == SAMPLE, "empty: still the sample"
    (tmp_path / "var" / "telemetry" / "x.log").write_text("vLLM", encoding="utf-8")
    found = resolve_drop_folder(None, default=tmp_path / "var" / "telemetry")
    assert (found.source, found.configured) == ("drop_folder", False)
    assert resolve_drop_folder(str(SAMPLE_DIR)).source == SAMPLE


def test_the_drift_check_warns_past_its_threshold(twice: dict[str, Any]) -> None:
    from pipelines.assets.telemetry import prediction_drift

    env: Env = twice["env"]
    warehouse = WarehouseResource(path=str(env.warehouse))
    calm = prediction_drift(planning=PlanningResource(drift_threshold_pct=50), warehouse=warehouse)
    strict = prediction_drift(planning=PlanningResource(drift_threshold_pct=0), warehouse=warehouse)
    assert isinstance(calm, dg.AssetCheckResult) and isinstance(strict, dg.AssetCheckResult)
    assert calm.passed and calm.severity == dg.AssetCheckSeverity.WARN
    assert not strict.passed and "codellama-h100" in str(strict.metadata["deployments"].value)


def test_drift_check_reports_no_calibrated_error_as_null_not_zero(twice: dict[str, Any]) -> None:
    """One deployment: nothing was calibrated, so the calibrated median is null (0 would claim a perfect fit)."""
    (evaluation,) = [
        e.event_specific_data
        for e in twice["results"][0].all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION" and e.event_specific_data.check_name == "prediction_drift"
    ]
    metadata = evaluation.metadata  # type: ignore[union-attr]
    assert isinstance(metadata["median_abs_kv_pool_error_calibrated_pct"], dg.NullMetadataValue)
    assert isinstance(metadata["median_abs_kv_pool_error_pct"], dg.FloatMetadataValue)
