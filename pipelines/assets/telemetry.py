"""Telemetry: the drop folder ingested, every observed deployment predicted, the calibration fit.

Group `telemetry`. `telemetry_ingest` reads the drop folder (`CAPPLAN_TELEMETRY_DIR`, else
`var/telemetry` when it holds files, else the shipped SAMPLE fleet unless a Prometheus URL is set)
and, with `CAPPLAN_PROMETHEUS_URL`, the Prometheus API, into the four `raw.telemetry_*` tables, resolving names against the run's registry; `telemetry_predictions`
summarizes one row per deployment and predicts each with capplan; `calibration` fits the
corrections. The marts are views over staging (`warehouse/marts/*.sql`).

With `CAPPLAN_TELEMETRY_STORE` the ingest also appends the samples it read to the sample store
(Hive-partitioned Parquet by day, `telemetry/store.py`: new files only, a sample stored
once however often it is read), and `telemetry_predictions` takes the usage columns from DuckDB
over the store's last `CAPPLAN_TELEMETRY_WINDOW_DAYS` days instead of from this run's samples.

`telemetry_sensor` watches the drop folder (file paths and sha256 as its cursor) and starts
`telemetry_job` when anything in it changes: the telemetry group and what depends on it
(calibration, recommendations, their marts, the publish step), not the registry sync or the grid;
the run's build starts from the published warehouse, so the registry and grid it reads are the
last nightly's. Checks: the ingest reconciles (blocking), and a
deployment whose prediction is off by more than the drift threshold warns.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl

from models_registry.planning import Catalog, catalog
from pipelines.assets.common import REGISTRY_DEPS, key, raw_spec, relation_result, sql_asset, warning_result
from pipelines.executor import warehouse_multiprocess_executor
from pipelines.resources import PlanningResource, WarehouseResource
from telemetry import IngestResult, check_reconciliation
from telemetry.calibration_frames import fit_frames
from telemetry.drop_folder import deployments_frame, fingerprint, fingerprint_key, watched_folder
from telemetry.normalize import one_line
from telemetry.predictions import predict_deployments
from telemetry.prometheus_api import PrometheusSettings, ingest_sources
from telemetry.schema import FILE_SCHEMA, OBSERVATION_SCHEMA, REJECT_SCHEMA, SAMPLE_SCHEMA
from telemetry.store import StoreError, with_store_rejects
from warehouse.sql import load_frame

TELEMETRY_GROUP = "telemetry"
SENSOR_INTERVAL_S = 60


STORE_ERRORS = (StoreError, OSError, ValueError, duckdb.Error)


def store_failure(exc: Exception) -> dg.Failure:
    """A sample store that cannot be read or written fails the step with one line, no traceback."""
    return dg.Failure(description=f"telemetry store: {one_line(exc, 240)}", allow_retries=False)


def run_catalog(warehouse: WarehouseResource) -> Catalog:
    """The run's registry (raw.models, raw.gpus) as capacity-engine objects."""
    with warehouse.build() as con:
        return catalog(con.sql("select * from raw.models").pl(), con.sql("select * from raw.gpus").pl())


def _step_specs(table: str, with_registry: str, inputs: tuple[str, str]) -> list[dg.AssetSpec]:
    """A step's two tables from the same raw inputs; the second also reads the registry."""
    deps = [key("raw", name) for name in inputs]
    return [raw_spec(table, deps), raw_spec(with_registry, [*deps, *REGISTRY_DEPS])]


