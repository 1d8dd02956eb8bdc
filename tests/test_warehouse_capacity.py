"""The warehouse's grid frames (pure Polars): the star layout joins back to exactly the grid and the
context limits of `capacity.grid`, bad models are reported, and the scalar cross-check catches a
wrong value."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from capacity.grid import GRID_COLUMNS, GridModel, build_capacity_grid, build_context_limits
from capacity.spec import GpuSku
from models_registry.planning import gpu_skus, grid_models
from models_registry.sources.bundled import CATALOG_DIR
from models_registry.sources.gpu_catalog import load_gpu_skus
from warehouse.capacity_grid import (
    CONTEXT_COLUMNS,
    DEPLOYMENT_COLUMNS,
    compare_sample,
    plan,
)

MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "configs/meta-llama/Llama-3.1-8B-Instruct/config.json",
    "google/gemma-2-9b-it": "configs/google/gemma-2-9b-it/config.json",
}
GPUS = ("h100-sxm-80gb", "l4-24gb")
Parsed = tuple[list[GridModel], list[GpuSku]]


def _models_frame(extra: dict[str, str] | None = None) -> pl.DataFrame:
    rows = [
        {
            "repo_id": repo,
            "config_json": (CATALOG_DIR / path).read_text(encoding="utf-8"),
            "source": "bundled",
            "source_path": str(CATALOG_DIR / path),
            "revision": None,
            "checkpoint_bytes": None,
            "family": None,
        }
        for repo, path in MODELS.items()
    ]
    for repo, text in (extra or {}).items():
        rows.append(
            {
                "repo_id": repo,
                "config_json": text,
                "source": "local",
                "source_path": None,
                "revision": None,
                "checkpoint_bytes": None,
                "family": None,
            }
        )
    return pl.DataFrame(
        rows, schema_overrides={"revision": pl.String, "checkpoint_bytes": pl.Int64, "family": pl.String}
    )


def _gpus_frame() -> pl.DataFrame:
    skus = [s for s in load_gpu_skus() if s.id in GPUS]
    return pl.DataFrame(
        [
            {
                "slug": s.id,
                "name": s.name,
                "vendor": s.vendor,
                "memory_total_bytes": s.memory_total_bytes,
                "memory_bandwidth_gbps": s.memory_bandwidth_gbps,
                "bf16_dense_tflops": s.bf16_dense_tflops,
                "fp8_dense_tflops": s.fp8_dense_tflops,
                "fp4_dense_tflops": s.fp4_dense_tflops,
                "fp8_support": s.fp8_support,
                "fp4_support": s.fp4_support,
                "int8_support": s.int8_support,
                "gpus_per_node": s.gpus_per_node,
                "interconnect": s.interconnect,
                "interconnect_gbps": s.interconnect_gbps,
                "price_usd_per_gpu_hour": s.price_usd_per_gpu_hour,
                "architecture": s.architecture,
            }
            for s in skus
        ]
    )


@pytest.fixture(scope="module")
def parsed() -> Parsed:
    specs, errors = grid_models(_models_frame())
    assert not errors
    return specs, gpu_skus(_gpus_frame())


def test_gpu_rows_become_the_catalogs_skus() -> None:
    by_id = {s.id: s for s in load_gpu_skus()}
    for sku in gpu_skus(_gpus_frame()):
        expected = by_id[sku.id]
        assert sku.memory_total_bytes == expected.memory_total_bytes
        assert sku.gpus_per_node == expected.gpus_per_node and sku.fp8_support == expected.fp8_support


def test_the_star_joins_back_to_exactly_the_grid(parsed: Parsed) -> None:
    specs, skus = parsed
    frames = plan(specs, skus)
    assert frames.models == len(MODELS)
    assert frames.deployments.columns == ["deployment_id", *DEPLOYMENT_COLUMNS]
    assert frames.grid.columns == ["deployment_id", *CONTEXT_COLUMNS]
    assert frames.deployments.get_column("deployment_id").is_unique().all()
    expected = build_capacity_grid(specs, skus).select(GRID_COLUMNS).collect()
    assert_frame_equal(frames.wide_grid(), expected)

    limits = build_context_limits(build_capacity_grid(specs, skus)).collect()
    joined = frames.context_limits.join(frames.deployments, on="deployment_id").select(limits.columns)
    assert_frame_equal(joined.sort(limits.columns), limits.sort(limits.columns))


def test_a_config_that_does_not_parse_is_an_error_and_the_rest_is_planned() -> None:
    specs, errors = grid_models(_models_frame({"acme/broken": '{"model_type": "llama"'}))
    assert [m.repo_id for m in specs] == sorted(MODELS)
    assert [(e.item_key, e.stage) for e in errors] == [("acme/broken", "grid")]
    assert "acme/broken" in errors[0].reason


def test_a_model_with_no_deployment_is_reported(parsed: Parsed) -> None:
    specs, _skus = parsed
    frames = plan(specs, [])
    assert frames.models == 0 and frames.grid.height == 0
    assert sorted(frames.errors.get_column("item_key").to_list()) == sorted(MODELS)
    assert all("no deployment in the grid" in r for r in frames.errors.get_column("reason").to_list())


def test_the_scalar_cross_check_agrees_and_catches_a_wrong_value(parsed: Parsed) -> None:
    specs, skus = parsed
    wide = plan(specs, skus).wide_grid()
    sample = wide.filter(pl.col("context") == 8192).head(6)
    models, gpus = _models_frame(), _gpus_frame()
    checked, mismatches = compare_sample(sample, models, gpus)
    assert checked == 6 and mismatches == [], [m.line() for m in mismatches]
    tampered = sample.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.col("b_max") + 1).otherwise("b_max"))
    checked, mismatches = compare_sample(tampered, models, gpus)
    assert [m.column for m in mismatches] == ["b_max"]
    assert json.dumps(mismatches[0].line())  # one printable line


def test_the_catalog_paths_used_here_exist() -> None:
    for path in MODELS.values():
        assert Path(CATALOG_DIR / path).is_file()
