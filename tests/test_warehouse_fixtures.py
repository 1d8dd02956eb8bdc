"""Shared fixtures of the warehouse, pipeline and nightly tests (no tests in this module).

A small catalog laid out like `models_registry/catalog` (three bundled models, two GPUs, and
optionally a broken entry), a registry URL and a warehouse path under tmp_path, exported through
the same environment variables the product reads.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml

from models_registry.sources.bundled import CATALOG_DIR

CATALOG_MODELS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "Qwen/Qwen3-32B",
)
CATALOG_GPUS = ("h100-sxm-80gb", "l4-24gb")
BROKEN_MODEL = "acme/broken-model"
PROJECT_ROOT = Path(__file__).resolve().parent.parent

# A second process that takes the warehouse's lock as run `argv[2]`, says "locked" and holds it
# for `argv[3]` seconds (or until it is killed).
HOLD_LOCK = """
import sys, time
from warehouse.publish import Warehouse
Warehouse(sys.argv[1]).lock(sys.argv[2]).acquire()
print("locked", flush=True)
time.sleep(float(sys.argv[3]))
"""


@contextmanager
def warehouse_lock_held(warehouse: Path, owner: str, seconds: float) -> Iterator[subprocess.Popen[str]]:
    """Another process holding `warehouse`'s lock as run `owner`, for `seconds` at the most; killed
    on the way out (a lock dies with its holder)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(warehouse), owner, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def write_catalog(
    root: Path,
    models: Sequence[str] = CATALOG_MODELS,
    gpus: Sequence[str] = CATALOG_GPUS,
    *,
    broken: bool = False,
) -> Path:
    """A catalog directory with the given bundled models and GPUs (plus a broken model entry)."""
    (root / "configs").mkdir(parents=True, exist_ok=True)
    catalog = yaml.safe_load((CATALOG_DIR / "models.yaml").read_text(encoding="utf-8"))
    entries = [entry for entry in catalog["models"] if entry["repo_id"] in models]
    assert len(entries) == len(models), "a test model is missing from the bundled catalog"
    for entry in entries:
        for field in ("config", "safetensors_index"):
            if entry.get(field):
                target = root / entry[field]
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(CATALOG_DIR / entry[field], target)
    if broken:
        bad = root / "configs" / "acme" / "broken-model" / "config.json"
        bad.parent.mkdir(parents=True, exist_ok=True)
        bad.write_text('{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": ', encoding="utf-8")
        entries.append({"repo_id": BROKEN_MODEL, "config": "configs/acme/broken-model/config.json"})
    (root / "models.yaml").write_text(yaml.safe_dump({"schema_version": 1, "models": entries}), encoding="utf-8")
    sku_catalog = yaml.safe_load((CATALOG_DIR / "gpus.yaml").read_text(encoding="utf-8"))
    sku_catalog["gpus"] = [sku for sku in sku_catalog["gpus"] if sku["id"] in gpus]
    assert len(sku_catalog["gpus"]) == len(gpus), "a test GPU is missing from the bundled catalog"
    (root / "gpus.yaml").write_text(yaml.safe_dump(sku_catalog), encoding="utf-8")
    return root


@dataclass
class PipelineEnv:
    """Where one test's pipeline reads and writes; also exported as CAPPLAN_* variables."""

    root: Path
    catalog: Path
    registry_url: str
    warehouse: Path

    def resources(self, **warehouse_options: Any) -> dict[str, Any]:
        from pipelines.resources import PlanningResource, RegistryResource, WarehouseResource

        return {
            "registry": RegistryResource(url=self.registry_url, catalog_dir=str(self.catalog)),
            "warehouse": WarehouseResource(path=str(self.warehouse), **warehouse_options),
            "planning": PlanningResource(telemetry_dir=str(self.telemetry_dir)),
        }

    @property
    def telemetry_dir(self) -> Path:
        from telemetry import SAMPLE_DIR

        return SAMPLE_DIR

    @property
    def dagster_home(self) -> Path:
        """The Dagster instance `capplan nightly` records its runs in (not the repository's var/)."""
        return self.root / "var" / "dagster"

    def env(self) -> dict[str, str]:
        self.dagster_home.mkdir(parents=True, exist_ok=True)
        (self.dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
        return {
            "DAGSTER_HOME": str(self.dagster_home),
            "CAPPLAN_REGISTRY_URL": self.registry_url,
            "CAPPLAN_WAREHOUSE": str(self.warehouse),
            "CAPPLAN_CATALOG_DIR": str(self.catalog),
            "CAPPLAN_TELEMETRY_DIR": str(self.telemetry_dir),
        }


def make_env(root: Path, *, broken: bool = False) -> PipelineEnv:
    root.mkdir(parents=True, exist_ok=True)
    catalog = write_catalog(root / "catalog", broken=broken)
    return PipelineEnv(
        root=root,
        catalog=catalog,
        registry_url=f"sqlite:///{root / 'var' / 'registry.db'}",
        warehouse=root / "var" / "warehouse.duckdb",
    )


def exported_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PipelineEnv:
    """A small catalog, a registry and a warehouse under tmp_path, exported in the environment
    (each test module wraps this in its own `pipeline_env` fixture)."""
    env = make_env(tmp_path)
    for name, value in env.env().items():
        monkeypatch.setenv(name, value)
    return env


NIGHTLY_CORE_GROUPS = ("registry", "gpu_catalog", "capacity", "marts")


def materialize_everything(env: PipelineEnv, **warehouse_options: Any) -> Any:
    """The real definitions' registry, GPU catalog, capacity and marts groups (publish included),
    assets and checks, materialized in-process against `env` (what nightly_job runs, without the
    telemetry and recommendations groups, which have tests of their own)."""
    import dagster as dg

    from pipelines.definitions import build_definitions

    defs = build_definitions()

    return dg.materialize(
        [*(defs.assets or []), *(defs.asset_checks or [])],
        selection=dg.AssetSelection.groups(*NIGHTLY_CORE_GROUPS),
        resources=env.resources(**warehouse_options),
        raise_on_error=False,
    )


def query(path: Path, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    """The rows of one query on a warehouse file, read-only (the connection closed after)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql, params or {}).fetchall()
    finally:
        con.close()