@dg.multi_asset(
    name="telemetry_ingest",
    specs=[
        raw_spec(table, REGISTRY_DEPS)
        for table in ("telemetry_observations", "telemetry_samples", "telemetry_rejects", "telemetry_files")
    ],
    group_name=TELEMETRY_GROUP,
)
def telemetry_ingest(
    context: dg.AssetExecutionContext, planning: PlanningResource, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult]:
    """Read the drop folder and, with CAPPLAN_PROMETHEUS_URL, the Prometheus API; every row is
    accepted or rejected with a reason."""
    frames = ingest_sources(planning.drop_folder(), planning.prometheus(), run_catalog(warehouse))
    result, stored = frames.result, {}
    try:
        store = planning.sample_store()
        if store is not None:
            appended = store.append(result.samples, batch=f"run {context.run.run_id}")
            result, stored = with_store_rejects(result, appended), appended.summary()
            context.log.info(
                f"sample store {store.display_url()}: {appended.written} samples written in {len(appended.files)} "
                f"new files, {appended.already_stored} already stored, {appended.rejected} rejected"
            )
            if (cleaned := appended.cleaned_line()) is not None:
                context.log.info(f"sample store {store.display_url()}: {cleaned}")
    except STORE_ERRORS as exc:
        raise store_failure(exc) from None
    summary = result.summary()
    context.log.info(
        f"telemetry from {' and '.join(frames.descriptions)}: {summary['files']} files, {summary['rows_in']} rows in, "
        f"{summary['accepted']} accepted, {summary['rejected']} rejected"
    )
    extra = {
        "drop_dir": ", ".join(str(d) for d in frames.files["drop_dir"].unique(maintain_order=True)),
        "telemetry_source": frames.source,
        **{name: dg.MetadataValue.int(value) for name, value in (summary | stored).items()},
    }
    with warehouse.build() as con:
        for table, frame in (
            ("telemetry_observations", result.observations),
            ("telemetry_samples", result.samples),
            ("telemetry_rejects", result.rejects),
            ("telemetry_files", frames.files),
        ):
            load_frame(con, "raw", table, frame)
            yield relation_result(con, "raw", table, extra if table == "telemetry_files" else None)


@dg.multi_asset(
    name="telemetry_predictions",
    specs=_step_specs(
        "telemetry_deployments", "telemetry_predictions", ("telemetry_observations", "telemetry_samples")
    ),
    group_name=TELEMETRY_GROUP,
)
def telemetry_predictions(
    context: dg.AssetExecutionContext, planning: PlanningResource, warehouse: WarehouseResource
) -> Iterator[dg.MaterializeResult]:
    """One row per observed deployment, and capplan's prediction for its settings."""
    registry = run_catalog(warehouse)
    with warehouse.build() as con:
        observations = con.sql("select * from raw.telemetry_observations").pl()
        samples = con.sql("select * from raw.telemetry_samples").pl()
        row = con.execute(
            "select string_agg(distinct telemetry_source, '+' order by telemetry_source) from raw.telemetry_files"
        ).fetchone()
        source = (row[0] if row else None) or planning.drop_folder().source
        try:
            store = planning.sample_store()
            usage = store.usage(planning.telemetry_window_days) if store is not None else None
        except STORE_ERRORS as exc:
            raise store_failure(exc) from None
        deployments = deployments_frame(observations, samples, source, usage)
        predictions = predict_deployments(deployments, registry)
        predicted = predictions.filter(pl.col("prediction_status") == "predicted").height
        context.log.info(f"{deployments.height} observed deployments, {predicted} predicted")
        load_frame(con, "raw", "telemetry_deployments", deployments)
        yield relation_result(con, "raw", "telemetry_deployments", {"telemetry_source": source})
        load_frame(con, "raw", "telemetry_predictions", predictions)
        yield relation_result(
            con, "raw", "telemetry_predictions", {"predicted": predicted, "skipped": predictions.height - predicted}
        )


@dg.multi_asset(
    name="calibration",
    specs=_step_specs("calibration", "deployment_calibration", ("telemetry_deployments", "telemetry_predictions")),
    group_name=TELEMETRY_GROUP,
)
def calibration(planning: PlanningResource, warehouse: WarehouseResource) -> Iterator[dg.MaterializeResult]:
    """Fit the corrections per scope; record, per deployment, which applies and its leave-one-out pool."""
    registry = run_catalog(warehouse)
    with warehouse.build() as con:
        deployments = con.sql("select * from raw.telemetry_deployments").pl()
        predictions = con.sql("select * from raw.telemetry_predictions").pl()
        fit, per_deployment = fit_frames(
            deployments, predictions, registry, min_observations=planning.calibration_min_observations
        )
        usable = fit.filter(pl.col("usable")).select("scope").unique().height
        load_frame(con, "raw", "calibration", fit)
        yield relation_result(
            con,
            "raw",
            "calibration",
            {"usable_scopes": usable, "min_observations": planning.calibration_min_observations},
        )
        load_frame(con, "raw", "deployment_calibration", per_deployment)
        calibrated = per_deployment.filter(pl.col("calibrated")).height
        yield relation_result(con, "raw", "deployment_calibration", {"calibrated_deployments": calibrated})


