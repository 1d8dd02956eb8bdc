"""What each grid row follows from, fingerprinted per run, so that a diff names its cause.

`marts.grid_diff` compares two runs' grids row by row; a row that moved moved because one of its
inputs did. Rather than guess, every run records one fingerprint per input (`raw.grid_inputs`): a
model's config (its `config_sha256` and checkpoint size), a GPU's spec (every field the grid reads
but the price), a GPU's price (value and source), an engine's release (the one the grid planned it
at) and the speed model's calibration (the fitted efficiency factors). A row's causes are the inputs
whose fingerprints differ between the two runs; a row that moved with none of them is `code`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from enum import StrEnum

import polars as pl

from capacity import performance
from capacity.engines import Engine
from capacity.engines.registry import engine_profile
from capacity.grid import GridOptions
from models_registry.planning import gpu_skus


class InputKind(StrEnum):
    """An input of the grid, and the cause a diff row names when its fingerprint changed."""

    ENGINE_RELEASE = "engine_release"
    CONFIG = "config"
    CATALOG = "catalog"
    PRICE = "price"
    CALIBRATION = "calibration"


CALIBRATION_KEY = "speed_model"
SCHEMA = {
    "input_kind": pl.String,
    "input_key": pl.String,
    "fingerprint": pl.String,
    "price_usd_per_gpu_hour": pl.Float64,
    "price_source": pl.String,
}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def calibration_fingerprint() -> str:
    """The speed model's fitted factors (capacity.performance): a refit changes every speed column."""
    fitted = (
        performance.MEMORY_EFFICIENCY,
        performance.COMPUTE_EFFICIENCY,
        sorted((str(k), v) for k, v in performance.STEP_OVERHEAD_S.items()),
        sorted((str(k), v) for k, v in performance.REQUEST_OVERHEAD_S.items()),
        performance.ALLREDUCE_LATENCY_S,
    )
    return _sha(repr(fitted))


def grid_input_rows(models: pl.DataFrame, gpus: pl.DataFrame, options: GridOptions | None = None) -> pl.DataFrame:
    """One row per input of the grid built from `raw.models` and `raw.gpus` with `options`."""
    options = options or GridOptions()
    rows: list[dict[str, object]] = []
    for engine in options.engines:
        release = engine_profile(Engine(engine), options.engine_version(engine)).version
        rows.append({"input_kind": InputKind.ENGINE_RELEASE, "input_key": engine, "fingerprint": release or "-"})
    for model in models.sort("repo_id").iter_rows(named=True):
        config = f"{model.get('config_sha256')}:{model.get('checkpoint_bytes')}"
        rows.append({"input_kind": InputKind.CONFIG, "input_key": model["repo_id"], "fingerprint": config})
    prices = {str(row["slug"]): row for row in gpus.iter_rows(named=True)}
    for sku in gpu_skus(gpus):
        spec = dataclasses.replace(sku, price_usd_per_gpu_hour=None, aliases=())
        rows.append({"input_kind": InputKind.CATALOG, "input_key": sku.id, "fingerprint": _sha(repr(spec))})
        price, source = sku.price_usd_per_gpu_hour, prices[sku.id].get("price_source")
        rows.append(
            {
                "input_kind": InputKind.PRICE,
                "input_key": sku.id,
                "fingerprint": f"{price!r} ({source})",
                "price_usd_per_gpu_hour": price,
                "price_source": source,
            }
        )
    rows.append(
        {"input_kind": InputKind.CALIBRATION, "input_key": CALIBRATION_KEY, "fingerprint": calibration_fingerprint()}
    )
    return pl.DataFrame(
        [{k: (str(v) if isinstance(v, StrEnum) else v) for k, v in r.items()} for r in rows], schema=SCHEMA
    )
