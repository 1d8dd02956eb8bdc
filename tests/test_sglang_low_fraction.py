"""SGLang's default `mem_fraction_static` at or below zero: grid and scalar estimate give the same row.

`handle_gpu_memory_settings` takes round((gpu - reserved) / gpu, 3) and checks no range, and the reserve grows
with TP x PP (1 GiB per 8 ranks): on an 8 GB card at TP 8 x PP 4 it exceeds the card. SGLang then fails at
start (`_profile_available_bytes`: "Loaded weights leave no GPU memory for the KV cache"), so the row is a
deployment that does not start, not a deployment the planner refuses to price. `benchmarks/grid.py --sample`
stopped on such a row (-0.163 on an RTX 4060 8 GB) because `estimate` refused the fraction it derived itself.
"""

from __future__ import annotations

import polars as pl
import pytest

from capacity.estimate import AUTO_MAX_MODEL_LEN, estimate
from capacity.grid import GRID_COLUMNS, GridModel, GridOptions, build_capacity_grid
from capacity.spec import DeploymentSpec, GpuSku, SpecError
from tests.handmade import dense_spec

# RTX 4060 8 GB as the bundled catalog has it (driver total; no nvidia-smi MiB)
RTX_4060 = GpuSku("rtx-4060-8gb", "RTX 4060", "nvidia", 8_321_499_136, fp8_support=True, architecture="ada")
# Llama-2-13B-shaped: too big for one 8 GB card at TP 8, so the grid plans PP 2 and 4 at TP 8
LLAMA_13B = GridModel(
    "hand/llama-13b",
    dense_spec(layers=40, heads=40, kv_heads=40, hidden=5120, intermediate=13824, context=4096, dtype="float16"),
)
RENAMED = {"weight_format": "weight_dtype", "kv_cache_dtype": "kv_dtype"}
SPEED_COLUMNS = ("tpot_ms", "output_tokens_per_second")


def _estimate(row: dict[str, object], utilization: float | None = None):  # type: ignore[no-untyped-def]
    deployment = DeploymentSpec(
        tp=int(row["tp"]),  # type: ignore[call-overload]
        pp=int(row["pp"]),  # type: ignore[call-overload]
        weight_dtype=str(row["weight_dtype"]),
        kv_dtype=str(row["kv_dtype"]),
        engine="sglang",
        engine_version=None if row.get("engine_version") is None else str(row["engine_version"]),  # the grid's
        max_model_len=AUTO_MAX_MODEL_LEN,
        gpu_memory_utilization=utilization,
    )
    context = int(row["context"])  # type: ignore[call-overload]
    return estimate(LLAMA_13B.spec, deployment, gpu=RTX_4060, model_name=LLAMA_13B.repo_id, context_tokens=context)


def test_a_default_fraction_below_zero_is_a_deployment_that_does_not_start_in_both_paths() -> None:
    grid = build_capacity_grid([LLAMA_13B], [RTX_4060], GridOptions(engines=("sglang",))).collect()
    low = grid.filter(pl.col("gpu_memory_utilization") <= 0)
    assert low.height > 0 and set(low["pp"]) >= {4}, grid.select("tp", "pp", "gpu_memory_utilization").unique()
    skipped = ("model_family", "num_gpus", "weight_dtype", "kv_dtype", *SPEED_COLUMNS)
    compared = [c for c in GRID_COLUMNS if c not in skipped]
    for row in low.iter_rows(named=True):
        est = _estimate(row)
        contract = est.contract()
        expected = {c: contract[RENAMED.get(c, c)] for c in compared}
        got = {c: row[c] for c in compared}
        assert got == expected, {c: (got[c], expected[c]) for c in compared if got[c] != expected[c]}
        # what SGLang does: no KV budget, so it does not start and nothing fits
        assert row["kv_budget_bytes_per_gpu"] < 0 and not row["fits"] and row["b_max"] == 0
        assert row["tpot_ms"] is None


@pytest.mark.parametrize("utilization", [0.0, -0.163, 1.2])
def test_a_fraction_the_user_gives_must_still_be_in_zero_one(utilization: float) -> None:
    row = {"tp": 8, "pp": 4, "weight_dtype": "bf16", "kv_dtype": "auto", "context": 1024}
    with pytest.raises(SpecError, match="utilization must be in"):
        _estimate(row, utilization)