def _staging(table: str) -> dg.AssetsDefinition:
    return sql_asset("staging", table, group_name=TELEMETRY_GROUP)


def _mart(table: str) -> dg.AssetsDefinition:
    return sql_asset("marts", table, group_name=TELEMETRY_GROUP)


STAGING = [
    _staging(table)
    for table in (
        "telemetry_observations",
        "telemetry_samples",
        "telemetry_rejects",
        "telemetry_files",
        "telemetry_deployments",
        "telemetry_predictions",
        "calibration",
        "deployment_calibration",
    )
]
MARTS = [
    _mart("telemetry_observations"),
    _mart("telemetry_samples"),
    _mart("telemetry_rejects"),
    _mart("telemetry_files"),
    _mart("prediction_vs_measured"),
    _mart("calibration"),
    _mart("prefix_cache_hit_rates"),
]


# --- checks ------------------------------------------------------------------------------------------


def _typed(frame: pl.DataFrame, schema: dict[str, object]) -> pl.DataFrame:
    return frame.select([pl.col(name).cast(dtype) for name, dtype in schema.items()])  # type: ignore[arg-type]


@dg.asset_check(
    asset=key("raw", "telemetry_files"),
    blocking=True,
    additional_deps=[
        key("raw", "telemetry_observations"),
        key("raw", "telemetry_samples"),
        key("raw", "telemetry_rejects"),
    ],
    description="Every telemetry row read is accepted or rejected: per file rows_in = accepted + rejected, and "
    "the observations, samples and rejects written account for every count.",
)
def telemetry_reconciles(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    with warehouse.read() as con:
        result = IngestResult(
            observations=_typed(con.sql("select * from raw.telemetry_observations").pl(), OBSERVATION_SCHEMA),
            samples=_typed(con.sql("select * from raw.telemetry_samples").pl(), SAMPLE_SCHEMA),
            rejects=_typed(con.sql("select * from raw.telemetry_rejects").pl(), REJECT_SCHEMA),
            files=_typed(con.sql("select * from raw.telemetry_files").pl(), FILE_SCHEMA),
        )
    problems = check_reconciliation(result)
    summary = result.summary()
    return dg.AssetCheckResult(
        passed=not problems and summary["rows_in"] == summary["accepted"] + summary["rejected"],
        metadata={**summary, "problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems[:20]) or "none")},
    )


def drifting(con: object, threshold: float) -> list[dict[str, object]]:
    """Deployments whose KV pool, KV tokens or concurrency prediction is off by more than `threshold`."""
    rows = con.execute(  # type: ignore[attr-defined]
        """
        select deployment_id, model, gpu, engine_version, telemetry_source,
               kv_pool_error, kv_cache_tokens_error, max_concurrency_error, calibrated, loo_kv_pool_error
        from marts.prediction_vs_measured
        where prediction_status = 'predicted'
          and greatest(abs(coalesce(kv_pool_error, 0)), abs(coalesce(kv_cache_tokens_error, 0)),
                       abs(coalesce(max_concurrency_error, 0))) > $threshold
        order by greatest(abs(coalesce(kv_pool_error, 0)), abs(coalesce(kv_cache_tokens_error, 0)),
                          abs(coalesce(max_concurrency_error, 0))) desc, deployment_id
        """,
        {"threshold": threshold},
    ).pl()
    return rows.to_dicts()


@dg.asset_check(
    asset=key("marts", "prediction_vs_measured"),
    description="Warns when a deployment's KV pool, KV tokens or max concurrency prediction is off by more than "
    "CAPPLAN_DRIFT_THRESHOLD_PCT (default 10 %): capplan's model, or the fleet, drifted.",
)
def prediction_drift(planning: PlanningResource, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    with warehouse.read() as con:
        drifted = drifting(con, planning.drift_threshold)
        compared = con.execute(
            "select count(*), median(abs(kv_pool_error)), median(abs(loo_kv_pool_error)) "
            "from marts.prediction_vs_measured where kv_pool_error is not null"
        ).fetchone()
    n, median_error, median_loo = compared if compared else (0, None, None)
    lines = [
        f"- {d['deployment_id']} ({d['model']} on {d['gpu']}, vLLM {d['engine_version']}): KV pool "
        f"{_pct(d['kv_pool_error'])}, KV tokens {_pct(d['kv_cache_tokens_error'])}, "
        f"concurrency {_pct(d['max_concurrency_error'])}"
        for d in drifted[:20]
    ]
    worst = ", ".join(f"{d['deployment_id']} (KV pool {_pct(d['kv_pool_error'])})" for d in drifted[:3])
    return warning_result(
        (
            f"{len(drifted)} of {int(n or 0)} deployments off by more than {planning.drift_threshold_pct} %: {worst}"
            + (", ..." if len(drifted) > 3 else "")
            if drifted
            else None
        ),
        {
            "threshold_pct": planning.drift_threshold_pct,
            "deployments_compared": int(n or 0),
            "drifting": len(drifted),
            "median_abs_kv_pool_error_pct": _pct_metadata(median_error),
            # null, not 0, when no deployment had a leave-one-out calibration to compare
            "median_abs_kv_pool_error_calibrated_pct": _pct_metadata(median_loo),
            "deployments": dg.MetadataValue.md("\n".join(lines) or "none"),
        },
    )


def _pct_metadata(fraction: object) -> dg.MetadataValue:
    if fraction is None:
        return dg.MetadataValue.null()
    return dg.MetadataValue.float(round(100 * float(fraction), 3))  # type: ignore[arg-type]


def _pct(value: object) -> str:
    return "-" if value is None else f"{float(value):+.1%}"  # type: ignore[arg-type]


# --- sensor ------------------------------------------------------------------------------------------


telemetry_job = dg.define_asset_job(
    "telemetry_job",
    selection=dg.AssetSelection.groups(TELEMETRY_GROUP).downstream(),
    description="Telemetry only: ingest, predictions, calibration and what depends on them, then publish "
    "(the registry and the grid as the last nightly published them).",
    executor_def=warehouse_multiprocess_executor,
)


@dg.sensor(
    name="telemetry_sensor",
    job=telemetry_job,
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Starts telemetry_job when a file in the telemetry drop folder (CAPPLAN_TELEMETRY_DIR, default "
    "var/telemetry) is added, changed or removed. Cursor: every file's path and sha256.",
)
def telemetry_sensor(context: dg.SensorEvaluationContext, planning: PlanningResource) -> dg.SensorResult:
    folder = watched_folder(planning.telemetry_dir or None)
    current = fingerprint(folder)
    previous: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    if current == previous:
        reason = f"no change in {folder}" if current else _no_files(folder, planning.prometheus())
        return dg.SensorResult(skip_reason=dg.SkipReason(reason))
    added = sorted(set(current) - set(previous))
    changed = sorted(p for p in set(current) & set(previous) if current[p] != previous[p])
    removed = sorted(set(previous) - set(current))
    cursor = json.dumps(current, sort_keys=True)
    if not current:  # everything was removed: remember that, the next run ingests whatever is there then
        return dg.SensorResult(skip_reason=dg.SkipReason(f"{folder} is now empty"), cursor=cursor)
    request = dg.RunRequest(
        run_key=f"telemetry-{fingerprint_key(current)}",
        tags={
            "capplan/trigger": "telemetry_sensor",
            "capplan/telemetry_dir": str(folder),
            "capplan/files_added": str(len(added)),
            "capplan/files_changed": str(len(changed)),
            "capplan/files_removed": str(len(removed)),
        },
    )
    context.log.info(f"{folder}: {len(added)} added, {len(changed)} changed, {len(removed)} removed")
    return dg.SensorResult(run_requests=[request], cursor=cursor)


def _no_files(folder: Path, prometheus: PrometheusSettings | None) -> str:
    """Why the sensor has nothing to do with an empty drop folder: with the Prometheus API configured
    that is the normal state, and what refreshes its telemetry is a run, not a file."""
    if prometheus is None:
        return f"no telemetry files in {folder}"
    return (
        f"no telemetry files in {folder}, as expected with telemetry from Prometheus ({prometheus.display_url()}): "
        "this sensor watches files only; every nightly run queries Prometheus, and telemetry_job (launch it, "
        "or schedule it) refreshes the telemetry marts in between"
    )


assets = [telemetry_ingest, telemetry_predictions, calibration, *STAGING, *MARTS]
asset_checks = [telemetry_reconciles, prediction_drift]
sensors = [telemetry_sensor]
jobs = [telemetry_job]
