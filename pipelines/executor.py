"""The executor of `nightly_job` when a Dagster instance launches it: one process per step.

`capplan nightly` and the tests call `execute_in_process`, which always runs in one process. A run
launched through an instance (the schedule, the sensor, `dg dev`'s UI, `DefaultRunLauncher` on
one host, `K8sRunLauncher` on Kubernetes) uses the job's executor: this one, Dagster's multiprocess
executor with the warehouse's rules around it:

- The run's build is one DuckDB file, and DuckDB allows one writer process at a time. Every step
  reads or writes it, so steps run one at a time (`max_concurrent: 1`), each in its own process;
  the publish step is also in the `warehouse` concurrency pool (limit 1 in the instance config),
  so two runs never publish at once.
- The refresh lock (`warehouse.lock`) and the build belong to the run, not to a step: this process
  (the run worker) takes the lock and begins the build before the first step, and after the last
  step discards the build when it was not published. Steps see the lock held by their own run and
  write into its build (`WarehouseResource`).
- Steps start from a forkserver that has already imported the pipeline, not a fresh interpreter
  each (about 1.5 s of imports saved per step). The forkserver is started once per process, with
  that process's environment: a run worker (`dagster api execute_run`, a Kubernetes run pod) is one
  process per run; a process that runs several `execute_job`s with different CAPPLAN_* or
  DAGSTER_PG_* settings must stop it in between (tests/test_nightly_postgres.py does).

The warehouse path and lock wait are read from the environment the run worker sees
(CAPPLAN_WAREHOUSE, CAPPLAN_LOCK_WAIT_S, CAPPLAN_HISTORY_RUNS), as the resources read them.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from typing import Any

import dagster as dg
from dagster._core.definitions.executor_definition import (
    MULTI_PROC_CONFIG,
    _core_multiprocess_executor_creation,
    multiple_process_executor_requirements,
)
from dagster._core.events import DagsterEvent
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.retries import RetryMode
from dagster._core.execution.step_dependency_config import StepDependencyConfig
from dagster._core.executor.base import Executor

from warehouse.publish import DEFAULT_HISTORY_RUNS, Warehouse

WAREHOUSE_POOL = "warehouse"
STEP_PRELOAD = ["pipelines.definitions"]


def run_warehouse() -> Warehouse:
    """The warehouse a launched run writes: the same environment variables as the resources."""
    return Warehouse(
        os.environ.get("CAPPLAN_WAREHOUSE") or None,
        history_runs=int(os.environ.get("CAPPLAN_HISTORY_RUNS") or DEFAULT_HISTORY_RUNS),
    )


class WarehouseRunExecutor(Executor):
    """Dagster's multiprocess executor, with the run's warehouse lock and build held around it."""

    def __init__(self, inner: Executor) -> None:
        self._inner = inner

    @property
    def retries(self) -> RetryMode:
        return self._inner.retries

    @property
    def step_dependency_config(self) -> StepDependencyConfig:
        return self._inner.step_dependency_config

    def execute(self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
        run_id = plan_context.run_id
        store = run_warehouse()
        lock = store.lock(run_id, wait_s=float(os.environ.get("CAPPLAN_LOCK_WAIT_S") or 0))
        lock.acquire()  # WarehouseBusy fails the run before any step starts, naming the owner
        try:
            store.begin(run_id, dt.datetime.now(dt.UTC))
            yield from self._inner.execute(plan_context, execution_plan)
        finally:
            try:
                store.discard(run_id)  # published: the build was renamed away; else a failed run's
            finally:
                lock.release()


@dg.executor(
    name="warehouse_multiprocess",
    config_schema=MULTI_PROC_CONFIG,
    requirements=multiple_process_executor_requirements(),
)
def _warehouse_multiprocess(init_context: dg.InitExecutorContext) -> Executor:
    return WarehouseRunExecutor(_core_multiprocess_executor_creation(init_context.executor_config))


DEFAULT_CONFIG: dict[str, Any] = {
    "max_concurrent": 1,  # one DuckDB writer: the steps share the run's build file
    "start_method": {"forkserver": {"preload_modules": STEP_PRELOAD}},
}

warehouse_multiprocess_executor = _warehouse_multiprocess.configured(DEFAULT_CONFIG, name="warehouse_multiprocess")
