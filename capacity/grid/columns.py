"""The grid's columns: the published grid (GRID_COLUMNS), the pool and speed columns that travel with
the deployments, the column split of `GridTables`, and the dtypes of the frames."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from capacity.columns import CONTEXT_COLUMNS, DEPLOYMENT_KEYS, GRID_COLUMNS  # re-exported for the grid modules
from capacity.numeric import Num
from capacity.overhead import overhead_total_bytes
from capacity.pool import physical_token_slots

# DEPLOYMENT_KEYS, CONTEXT_COLUMNS, GRID_COLUMNS and their dtypes (grid_schema, grid_select): capacity.columns
# The pool's charge terms (`KVPool.charge_terms`), carried after GRID_COLUMNS so that
# `build_context_limits` can evaluate any context; `pool_window_{j}_groups/_held` follow, one pair
# per distinct window of the models in the build. Not part of the published grid.
POOL_COLUMNS = (
    "pool_unit_bytes",  # bytes of one unit of the tightest stage (`KVPool.unit_bytes`): what a resized budget divides
    "pool_max_num_batched_tokens",
    "pool_max_in_flight_tokens",
    "pool_fixed_units",
    "pool_per_block_groups",
    "pool_num_groups",
    "pool_swa_capacity",
    "pool_swa_window",
)

_WINDOW_PARTS = ("groups", "held", "block_size")
# a pool window column a pool does not have: it holds no layer (0 x anything), with a block size of 1
# so that the division stays defined
WINDOW_PADDING = {"groups": 0, "held": 0, "block_size": 1}
# The speed model's per-rank terms (`capacity.performance.RankWeightTerms`, `RankKVTerms`) carried from the
# layouts to the context rows, and the GPU's and engine's: internal columns, not part of the published grid.
PERF_WINDOW_SLOTS = 4  # windowed layer groups of distinct windows a layout's speed keeps apart
_PERF_LAYOUT = (
    "perf_dense_bytes", "perf_expert_bytes", "perf_active_params", "perf_full_kv", "perf_attn_full",
    "perf_layers", "perf_act_bytes", "perf_fp8_gemm",
    *(f"perf_win_{j}_{part}" for j in range(PERF_WINDOW_SLOTS) for part in ("tokens", "kv", "attn")),
    "perf_moe_layers", "perf_exchange_ranks", "perf_dp_ranks",  # DP x EP: the all-to-all's terms, the DP ranks
)  # fmt: skip
# of those, what the cached tokens set (`rank_kv_terms`: a KV layout's) and what the weights set (a weight row's)
_PERF_KV_TERMS = ("perf_full_kv", "perf_attn_full", *(c for c in _PERF_LAYOUT if c.startswith("perf_win_")))
_PERF_WEIGHTS = tuple(c for c in _PERF_LAYOUT if c not in _PERF_KV_TERMS)
_PERF_KV = ("perf_num_experts", "perf_experts_per_token", "perf_hidden")
_PERF_GPU = ("perf_bandwidth", "perf_bf16_flops", "perf_fp8_flops", "perf_link")
_PERF_SETTINGS = ("perf_eff_memory", "perf_eff_compute", "perf_step_s", "perf_allreduce_s", "perf_wave_share")
_PERF_PARALLEL = ("perf_tp", "perf_pp")  # copies of tp / pp that travel with the narrow deployment rows
PERF_COLUMNS = (*_PERF_LAYOUT, *_PERF_KV, *_PERF_GPU, *_PERF_SETTINGS, *_PERF_PARALLEL)
_I64 = pl.Int64
_F64 = pl.Float64
_STR = pl.String
_CAT = pl.Categorical
Schema = dict[str, pl.DataType | type[pl.DataType]]


LAYOUT_COLUMNS = (
    "model",
    "model_family",
    "engine",
    "engine_version",
    "weight_dtype",
    "kv_dtype",
    "tp",
    "pp",
    "dp",
    "ep",
    "num_gpus",
    "weight_format",
    "kv_cache_dtype",
    "weights_source",
    "not_modelled",
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_gpu",
    "state_bytes_per_sequence_per_gpu",
    "weights_bytes_per_gpu",
)
GPU_COLUMNS = ("gpu", "gpu_memory_bytes")
# what a deployment does not share with its layout and GPU
DEPLOYMENT_ONLY_COLUMNS = tuple(
    c for c in GRID_COLUMNS if c not in (*DEPLOYMENT_KEYS, *CONTEXT_COLUMNS, *LAYOUT_COLUMNS, *GPU_COLUMNS)
)

_ID = pl.Int32
TABLE_CONTEXT_COLUMNS = tuple("max_concurrency_e4" if c == "max_concurrency" else c for c in CONTEXT_COLUMNS)

# A grid published with its context rows as a view (`GridTables.context_view`) keeps what the context
# rules read beside each grain's columns: per deployment its pool's shape and its engine settings (ids
# into two small tables, `pool_shapes` and `settings`, which the registry numbers for the whole build)
# and SGLang's second pool, but not the columns that follow from the others (VIEW_DERIVED_COLUMNS); per shape
# the pool's charge terms (`pool_window_{j}_*`: as many windows as the build's pools have); per settings row the
# memory utilization, the in-flight tokens and the engine's speed factors (the deployments table then leaves out
# gpu_memory_utilization, VIEW_DEPLOYMENT_ONLY_COLUMNS); per layout the speed model's per-rank terms and the model's
# grid contexts; per GPU its rates.
VIEW_DEPLOYMENT_COLUMNS = ("shape_id", "settings_id", "pool_swa_capacity")
VIEW_SHAPE_COLUMNS = ("pool_fixed_units", "pool_per_block_groups", "pool_swa_window")
VIEW_SETTINGS_COLUMNS = ("gpu_memory_utilization", "pool_max_num_batched_tokens", "pool_max_in_flight_tokens", *_PERF_SETTINGS)


def derived_deployment_columns(col: Callable[[str], Num]) -> dict[str, Num]:
    """The deployment columns that follow from others (`col`) by one rule each: the sizing computes them so, and a
    context view when read rather than storing them (VIEW_DERIVED_COLUMNS: a tenth of its deployments table's
    bytes, which the build would write and the insert compress)."""
    overhead_terms = ("activation_peak_bytes_per_gpu", "non_torch_bytes_per_gpu", "cuda_graph_bytes_per_gpu")
    return {
        "overhead_bytes_per_gpu": overhead_total_bytes(*(col(c) for c in overhead_terms)),
        "physical_kv_token_slots": physical_token_slots(col("num_blocks"), col("block_size")),
    }


VIEW_DERIVED_COLUMNS = tuple(derived_deployment_columns(lambda name: 0))
# what a context view's deployments table keeps of DEPLOYMENT_ONLY_COLUMNS: the rest is its settings row's, stored
# once per setting and GPU instead of once per deployment, or computed when read (VIEW_DERIVED_COLUMNS)
VIEW_DEPLOYMENT_ONLY_COLUMNS = tuple(
    c for c in DEPLOYMENT_ONLY_COLUMNS if c not in (*VIEW_SETTINGS_COLUMNS, *VIEW_DERIVED_COLUMNS)
)
VIEW_LAYOUT_COLUMNS = (*_PERF_LAYOUT, *_PERF_KV, "grid_contexts")
VIEW_GPU_COLUMNS = _PERF_GPU


def pool_window_columns(windows: int) -> list[str]:
    return [f"pool_window_{j}_{part}" for j in range(windows) for part in _WINDOW_PARTS]


def stage_columns(prefix: str, slots: int) -> list[str]:
    """Per-pipeline-stage columns `<prefix>_0 ... <prefix>_{slots - 1}` (the stages' shortfall bytes)."""
    return [f"{prefix}_{j}" for j in range(slots)]
