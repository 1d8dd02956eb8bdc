"""Typed resources of the pipeline, built in one place (`build_resources`).

Settings come from environment variables through `dg.EnvVar`, resolved when a run starts (listed,
with defaults, in `.env.example`). An unset variable is given its embedded default when the
definitions load, so `dagster dev` and `capplan nightly` work from a fresh clone with no
configuration, and the UI shows which variable each setting comes from.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
from pydantic import PrivateAttr

from models_registry import db
from models_registry.frames import catalog_root
from models_registry.sources.user_catalog import USER_CATALOG_ENV as USER_CATALOG_ENV
from telemetry.drop_folder import DropFolder, resolve_drop_folder
from telemetry.prometheus_api import (
    DEFAULT_BUDGET_S,
    DEFAULT_DEPLOYMENT_LABEL,
    DEFAULT_LOOKBACK_S,
    DEFAULT_MAX_POINTS,
    DEFAULT_STEP_S,
    PrometheusSettings,
)
from telemetry.store import DEFAULT_WINDOW_DAYS, STORE_ENV, SampleStore
from warehouse.lock import RunLock, WarehouseBusy, read_owner
from warehouse.publish import DEFAULT_HISTORY_RUNS, DEFAULT_PATH, PublishResult, Warehouse

WAREHOUSE_ENV = "CAPPLAN_WAREHOUSE"
HISTORY_RUNS_ENV = "CAPPLAN_HISTORY_RUNS"
LOCK_WAIT_ENV = "CAPPLAN_LOCK_WAIT_S"
REGISTRY_ENV = db.URL_ENV  # CAPPLAN_REGISTRY_URL
CATALOG_ENV = "CAPPLAN_CATALOG_DIR"
TELEMETRY_ENV = "CAPPLAN_TELEMETRY_DIR"
PROMETHEUS_URL_ENV = "CAPPLAN_PROMETHEUS_URL"
PROMETHEUS_LOOKBACK_ENV = "CAPPLAN_PROMETHEUS_LOOKBACK_S"
PROMETHEUS_STEP_ENV = "CAPPLAN_PROMETHEUS_STEP_S"
PROMETHEUS_TIMEOUT_ENV = "CAPPLAN_PROMETHEUS_TIMEOUT_S"
PROMETHEUS_MAX_POINTS_ENV = "CAPPLAN_PROMETHEUS_MAX_POINTS"
PROMETHEUS_BUDGET_ENV = "CAPPLAN_PROMETHEUS_BUDGET_S"
PROMETHEUS_LABEL_ENV = "CAPPLAN_PROMETHEUS_DEPLOYMENT_LABEL"
TELEMETRY_STORE_ENV = STORE_ENV  # CAPPLAN_TELEMETRY_STORE
TELEMETRY_WINDOW_ENV = "CAPPLAN_TELEMETRY_WINDOW_DAYS"
WORKLOADS_ENV = "CAPPLAN_WORKLOADS"
MIN_OBSERVATIONS_ENV = "CAPPLAN_CALIBRATION_MIN_OBSERVATIONS"
DRIFT_ENV = "CAPPLAN_DRIFT_THRESHOLD_PCT"
HEADROOM_ENV = "CAPPLAN_ADMISSION_HEADROOM_PCT"


CONNECT_RETRY_S = 30.0  # a step's process may still be closing the build when the next one starts


DUCKDB_MEMORY_ENV = "CAPPLAN_DUCKDB_MEMORY_LIMIT"
# DuckDB's own default is 80 % of the machine's memory, most of it kept as a cache of the blocks a
# run wrote; capped, a nightly at ten times the catalog stays within 1.5 GiB, spilling large joins
# to the run's staging area instead (benchmarks/nightly.py)
DEFAULT_DUCKDB_MEMORY_LIMIT = "1GB"
_MEMORY_SIZE = re.compile(r"\d+(\.\d+)?\s*(b|kb|mb|gb|tb|kib|mib|gib|tib)", re.IGNORECASE)


def duckdb_connect(
    path: Path, *, read_only: bool = False, memory_limit: str | None = None, spill_dir: Path | None = None
) -> duckdb.DuckDBPyConnection:
    """A connection to a DuckDB file, waiting while another process still holds its write lock
    (steps of a launched run take turns on the build, each in its own process); with DuckDB's
    memory capped at `memory_limit` (spilling to `spill_dir`) where given."""
    config: dict[str, str | bool | int | float | list[str]] = {}
    if memory_limit:
        if not _MEMORY_SIZE.fullmatch(memory_limit.strip()):
            raise ValueError(f"{DUCKDB_MEMORY_ENV}={memory_limit!r}: not a memory size (e.g. 1GB, 512MB, 2GiB)")
        config["memory_limit"] = memory_limit.strip()
    if spill_dir is not None and not read_only:
        spill_dir.parent.mkdir(parents=True, exist_ok=True)  # DuckDB creates the folder, not its parents
        config["temp_directory"] = str(spill_dir)
    deadline = time.monotonic() + CONNECT_RETRY_S
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def _utc(row: tuple[Any, ...] | None) -> dt.datetime:
    if row is None or not isinstance(row[0], dt.datetime):
        raise RuntimeError("the run's build has no raw.run row")
    value: dt.datetime = row[0]
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse. A run writes into its own build of the snapshot (taken under the
    refresh lock on first use) and `publish` swaps it in atomically; readers never wait."""

    path: str = DEFAULT_PATH
    history_runs: int = DEFAULT_HISTORY_RUNS
    lock_wait_s: int = 0  # seconds a run waits for another run's lock before it gives up
    duckdb_memory_limit: str = DEFAULT_DUCKDB_MEMORY_LIMIT  # DuckDB's memory_limit for the run's build

    _run_id: str | None = PrivateAttr(default=None)
    _lock: RunLock | None = PrivateAttr(default=None)
    _started_at: dt.datetime | None = PrivateAttr(default=None)
    _published: PublishResult | None = PrivateAttr(default=None)
    _con: duckdb.DuckDBPyConnection | None = PrivateAttr(default=None)
    _run_owns_build: bool = PrivateAttr(default=False)  # lock and build held by the run worker

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._run_id = context.run.run_id if context.run else None

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self._close()
        if self._lock is None or self._run_owns_build:
            return  # a step of a launched run: the run worker discards and releases (pipelines.executor)
        try:
            if self._published is None and self._run_id is not None:
                self.store().discard(self._run_id)
        finally:
            self._lock.release()
            self._lock = None

    def store(self) -> Warehouse:
        return Warehouse(self.path, history_runs=self.history_runs)

    @property
    def run_id(self) -> str:
        if self._run_id is None:
            raise RuntimeError("the warehouse resource is only writable inside a Dagster run")
        return self._run_id

    @property
    def started_at(self) -> dt.datetime:
        if self._started_at is None:
            raise RuntimeError("this run has not started a warehouse build")
        return self._started_at

    def _begin(self) -> None:
        if self._lock is not None:
            return
        store = self.store()
        if self._held_by_this_run(store):
            return
        lock = store.lock(self.run_id, wait_s=self.lock_wait_s)
        lock.acquire()
        try:
            self._started_at = dt.datetime.now(dt.UTC)
            store.begin(self.run_id, self._started_at)
        except BaseException:
            lock.release()
            raise
        self._lock = lock

    def _held_by_this_run(self, store: Warehouse) -> bool:
        """A step of a run launched with the multiprocess executor, in a process of its own: the
        run worker holds the refresh lock for this run and has begun its build; write into it."""
        lock = store.lock(self.run_id)
        try:
            lock.acquire()
        except WarehouseBusy:
            owner = read_owner(store.lock_path)
            if owner.run_id != self.run_id or not store.build_path(self.run_id).exists():
                return False  # another run's: wait for it as usual (or fail, naming it)
            self._lock = lock  # not acquired: released by the run worker
            self._run_owns_build = True
            con = duckdb_connect(store.build_path(self.run_id), read_only=True)
            try:
                self._started_at = _utc(con.execute("select started_at from raw.run").fetchone())
            finally:
                con.close()
            return True
        lock.release()
        return False

    def _close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    @contextmanager
    def build(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection to this run's build (started on first use, under the lock).

        One connection serves the whole run (no checkpoint between steps); `publish` closes it.
        """
        self._begin()
        if self._con is None:
            store = self.store()
            spill = store.stage_path(self.run_id) / "duckdb-spill"  # removed with the run's staged files
            self._con = duckdb_connect(
                store.build_path(self.run_id), memory_limit=self.duckdb_memory_limit, spill_dir=spill
            )
        yield self._con

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """This run's build if it has one (checks see what is about to be published), else the
        published snapshot, read-only."""
        if self._lock is None and self._run_id is not None:
            self._held_by_this_run(self.store())  # a step of a launched run reads the run's build
        if self._lock is not None:
            with self.build() as con:
                yield con
            return
        con = self.store().connect_read_only()
        try:
            yield con
        finally:
            con.close()

    def stage_dir(self) -> Path:
        """This run's staging area (created empty; deleted when the build is published or discarded)."""
        self._begin()
        stage = self.store().stage_path(self.run_id)
        stage.mkdir(exist_ok=True)
        return stage

    def run_params(self) -> dict[str, object]:
        """`$run_id` and `$run_date` for the SQL of run-keyed raw tables (history kept in place)."""
        return {"run_id": self.run_id, "run_date": self.started_at.date()}

    def publish(self, run_row: Mapping[str, Any]) -> PublishResult:
        self._begin()
        self._close()
        row = {"started_at": self.started_at, **run_row}
        self._published = self.store().publish(self.run_id, row)
        return self._published


class RegistryResource(dg.ConfigurableResource):
    """The model and GPU registry (SQLAlchemy URL) and the catalog the nightly run syncs from."""

    url: str = db.DEFAULT_URL
    catalog_dir: str = ""  # empty: the bundled catalog (models_registry/catalog)
    user_catalog: str = ""  # your GPUs, nodes and prices over it (models_registry/sources/user_catalog.py)

    def catalog_path(self) -> Path:
        return catalog_root(self.catalog_dir or None)

    def user_catalog_path(self) -> Path | None:
        return Path(self.user_catalog).expanduser() if self.user_catalog.strip() else None

    def safe_url(self) -> str:
        return db.safe_url(self.url)


class PlanningResource(dg.ConfigurableResource):
    """Telemetry and recommendations: the drop folder, the workload profiles, calibration and
    admission settings (see recommendations)."""

    telemetry_dir: str = ""  # empty: var/telemetry when it holds files, else the SAMPLE fleet
    prometheus_url: str = ""  # empty: no Prometheus API ingest (telemetry/prometheus_api.py)
    prometheus_lookback_s: int = DEFAULT_LOOKBACK_S  # range queries cover this much before the run; 0: instant
    prometheus_step_s: int = DEFAULT_STEP_S
    prometheus_timeout_s: int = 30  # per query; a dead server costs one timeout
    prometheus_max_points: int = DEFAULT_MAX_POINTS  # points one whole API ingest keeps (its memory budget)
    prometheus_budget_s: int = int(DEFAULT_BUDGET_S)  # seconds one whole API ingest may take
    prometheus_deployment_label: str = DEFAULT_DEPLOYMENT_LABEL  # the only label deployment ids come from
    telemetry_store: str = ""  # empty: samples only in the run's warehouse; else a folder or s3:// URL (store.py)
    telemetry_window_days: int = DEFAULT_WINDOW_DAYS  # days of the store the usage columns summarize
    workloads_path: str = ""  # empty: ./workloads.yaml, else the repository's
    calibration_min_observations: int = 3  # deployments a calibration scope needs to be used
    drift_threshold_pct: int = 10  # |prediction error| above this warns (asset check)
    admission_headroom_pct: int = 90  # share of the KV capacity admission budgets admit

    def drop_folder(self) -> DropFolder:
        return resolve_drop_folder(self.telemetry_dir or None)

    def prometheus(self) -> PrometheusSettings | None:
        if not self.prometheus_url.strip():
            return None
        return PrometheusSettings(
            self.prometheus_url.strip(),
            self.prometheus_lookback_s,
            self.prometheus_step_s,
            self.prometheus_timeout_s,
            self.prometheus_max_points,
            self.prometheus_budget_s,
            self.prometheus_deployment_label,
        )

    def sample_store(self) -> SampleStore | None:
        """The telemetry sample store (Hive-partitioned Parquet), or None when not configured.
        S3 credentials and endpoint come from the usual AWS variables (AWS_ENDPOINT_URL, ...)."""
        return SampleStore.from_url(self.telemetry_store) if self.telemetry_store.strip() else None

    @property
    def drift_threshold(self) -> float:
        return self.drift_threshold_pct / 100

    @property
    def admission_headroom(self) -> float:
        return self.admission_headroom_pct / 100


def _env(name: str, default: str | int) -> Any:
    """`dg.EnvVar(name)` (resolved when a run starts) when the variable is set, else the embedded
    default as a plain value: the process environment is read, never written."""
    if not os.environ.get(name):
        return default
    return dg.EnvVar.int(name) if isinstance(default, int) else dg.EnvVar(name)


def build_resources() -> dict[str, Any]:
    """Every resource the definitions bind, by key."""
    return {
        "warehouse": WarehouseResource(
            path=_env(WAREHOUSE_ENV, DEFAULT_PATH),
            history_runs=_env(HISTORY_RUNS_ENV, DEFAULT_HISTORY_RUNS),
            lock_wait_s=_env(LOCK_WAIT_ENV, 0),
            duckdb_memory_limit=_env(DUCKDB_MEMORY_ENV, DEFAULT_DUCKDB_MEMORY_LIMIT),
        ),
        "registry": RegistryResource(
            url=_env(REGISTRY_ENV, db.DEFAULT_URL),
            catalog_dir=_env(CATALOG_ENV, ""),
            user_catalog=_env(USER_CATALOG_ENV, ""),
        ),
        "planning": PlanningResource(
            telemetry_dir=_env(TELEMETRY_ENV, ""),
            prometheus_url=_env(PROMETHEUS_URL_ENV, ""),
            prometheus_lookback_s=_env(PROMETHEUS_LOOKBACK_ENV, DEFAULT_LOOKBACK_S),
            prometheus_step_s=_env(PROMETHEUS_STEP_ENV, DEFAULT_STEP_S),
            prometheus_timeout_s=_env(PROMETHEUS_TIMEOUT_ENV, 30),
            prometheus_max_points=_env(PROMETHEUS_MAX_POINTS_ENV, DEFAULT_MAX_POINTS),
            prometheus_budget_s=_env(PROMETHEUS_BUDGET_ENV, int(DEFAULT_BUDGET_S)),
            prometheus_deployment_label=_env(PROMETHEUS_LABEL_ENV, DEFAULT_DEPLOYMENT_LABEL),
            telemetry_store=_env(TELEMETRY_STORE_ENV, ""),
            telemetry_window_days=_env(TELEMETRY_WINDOW_ENV, DEFAULT_WINDOW_DAYS),
            workloads_path=_env(WORKLOADS_ENV, ""),
            calibration_min_observations=_env(MIN_OBSERVATIONS_ENV, 3),
            drift_threshold_pct=_env(DRIFT_ENV, 10),
            admission_headroom_pct=_env(HEADROOM_ENV, 90),
        ),
    }
