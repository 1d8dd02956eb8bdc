"""The registry's models and GPUs as capacity-engine objects, keyed by registry id.

`grid_models` and `gpu_skus` turn the run's `raw.models` / `raw.gpus` rows back into domain
objects; the capacity grid (`warehouse.capacity_grid`), telemetry and recommendations all read
them here, so a model the grid can plan is a model recommendations can plan, and one it rejects is
rejected everywhere with the same reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

import polars as pl

from capacity.grid import GridModel
from capacity.spec import GpuSku, PriceBasis
from models_registry.normalize import spec_from_snapshot
from models_registry.sources.common import ConfigSnapshot, ItemError, StageError


def _optional(value: object) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)  # type: ignore[arg-type]


def grid_models(models: pl.DataFrame) -> tuple[list[GridModel], list[ItemError]]:
    """Each `raw.models` row parsed back into a ModelSpec (the registry's own parser and checks)."""
    parsed: list[GridModel] = []
    errors: list[ItemError] = []
    for row in models.sort("repo_id").iter_rows(named=True):
        repo_id = str(row["repo_id"])
        snapshot = ConfigSnapshot(
            repo_id=repo_id,
            config_bytes=str(row["config_json"]).encode("utf-8"),
            source=str(row.get("source") or "bundled"),
            source_path=row.get("source_path"),
            revision=row.get("revision"),
            checkpoint_bytes=row.get("checkpoint_bytes"),
            family=row.get("family"),
        )
        try:
            _config, spec = spec_from_snapshot(snapshot)
        except StageError as exc:
            errors.append(ItemError("model", repo_id, "grid", str(exc), row.get("source_path")))
            continue
        parsed.append(GridModel(repo_id, spec, row.get("checkpoint_bytes")))
    return parsed, errors


def gpu_skus(gpus: pl.DataFrame) -> list[GpuSku]:
    """`raw.gpus` rows as the capacity engine's GpuSku (aliases are not needed to plan)."""
    skus = []
    for row in gpus.sort("slug").iter_rows(named=True):
        skus.append(
            GpuSku(
                id=str(row["slug"]),
                name=str(row["name"]),
                vendor=str(row["vendor"]),
                memory_total_bytes=int(row["memory_total_bytes"]),
                memory_total_mib_smi=int(row["memory_total_mib_smi"]) if row.get("memory_total_mib_smi") else None,
                memory_bandwidth_gbps=_optional(row.get("memory_bandwidth_gbps")),
                bf16_dense_tflops=_optional(row.get("bf16_dense_tflops")),
                fp8_dense_tflops=_optional(row.get("fp8_dense_tflops")),
                fp4_dense_tflops=_optional(row.get("fp4_dense_tflops")),
                fp8_support=bool(row.get("fp8_support")),
                fp4_support=bool(row.get("fp4_support")),
                int8_support=bool(row.get("int8_support", True)),
                gpus_per_node=int(row.get("gpus_per_node") or 8),
                interconnect=row.get("interconnect"),
                interconnect_gbps=_optional(row.get("interconnect_gbps")),
                price_usd_per_gpu_hour=_optional(row.get("price_usd_per_gpu_hour")),
                architecture=row.get("architecture"),
                price_basis=PriceBasis(row["price_basis"]) if row.get("price_basis") else None,
                max_gpus_available=int(row["max_gpus_available"]) if row.get("max_gpus_available") else None,
            )
        )
    return skus


@dataclass(frozen=True)
class Catalog:
    models: dict[str, GridModel]
    gpus: dict[str, GpuSku]
    model_errors: dict[str, str]  # repo id -> why it cannot be planned

    def model_ids(self) -> list[str]:
        return sorted([*self.models, *self.model_errors])


def catalog(models: pl.DataFrame, gpus: pl.DataFrame) -> Catalog:
    """Parse `raw.models` / `raw.gpus` frames (GPU aliases kept, for resolving telemetry names)."""
    parsed, errors = grid_models(models) if models.height else ([], [])
    skus = gpu_skus(gpus) if gpus.height else []
    aliases: dict[str, tuple[str, ...]] = {}
    if "aliases" in gpus.columns:
        for row in gpus.select("slug", "aliases").iter_rows(named=True):
            try:
                values = json.loads(row["aliases"] or "[]")
            except (TypeError, ValueError):
                values = []
            aliases[str(row["slug"])] = tuple(str(v) for v in values)
    return Catalog(
        models={m.repo_id: m for m in parsed},
        gpus={s.id: replace(s, aliases=aliases.get(s.id, ())) for s in skus},
        model_errors={e.item_key: e.reason for e in errors},
    )


def bundled_catalog(model_ids: Iterable[str] | None = None, gpu_ids: Iterable[str] | None = None) -> Catalog:
    """The bundled catalog (models_registry/catalog) without a registry database: for tests and
    what-if use. `model_ids` / `gpu_ids` restrict it."""
    from models_registry.sources.bundled import find_entry, read_catalog_entries, snapshot_of
    from models_registry.sources.gpu_catalog import load_gpu_skus

    wanted = list(model_ids) if model_ids is not None else [e.repo_id for e in read_catalog_entries()[0]]
    models: dict[str, GridModel] = {}
    errors: dict[str, str] = {}
    for repo_id in wanted:
        entry = find_entry(repo_id)
        if entry is None:
            errors[repo_id] = f"{repo_id} is not in the bundled catalog"
            continue
        snapshot = snapshot_of(entry)
        try:
            spec = spec_from_snapshot(snapshot)[1]
        except StageError as exc:
            errors[repo_id] = str(exc)
            continue
        models[repo_id] = GridModel(repo_id, spec, snapshot.checkpoint_bytes)
    keep = set(gpu_ids) if gpu_ids is not None else None
    gpus = {s.id: s for s in load_gpu_skus() if keep is None or s.id in keep}
    return Catalog(models=models, gpus=gpus, model_errors=errors)
