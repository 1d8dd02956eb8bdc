"""recommendations: predictions for observed deployments, the calibration frames, limits,
admission budgets, workload profiles and placements — pure functions over frames, checked on the
shipped SAMPLE fleet and on hand-built rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from capacity import engine_constants as ec
from capacity.calibration import CalibrationFit, calibrated_pool, fit_calibration, pool_numbers
from capacity.estimate import AUTO_MAX_MODEL_LEN, estimate
from capacity.grid import TARGET_CONCURRENCIES, grid_contexts
from capacity.parallel import valid_tp_sizes
from capacity.pool import b_max
from capacity.spec import DeploymentSpec, SpecError
from models_registry.planning import Catalog, bundled_catalog
from recommendations.admission import ADMISSION_SCHEMA, budget_row
from recommendations.limits import (
    LIMIT_SCHEMA,
    deployment_limits,
    grid_limits,
    grid_weight_dtype,
    with_effective,
)
from recommendations.placements import PLACEMENT_SCHEMA, placement_frames
from recommendations.workloads import load_workloads, parse_workloads
from telemetry import SAMPLE_DIR, deployment_summary, ingest_dir
from telemetry.calibration_frames import fit_frames, fit_from_frame, observations
from telemetry.predictions import PREDICTION_SCHEMA, predict_deployments

GIB = 1 << 30
PROJECT_ROOT = Path(__file__).resolve().parent.parent
NO_CALIBRATION = fit_calibration([])


@pytest.fixture(scope="module")
def fleet() -> dict[str, Any]:
    """The SAMPLE fleet ingested against the bundled catalog, predicted and calibrated."""
    catalog = bundled_catalog()
    result = ingest_dir(SAMPLE_DIR, model_ids=catalog.model_ids(), gpu_skus=list(catalog.gpus.values()))
    deployments = deployment_summary(result.observations.lazy(), result.samples.lazy()).collect()
    predictions = predict_deployments(deployments, catalog)
    calibration, per_deployment = fit_frames(deployments, predictions, catalog, min_observations=3)
    return {
        "catalog": catalog,
        "result": result,
        "deployments": deployments,
        "predictions": predictions,
        "calibration": calibration,
        "per_deployment": per_deployment,
    }


def _by_id(frame: pl.DataFrame) -> dict[str, dict[str, Any]]:
    return {row["deployment_id"]: row for row in frame.iter_rows(named=True)}


# --- predictions -----------------------------------------------------------------------------------


def test_every_observed_deployment_is_predicted_or_says_why(fleet: dict[str, Any]) -> None:
    predictions: pl.DataFrame = fleet["predictions"]
    assert predictions.schema == pl.Schema(PREDICTION_SCHEMA)
    assert sorted(predictions["deployment_id"]) == sorted(fleet["deployments"]["deployment_id"])
    skipped = predictions.filter(pl.col("prediction_status") == "skipped")
    assert skipped["prediction_reason"].null_count() == 0
    assert predictions.filter(pl.col("prediction_status") == "predicted").height >= 24


def test_predictions_sit_next_to_the_engine_numbers(fleet: dict[str, Any]) -> None:
    rows = _by_id(fleet["predictions"])
    deployments = _by_id(fleet["deployments"])
    h100 = rows["chat-llama8b-h100"]
    assert (h100["engine_version"], h100["gpu"], h100["weight_dtype"], h100["kv_dtype"]) == (
        "0.11.0",
        "h100-sxm-80gb",
        "auto",
        "auto",
    )
    assert h100["measured_kv_pool_source"] == "log"
    assert h100["measured_kv_pool_bytes"] == deployments["chat-llama8b-h100"]["kv_cache_memory_bytes"]
    assert abs(h100["predicted_kv_pool_bytes"] / h100["measured_kv_pool_bytes"] - 1) < 0.02
    # the engine's block count in capplan's pool terms: 26,366 blocks of 16 tokens, one group, and a
    # 32,768-token sequence takes 2,048 blocks: 12 such sequences, 421,856 tokens
    assert deployments["chat-llama8b-h100"]["num_gpu_blocks"] == 26_366
    assert (h100["measured_b_max"], h100["measured_kv_capacity_tokens"]) == (12, 26_366 * 16)
    # a V0 log printed only "# GPU blocks": the pool in bytes comes from the predicted block size
    v0 = rows["qwen7b-a100-v0"]
    assert v0["measured_kv_pool_source"] == "blocks"
    assert v0["measured_kv_pool_bytes"] == deployments["qwen7b-a100-v0"]["num_gpu_blocks"] * v0["kv_block_bytes"]


# --- calibration -----------------------------------------------------------------------------------


def test_calibration_rows_and_usable_scopes(fleet: dict[str, Any]) -> None:
    calibration: pl.DataFrame = fleet["calibration"]
    usable = calibration.filter(pl.col("usable"))
    assert usable.height > 0
    assert (usable["scope_observations"] >= 3).all()
    assert set(calibration["term"]) == {
        "weights", "activation_peak", "non_torch", "kv_pool", "kv_pool_calibrated", "tpot", "ttft", "output_throughput"
    }  # fmt: skip
    assert (calibration["ci_low"] <= calibration["median"]).all() and (
        calibration["median"] <= calibration["ci_high"]
    ).all()
    v0 = calibration.filter(pl.col("engine_profile") == "v0")
    assert not v0["usable"].any(), "two V0 deployments are not enough to calibrate V0"


def test_the_fit_survives_the_warehouse_round_trip(fleet: dict[str, Any]) -> None:
    catalog: Catalog = fleet["catalog"]
    fit = fit_calibration(observations(fleet["deployments"], fleet["predictions"]), min_observations=3)
    rebuilt = fit_from_frame(fleet["calibration"])
    assert rebuilt.min_observations == 3
    assert set(rebuilt.corrections) == set(fit.corrections)
    for key, correction in fit.corrections.items():
        again = rebuilt.corrections[key]
        assert again.n_observations == correction.n_observations
        assert again.activation_ratio == pytest.approx(correction.activation_ratio)
        assert again.non_torch_delta_bytes == pytest.approx(correction.non_torch_delta_bytes)
    for row in fleet["predictions"].filter(pl.col("prediction_status") == "predicted").iter_rows(named=True):
        family = catalog.models[row["model_id"]].spec.family
        a = fit.lookup("vllm", row["engine_version"], row["gpu"], family)
        b = rebuilt.lookup("vllm", row["engine_version"], row["gpu"], family)
        assert (a.scope if a else None) == (b.scope if b else None)


def test_calibrated_deployments_say_so(fleet: dict[str, Any]) -> None:
    per: dict[str, dict[str, Any]] = _by_id(fleet["per_deployment"])
    assert per["qwen7b-a100-v0"]["calibrated"] is False and per["qwen7b-a100-v0"]["n_observations"] == 0
    h100 = per["chat-llama8b-h100"]
    assert h100["calibrated"] and h100["n_observations"] >= 3 and h100["calibration_scope"].startswith("engine_")
    assert h100["calibrated_b_max"] >= 1 and h100["calibrated_kv_capacity_tokens"] > 0
    # leave-one-out: the honest calibrated pool, from a fit without the deployment
    assert h100["loo_kv_pool_bytes"] is not None and h100["loo_calibration_scope"] is not None


# --- limits ----------------------------------------------------------------------------------------


def effective(
    model_limit: int, memory_limit: int, calibrated_limit: int | None, *, weights_fit: bool = True
) -> tuple[int, str]:
    """`with_effective` on one row: (effective limit, what binds)."""
    row = pl.DataFrame(
        {"model_limit": [model_limit], "memory_limit": [memory_limit], "calibrated_limit": [calibrated_limit],
         "_weights_fit": [weights_fit]},
        schema={"model_limit": pl.Int64, "memory_limit": pl.Int64, "calibrated_limit": pl.Int64,
                "_weights_fit": pl.Boolean},
    )  # fmt: skip
    value, binding = with_effective(row).select("effective_limit", "binding").row(0)
    return int(value), str(binding)


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ((32768, 4096, None), (4096, "memory")),
        ((8192, 8192, 9000), (8192, "model")),
        ((8192, 6000, 5000), (5000, "calibrated")),
        ((8192, 5000, 5000), (5000, "calibrated")),
        ((4096, 5000, 4096), (4096, "model")),
        ((8192, 0, 0), (0, "calibrated")),  # weights fit, the calibrated pool holds nothing
    ],
)
def test_effective_limit_and_what_binds(limits: tuple[int, int, int | None], expected: tuple[int, str]) -> None:
    assert effective(*limits) == expected


def test_weights_that_do_not_fit_bind_not_the_calibration() -> None:
    assert effective(8192, 0, 0, weights_fit=False) == (0, "weights")
    catalog = bundled_catalog(["meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"], ["l4-24gb"])
    rows = grid_limits(catalog, NO_CALIBRATION, tp_sizes=(1,), pp_sizes=())
    by_model = {m: set(rows.filter(pl.col("model") == m)["binding"]) for m in rows["model"].unique()}
    assert by_model["meta-llama/Llama-3.1-70B-Instruct"] == {"weights"}  # 141 GB of weights on one 24 GB L4
    assert "weights" not in by_model["meta-llama/Llama-3.1-8B-Instruct"]
    assert set(rows["weight_dtype"]) == {"bf16"}, "a bf16 checkpoint served as published is the grid's bf16"


def _scalar_grid_limits(catalog: Catalog, fit: CalibrationFit) -> list[dict[str, Any]]:
    """The model_gpu_tp rows the scalar engine gives: `estimate.estimate` per layout at vLLM's auto-fit
    max_model_len (TP at most the node; PP 2/4 at the node's TP only where PP = 1 there holds no
    sequence of the smallest grid context), `pool_numbers` on the predicted pool and on the pool at
    the calibrated budget, and the smallest limit by hand (ties: model, calibrated, memory)."""
    rows = []
    for model_id in sorted(catalog.models):
        grid_model = catalog.models[model_id]
        spec = grid_model.spec
        smallest = grid_contexts(spec.context_limit_tokens)[0]
        for gpu_id in sorted(catalog.gpus):
            gpu = catalog.gpus[gpu_id]
            correction = fit.lookup("vllm", ec.VLLM_DEFAULT_VERSION, gpu.id, spec.family)
            tps = [tp for tp in valid_tp_sizes(spec, (1, 2, 4, 8)) if tp <= gpu.gpus_per_node]
            layouts = [(tp, 1) for tp in tps] + ([(max(tps), pp) for pp in (2, 4) if pp <= spec.num_layers] if tps else [])
            node_fits = True
            for tp, pp in layouts:
                if pp > 1 and node_fits:
                    break
                deployment = DeploymentSpec(tp=tp, pp=pp, weight_dtype=grid_weight_dtype(spec), kv_dtype="auto",
                                            max_model_len=AUTO_MAX_MODEL_LEN)  # fmt: skip
                try:
                    est = estimate(spec, deployment, gpu=gpu, model_name=model_id,
                                   checkpoint_bytes=grid_model.checkpoint_bytes)  # fmt: skip
                except SpecError:
                    continue
                if (tp, pp) == (max(tps), 1):
                    node_fits = est.starts and est.max_model_len >= smallest and b_max(est.pool, smallest) >= 1
                length = est.max_model_len
                numbers = {"pred": pool_numbers(est.pool, context=length, max_model_len=length,
                                                max_num_seqs=est.max_num_seqs, concurrencies=TARGET_CONCURRENCIES)}  # fmt: skip
                if correction is not None:
                    numbers["cal"] = pool_numbers(calibrated_pool(est, correction), context=length,
                                                  max_model_len=length, max_num_seqs=est.max_num_seqs,
                                                  concurrencies=TARGET_CONCURRENCIES)  # fmt: skip
                for b in TARGET_CONCURRENCIES:
                    memory = numbers["pred"].max_context[b]
                    calibrated = numbers["cal"].max_context[b] if "cal" in numbers else None
                    candidates = [("model", spec.context_limit_tokens), ("calibrated", calibrated), ("memory", memory)]
                    value = min(v for _, v in candidates if v is not None)
                    binding = next(name for name, v in candidates if v == value)
                    if est.weights_bytes_per_gpu > est.usable_bytes_per_gpu:
                        value, binding = 0, "weights"
                    rows.append({"model": model_id, "gpu": gpu_id, "tp": tp, "pp": pp, "concurrency": b,
                                 "max_model_len": length, "memory_limit": memory, "calibrated_limit": calibrated,
                                 "effective_limit": value, "binding": binding})  # fmt: skip
    return rows


def test_grid_limits_equal_the_scalar_estimate(fleet: dict[str, Any]) -> None:
    """The fleet-wide limits are computed on the grid's frames, every row at once; the scalar engine,
    one estimate per layout, is the oracle: dense, sliding-window, hybrid Mamba, MLA, MXFP4 (per-GPU
    expert layouts) and AWQ models, PP > 1 where one node is not enough, with the fleet's calibration."""
    ids = ["meta-llama/Llama-3.1-8B-Instruct", "google/gemma-2-9b-it", "meta-llama/Llama-3.1-70B-Instruct",
           "ai21labs/AI21-Jamba-1.5-Mini", "deepseek-ai/DeepSeek-V2-Lite-Chat", "openai/gpt-oss-20b",
           "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "meta-llama/Llama-3.1-405B-Instruct"]  # fmt: skip
    catalog = bundled_catalog(ids, ["l4-24gb", "a100-sxm-80gb", "h100-sxm-80gb", "b200-180gb", "rtx-4090-24gb"])
    fit = fit_from_frame(fleet["calibration"])
    ours = grid_limits(catalog, fit)
    assert ours.schema == pl.Schema(LIMIT_SCHEMA)
    expected = _scalar_grid_limits(catalog, fit)
    assert {r["calibrated_limit"] is not None for r in expected} == {True}, "the fleet's fit calibrates these rows"
    assert {(r["pp"] > 1) for r in expected} == {True, False}, "some rows need PP > 1"
    columns = list(expected[0])
    assert ours.select(columns).to_dicts() == expected
    assert (ours["calibrated_limit"] != ours["memory_limit"]).any(), "the correction moves some limits"
    uncalibrated = grid_limits(catalog, NO_CALIBRATION)
    assert not uncalibrated["calibrated"].any() and uncalibrated["calibrated_limit"].null_count() == uncalibrated.height
    assert uncalibrated["memory_limit"].equals(ours["memory_limit"])


def test_calibrated_limits_per_deployment(fleet: dict[str, Any]) -> None:
    fit = fit_from_frame(fleet["calibration"])
    limits = deployment_limits(fleet["deployments"], fleet["catalog"], fit)
    rows = {(r["deployment_id"], r["concurrency"]): r for r in limits.iter_rows(named=True)}
    l4 = rows[("chat-llama8b-l4", 8)]
    assert l4["model_limit"] == 8192 and l4["memory_limit"] < 8192
    assert l4["calibrated"] and l4["calibrated_limit"] is not None
    assert l4["effective_limit"] == min(l4["memory_limit"], l4["calibrated_limit"])
    assert l4["measured_limit"] is not None
    v0 = rows[("qwen7b-a100-v0", 1)]
    assert not v0["calibrated"] and v0["calibrated_limit"] is None and v0["binding"] in ("model", "memory")


# --- admission -------------------------------------------------------------------------------------


def _prediction(**overrides: Any) -> dict[str, Any]:
    row = {name: None for name in PREDICTION_SCHEMA} | {
        "deployment_id": "d",
        "model_id": "m",
        "gpu": "g",
        "tp": 1,
        "pp": 1,
        "engine": "vllm",
        "engine_version": "0.11.0",
        "max_model_len": 8192,
        "max_num_seqs": 256,
        "predicted_kv_capacity_tokens": 96_000,
        "predicted_b_max": 11,
    }
    return row | overrides


def test_budgets_from_the_engine_pool_and_the_observed_sequences() -> None:
    deployment = {"deployment_id": "d", "peak_kv_usage": 0.5, "peak_requests_running": 10.0}
    prediction = _prediction(measured_kv_capacity_tokens=100_000, measured_b_max=12)
    row = budget_row(deployment, prediction, None, 8192)
    assert set(row) == set(ADMISSION_SCHEMA)
    assert (row["capacity_source"], row["kv_capacity_tokens"], row["token_budget"]) == ("measured", 100_000, 90_000)
    assert row["sequence_budget_at_max_len"] == 10  # floor(12 x 0.9)
    # 50 % of 100,000 tokens over 10 sequences = 5,000 tokens each -> 90,000 / 5,000 = 18
    assert (row["peak_kv_tokens"], row["tokens_per_sequence"], row["sequence_budget"]) == (50_000, 5_000, 18)
    assert not row["over_budget"] and not row["over_capacity"] and row["status_reason"] is None


def test_a_saturated_deployment_is_over_capacity() -> None:
    deployment = {
        "deployment_id": "d",
        "peak_kv_usage": 0.995,
        "peak_requests_running": 40.0,
        "peak_requests_waiting": 7.0,
        "preemptions_in_window": 3.0,
    }
    row = budget_row(deployment, _prediction(measured_kv_capacity_tokens=40_000, measured_b_max=4), None, 8192)
    assert row["over_capacity"] and row["over_budget"]
    assert "3 preemption(s)" in row["status_reason"] and "requests queued (7)" in row["status_reason"]


def test_without_a_measurement_the_calibrated_then_the_predicted_pool() -> None:
    calibration = {"calibrated": True, "calibrated_kv_capacity_tokens": 80_000, "calibrated_b_max": 9,
                   "calibration_scope": "engine_version(...)", "n_observations": 4}  # fmt: skip
    row = budget_row({"deployment_id": "d"}, _prediction(max_num_seqs=5), calibration, 8192, "chat")
    assert (row["capacity_source"], row["kv_capacity_tokens"], row["token_budget"]) == ("calibrated", 80_000, 72_000)
    assert (row["tokens_per_sequence_source"], row["sequence_budget"]) == (
        "max_model_len",
        5,
    )  # 72,000 / 8,192 = 8, capped
    assert row["calibrated"] and row["n_observations"] == 4 and row["served_model_name"] == "chat"
    plain = budget_row({"deployment_id": "d"}, _prediction(), None, None)
    assert (plain["capacity_source"], plain["token_budget"], plain["max_request_tokens"]) == ("predicted", 86_400, 8192)


# --- workloads and placements ----------------------------------------------------------------------


def test_the_shipped_workloads_parse_and_name_catalog_models() -> None:
    workloads = load_workloads(PROJECT_ROOT / "workloads.yaml")
    assert workloads.errors == ()
    names = [p.name for p in workloads.profiles]
    assert {"chat", "rag-long-context", "batch-summarization", "code-assistant"} <= set(names)
    chat = next(p for p in workloads.profiles if p.name == "chat")
    assert (chat.context_tokens, chat.context_source, chat.model_len) == (
        6144,
        "p95 of the context distribution",
        16384,
    )
    catalog_ids = set(bundled_catalog([m for p in workloads.profiles for m in p.models]).models)
    assert {m for p in workloads.profiles for m in p.models} <= catalog_ids
    assert workloads.frame()["valid"].all()


def test_a_bad_workload_is_one_error_and_the_rest_is_read() -> None:
    document = yaml.safe_load(
        """
        defaults: {headroom: 0.8}
        workloads:
          - {name: ok, model: m, target_concurrency: 4, context_tokens: 1024}
          - {name: typo, model: m, target_concurency: 4, context_tokens: 1024}
          - {name: no-context, model: m, target_concurrency: 4}
          - {name: bad-policy, model: m, target_concurrency: 4, context_tokens: 10, dtype_policy: fp4}
          - {name: short, model: m, target_concurrency: 4, context_tokens: 4096, max_model_len: 1024}
          - {name: ok, model: m, target_concurrency: 1, context_tokens: 1}
          - not a mapping
        """
    )
    parsed = parse_workloads(document)
    assert [p.name for p in parsed.profiles] == ["ok"] and parsed.profiles[0].headroom == 0.8
    reasons = dict(parsed.errors)
    assert "target_concurency" in reasons["typo"]
    assert "no context" in reasons["no-context"]
    assert "unknown dtype_policy 'fp4'" in reasons["bad-policy"]
    assert "below context_tokens" in reasons["short"]
    assert "defined twice" in reasons["ok"]
    assert reasons["workloads[6]"] == "not a mapping"
    frame = parsed.frame()
    assert frame.height == 7 and frame.filter(~pl.col("valid")).height == 6
    assert load_workloads("/nonexistent/workloads.yaml").errors[0][1].startswith("no workloads file")


def test_placements_rank_and_the_fleet_plan_uses_them() -> None:
    document = {
        "procurement": {"whole_nodes": True},
        "workloads": [
            {"name": "chat", "models": ["meta-llama/Llama-3.1-8B-Instruct", "acme/unknown"], "target_concurrency": 64,
             "context_tokens": 4096, "dtype_policy": "fp8-kv"},
            {"name": "huge", "model": "meta-llama/Llama-3.1-70B-Instruct", "target_concurrency": 4,
             "context_tokens": 131072, "gpus": ["l4-24gb"], "max_gpus_per_replica": 1},
        ],
    }  # fmt: skip
    catalog = bundled_catalog(
        ["meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"], ["l4-24gb", "h100-sxm-80gb"]
    )
    placements, procurement, plan = placement_frames(parse_workloads(document), catalog, NO_CALIBRATION)
    assert placements.schema == pl.Schema(PLACEMENT_SCHEMA)
    chat = placements.filter((pl.col("workload") == "chat") & pl.col("feasible"))
    assert chat["rank"].to_list() == list(range(1, chat.height + 1))
    assert chat["usd_per_hour"].is_sorted()
    best = chat.row(0, named=True)
    assert best["planned_capacity"] >= 64 and best["usd_per_sequence_hour"] == pytest.approx(best["usd_per_hour"] / 64)
    assert best["planned_per_replica"] == int(best["b_max"] * 0.9)
    # the grid's weight_dtype label (the 8B is a plain bf16 checkpoint): a join on it with the grid matches
    assert set(chat["weight_dtype"]) <= {"bf16", "fp8", "int4"} and "auto" not in set(chat["weight_dtype"])
    infeasible = {r["model"]: r["reason"] for r in placements.filter(~pl.col("feasible")).iter_rows(named=True)}
    assert infeasible["acme/unknown"] == "acme/unknown is not in the registry"
    assert "no feasible placement" in infeasible["meta-llama/Llama-3.1-70B-Instruct"]
    assert placements.filter(pl.col("in_fleet_plan")).height == 1
    assert plan.method in ("highs", "enumeration") and plan.optimal
    assert procurement.height == 1 and procurement["fleet_usd_per_hour"][0] == pytest.approx(plan.usd_per_hour)
    assert procurement["gpus_bought"][0] % 8 == 0  # whole nodes
    assert len(procurement["unserved"][0]) == 2


def test_placements_use_the_calibration_where_it_applies(fleet: dict[str, Any]) -> None:
    fit: CalibrationFit = fit_from_frame(fleet["calibration"])
    document = {"workloads": [{"name": "chat", "model": "meta-llama/Llama-3.1-8B-Instruct", "target_concurrency": 32,
                               "context_tokens": 8192, "engine_version": "0.11.0", "gpus": ["h100-sxm-80gb"]}]}  # fmt: skip
    placements, _procurement, _plan = placement_frames(parse_workloads(document), fleet["catalog"], fit)
    best = placements.row(0, named=True)
    assert best["calibrated"] and best["n_observations"] >= 3 and "0.11" in best["calibration_scope"]
    assert abs(best["b_max"] - best["b_max_predicted"]) <= max(2, best["b_max_predicted"] // 20)


def test_an_empty_drop_folder_gives_empty_typed_frames(tmp_path: Path) -> None:
    from recommendations.admission import admission_budgets
    from recommendations.limits import effective_limits
    from telemetry.drop_folder import deployments_frame, ingest_frames, resolve_drop_folder

    catalog = bundled_catalog(["meta-llama/Llama-3.1-8B-Instruct"], ["l4-24gb"])
    (tmp_path / "empty").mkdir()
    frames = ingest_frames(resolve_drop_folder(tmp_path / "empty"), catalog)
    assert frames.files.is_empty() and frames.folder.source == "drop_folder"
    deployments = deployments_frame(frames.result.observations, frames.result.samples, frames.folder.source)
    predictions = predict_deployments(deployments, catalog)
    calibration, per_deployment = fit_frames(deployments, predictions, catalog, min_observations=3)
    assert predictions.is_empty() and calibration.is_empty() and per_deployment.is_empty()
    limits = effective_limits(deployments, catalog, fit_from_frame(calibration))
    assert limits.filter(pl.col("kind") == "deployment").is_empty()
    assert limits.filter(pl.col("kind") == "model_gpu_tp").height == 4 * 5  # TP 1, 2, 4, 8 x 5 concurrencies
    budgets = admission_budgets(deployments, predictions, per_deployment, limits, frames.result.observations)
    assert budgets.is_empty() and budgets.schema == pl.Schema(ADMISSION_SCHEMA)


def test_speed_predicted_at_the_observed_load(fleet: dict[str, Any]) -> None:
    """prediction_vs_measured's speed: capacity.performance at the rounded busy-time concurrency and
    the observed mean lengths (the SAMPLE's speed files are made 8 % slower than that model)."""
    from capacity.estimate import estimate
    from capacity.performance import performance

    rows = _by_id(fleet["predictions"])
    deployments = _by_id(fleet["deployments"])
    row, seen = rows["chat-llama8b-h100"], deployments["chat-llama8b-h100"]
    assert row["speed_concurrency"] == round(seen["observed_concurrency"]) >= 1
    assert row["speed_input_tokens"] == round(seen["observed_input_tokens"])
    assert row["speed_output_tokens"] == round(seen["observed_output_tokens"])
    catalog: Catalog = fleet["catalog"]
    model = catalog.models["meta-llama/Llama-3.1-8B-Instruct"]
    gpu = catalog.gpus["h100-sxm-80gb"]
    from capacity.calibration import observed_deployment
    from telemetry.predictions import settings_of

    deployment = observed_deployment(model.spec, settings_of(seen))
    est = estimate(
        model.spec, deployment, gpu=gpu, model_name="meta-llama/Llama-3.1-8B-Instruct", checkpoint_bytes=model.checkpoint_bytes,
        context_tokens=seen["max_concurrency_tokens"] or deployment.max_model_len,
    )  # fmt: skip
    perf = performance(
        model.spec, est, gpu, concurrency=row["speed_concurrency"], input_tokens=row["speed_input_tokens"],
        output_tokens=row["speed_output_tokens"], chunk_tokens=est.pool.max_num_batched_tokens,
        weight_dtype=deployment.weight_dtype,
    )  # fmt: skip
    assert (row["predicted_tpot_ms"], row["predicted_ttft_ms"]) == (perf.tpot_ms, perf.ttft_ms)
    assert row["predicted_output_tokens_per_second"] == perf.output_tokens_per_second  # one engine
    assert row["speed_reason"] is None
    assert seen["measured_tpot_mean_ms"] > row["predicted_tpot_ms"]  # the sample's engine decodes slower
    # deployments without speed telemetry carry no speed columns and no reason
    quiet = rows["qwen14b-l40s"]
    assert quiet["predicted_tpot_ms"] is None and quiet["speed_reason"] is None
    speed = fleet["calibration"].filter(pl.col("term") == "tpot")
    widest = speed.filter(pl.col("level") == "engine_profile", pl.col("usable"))
    # the speed deployments on the 0.11-0.16 era (gpt-oss-20b-l40s runs 0.33 in the sample: another era)
    assert widest.height == 1 and widest["n_observations"].to_list() == [4]
    assert 1.0 < widest["median"][0] < 1.3  # measured / predicted: 8 % slower per token, B rounded
