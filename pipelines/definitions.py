"""The one `Definitions` of capplan: `dg dev` / `dagster dev` (from the repository root) and `capplan nightly`.

Assets by domain (`pipelines/assets/`): registry sync and GPU catalog -> capacity grid -> marts,
then `marts/runs` publishes the snapshot atomically. One job, `nightly_job`, selects everything
(checks included). `capplan nightly` and the tests run it in-process (`execute_in_process`); a run
an instance launches (schedule, sensor, UI; PostgreSQL storage in production, see deploy/) runs
each step in its own process, one at a time, with the run's warehouse lock and build held by the
run worker and the publish step in the `warehouse` concurrency pool (`pipelines.executor`).

`defs` is lazy (`@dg.definitions`, what `dg` loads through `[tool.dg]` in pyproject.toml): the
schedule's cron and the resources' environment are read when the definitions are built, not when
this module is imported. Code outside Dagster calls `build_definitions()`.
"""

from __future__ import annotations

import os

import dagster as dg

from pipelines.assets import capacity, marts, recommendations, registry, releases, telemetry
from pipelines.executor import warehouse_multiprocess_executor
from pipelines.resources import build_resources

CRON_ENV = "CAPPLAN_NIGHTLY_CRON"
DEFAULT_CRON = "0 2 * * *"
TIMEZONE = "UTC"

_modules = (registry, capacity, marts, telemetry, recommendations, releases)
_assets: list[dg.AssetsDefinition] = [a for module in _modules for a in module.assets]
_mart_keys = [k for a in _assets for k in a.keys if k.path[0] == "marts"]
publish = marts.publish_asset(_mart_keys)

nightly_job = dg.define_asset_job(
    "nightly_job",
    selection=dg.AssetSelection.all(),
    description="Sync the registry, compute the capacity grid, build the marts and publish the warehouse.",
    executor_def=warehouse_multiprocess_executor,
)


def nightly_job_def() -> dg.JobDefinition:
    """`nightly_job` resolved against the definitions, for `dg.reconstructable` (what a run worker
    or a step process loads again by module and function name)."""
    return build_definitions().resolve_job_def("nightly_job")


def nightly_job_schedule() -> dg.ScheduleDefinition:
    """The nightly refresh at CAPPLAN_NIGHTLY_CRON (read now), UTC."""
    return dg.ScheduleDefinition(
        name="nightly_job_schedule",
        job=nightly_job,
        cron_schedule=os.environ.get(CRON_ENV) or DEFAULT_CRON,
        execution_timezone=TIMEZONE,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"The nightly refresh (cron from {CRON_ENV}, default '{DEFAULT_CRON}' {TIMEZONE}).",
    )


def build_definitions() -> dg.Definitions:
    """Every asset, check, job, schedule, sensor and resource, with the environment as it is now."""
    return dg.Definitions(
        assets=[*_assets, publish],
        asset_checks=[c for module in _modules for c in module.asset_checks],
        jobs=[nightly_job, *telemetry.jobs],
        schedules=[nightly_job_schedule()],
        sensors=telemetry.sensors,
        resources=build_resources(),
        executor=warehouse_multiprocess_executor,  # also for runs of an asset selection from the UI
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
