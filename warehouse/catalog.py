"""The run's `raw.models` and `raw.gpus` as capacity-engine objects, keyed by registry id.

Reuses the capacity grid's own readers (`warehouse.capacity_grid`), so a model the grid can plan
is a model recommendations can plan, and one it rejects is rejected here with the same reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace

import polars as pl

from capacity.grid import GridModel
from capacity.spec import GpuSku
from warehouse.capacity_grid import gpu_skus, grid_models


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
    from models_registry.normalize import spec_from_snapshot
    from models_registry.sources.bundled import find_entry, read_catalog_entries, snapshot_of
    from models_registry.sources.common import StageError
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
