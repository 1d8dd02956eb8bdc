"""The capacity grid: every model x GPU x weight dtype x KV dtype x parallelism x engine x context.

Pure and vectorized: `build_capacity_grid` returns a LazyFrame, nothing is collected there
(`grid_tables` collects: it sizes the PP = 1 deployments before planning the PP > 1 ones).

How the work is split, so that each rule is written once (the engine profiles, `capacity.pool`):
- Per *layout* (model, engine, weight dtype, KV dtype, TP, PP), a Python loop calls the scalar helpers
  (`kv_bytes_per_token_per_gpu`, `estimate_weights`, the profile's `overhead` and `stage_pools`,
  `sglang_cells`, `KVPool.charge_terms`...): bytes per token, weights, overhead, and the *shape* of the
  KV pool (bytes per block, block size, how a sequence is charged). Layouts are a few per cent of rows.
- Per GPU, the profile's `defaults` gives utilization, batch defaults and block size for each GPU x TP x PP
  (a small table); the cross product with the layouts is a join.
- Per deployment (layout x GPU) and per context the arithmetic is Polars expressions: the usable
  memory, the KV budget (the profile's `kv_budget` over columns), the block count of the tightest
  pipeline stage, and then the pool's rules asked of `capacity.pool.PoolTerms` built from the pool
  columns (`_pool_terms`): the units a sequence of T tokens takes, B_max, the start check and the
  largest length that starts, the printed concurrency (its exact ratio, rounded as Python's
  `round(x, 4)`), and the max context per target concurrency; both searches step with
  `numeric.bisect_step`, every row at once, as `pool.largest_starting_len` / `pool.max_context` do
  (the start search, like the scalar rule, only on the rows where one token starts and the limit does not).
`tests/test_grid.py` proves grid rows equal `estimate(...).contract()` column by column.

Frames: `build_deployments` gives one row per deployment (PP = 1 first; PP > 1 only where that does
not fit), `expand_contexts` one row per deployment and context, `build_capacity_grid` both in one
plan. Columns are GRID_COLUMNS (labels Categorical, bytes and counts Int64) then the internal
`pool_*` columns that `build_context_limits` reads. A layout the scalar engine refuses (it raises,
e.g. a pipeline stage holding only KV-shared layers) has no rows.

Tables, for publishing at fleet scale: `grid_tables` gives the same grid as `GridTables`, four
tables that keep each column at its own grain (GPUs; layouts: keys, dtypes, bytes per token,
weights, the strings; deployments: settings, overhead, budget, pool; contexts: B_max, concurrency,
fit), so that a 10M-row grid is 10M narrow rows plus 1.5M deployments instead of 10M x 35 values;
`grid_tables_sql` is the SELECT that joins them back, `GridTables.grid()` the same in Polars.
`grid_tables(context_view=True)` keeps, instead of the context rows, what they are computed from (the
pool's shape and the engine settings by id, SGLang's second pool, the speed terms, the model's grid
contexts) and `view.context_view_sql` computes them in DuckDB when read, with the same rule set
(`contexts._at_contexts` over `staged.SqlRows`; `capacity.sql_expr` renders Python's arithmetic): a
10M-row grid publishes 1.6M deployment rows, and a query pays for the context columns it reads.
`iter_grid_tables` yields them for chunks of models (same ids, same rows) and overlaps the
Python part of one chunk with the Polars part of the one before; it is a `GridBuild`'s chunks: the
registry a build's chunks share, picklable (`GridBuild.registry`) so that another process can build a
range of the fleet (`warehouse.grid_processes`) and its chunks join this one's (`GridTables.shifted`,
`GridBuild.adopt_shapes`, `GridTables.with_shape_ids`). Two savings only this path
makes: the PP > 1 layouts are planned after the PP = 1 deployments are sized, and only where
those do not fit (planning every PP > 1 layout was half the Python work, for a few per cent of
the deployments); and the KV side of a layout (bytes per token, pool shapes) is computed once per
KV structure, shared by models that differ only in parameter counts (as does every path).

What the grid enumerates (GridOptions changes it):
- engines: vllm (default release, `engine_constants.VLLM_DEFAULT_VERSION`), sglang, trtllm. `plain`
  is left out: its overhead is given by hand per deployment, so a fleet-wide row would be a guess.
- weight dtypes, keyed by the `--dtype` value (`weight_dtype`; `weight_format` is what it resolves to):
  `bf16` always; `auto` (the checkpoint's own format) where that is not plain bf16, i.e. quantized
  checkpoints (fp8, int4 AWQ/GPTQ, mxfp4: served on every GPU, as vLLM does with Marlin/Triton
  weight-only kernels where the GPU lacks the math) and fp16/fp32 checkpoints; `fp8` on GPUs with
  `fp8_support` unless the checkpoint already is fp8; `int4` everywhere unless the checkpoint already
  is int4; `mxfp4` (routed experts only, as gpt-oss ships) for MoE models on GPUs with `fp4_support`,
  unless the checkpoint already is mxfp4 (a dense model has no experts: mxfp4 would equal bf16).
- KV dtypes (`kv_dtype`, resolved in `kv_cache_dtype`): `auto`; `fp8` on GPUs with `fp8_support`.
- parallelism: TP in {1, 2, 4, 8} that passes `parallel.validate_parallelism` (divides the attention
  heads, KV heads divisible either way) and is at most the GPU's `gpus_per_node`. PP in {2, 4} only at
  the node's TP (the largest valid TP on that GPU) and only where the PP=1 deployment at that TP does
  not fit: no KV budget, or not one sequence of the model's smallest grid context. MoE models also get the
  DP-attention x expert-parallel layouts they are served with, one node each, at PP = 1
  (`parallel_layout.dp_candidates`, as placements: vLLM `-tp T -dp node/T --enable-expert-parallel`, SGLang
  `--tp node --dp-size D --ep-size node`; `GridOptions.dp_layouts`): the same `RankLayout` as `estimate` gives
  their attention TP (bytes per token, pool shapes), weight shards and all-to-all; `dp` / `ep` are 1 elsewhere.
- contexts: powers of two from 1,024 up to the model's context limit, plus the limit itself. Each
  row is `estimate(..., context_tokens=T)` with max_model_len = the limit and concurrency None.

Modules, bottom to top (each imports only those above it in this list):
- `columns`: the column tuples and dtypes (GRID_COLUMNS, POOL_COLUMNS, PERF_COLUMNS, the GridTables split);
- `options`: GridModel, GridOptions, the grid's contexts and weight dtypes of a model;
- `speed`: the speed model's per-layout terms and the TPOT / tokens per second columns;
- `planning`: the per-layout part in Python (`_Registry`, `_build_tables`: settings, KV side, pool
  shapes, weights, overheads as rows);
- `sizing`: the per-deployment arithmetic on columns (`_sized`, `_pool_terms`, the bisections);
- `frames`: the rows as LazyFrames, joined and sized (`build_deployments`);
- `contexts`: the context rows (`expand_contexts`, `build_capacity_grid`, Python's rounding on columns);
- `limits`: the max context per target concurrency (`build_context_limits`, `max_contexts`);
- `tables`: GridTables, `grid_tables`, `iter_grid_tables` (a `GridBuild`'s chunks), `grid_tables_sql`.
"""

from __future__ import annotations

from capacity.grid.columns import (
    CONTEXT_COLUMNS,
    DEPLOYMENT_KEYS,
    DEPLOYMENT_ONLY_COLUMNS,
    GPU_COLUMNS,
    GRID_COLUMNS,
    LAYOUT_COLUMNS,
    PERF_COLUMNS,
    PERF_WINDOW_SLOTS,
    POOL_COLUMNS,
    TABLE_CONTEXT_COLUMNS,
)
from capacity.grid.contexts import build_capacity_grid, expand_contexts, with_python_round
from capacity.grid.frames import build_deployments
from capacity.grid.limits import build_context_limits, max_contexts
from capacity.grid.options import (
    ENGINES,
    KV_CHOICES,
    MIN_CONTEXT,
    TARGET_CONCURRENCIES,
    WEIGHT_CHOICES,
    GridModel,
    GridOptions,
    grid_contexts,
    weight_dtype_choices,
)
from capacity.grid.tables import GridBuild, GridTables, grid_tables, grid_tables_sql, iter_grid_tables

__all__ = [
    "CONTEXT_COLUMNS",
    "DEPLOYMENT_KEYS",
    "DEPLOYMENT_ONLY_COLUMNS",
    "ENGINES",
    "GPU_COLUMNS",
    "GRID_COLUMNS",
    "KV_CHOICES",
    "LAYOUT_COLUMNS",
    "MIN_CONTEXT",
    "PERF_COLUMNS",
    "PERF_WINDOW_SLOTS",
    "POOL_COLUMNS",
    "TABLE_CONTEXT_COLUMNS",
    "TARGET_CONCURRENCIES",
    "WEIGHT_CHOICES",
    "GridBuild",
    "GridModel",
    "GridOptions",
    "GridTables",
    "build_capacity_grid",
    "build_context_limits",
    "build_deployments",
    "expand_contexts",
    "grid_contexts",
    "grid_tables",
    "grid_tables_sql",
    "iter_grid_tables",
    "max_contexts",
    "weight_dtype_choices",
    "with_python_round",
]
