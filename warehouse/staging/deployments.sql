-- staging.deployments: the grid's deployments, typed (bytes and counts as BIGINT).
-- grain: one row per run_id x deployment (model x gpu x engine x engine_version x weight_dtype x
--   kv_dtype x tp x pp x dp x ep), for every retained run (the marts pick the published one).
-- columns: run_id, run_date, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, dp, ep, num_gpus, weight_format, kv_cache_dtype, weights_source, not_modelled,
--   gpu_memory_bytes, gpu_memory_utilization, max_model_len, max_num_seqs, kv_bytes_per_token,
--   kv_bytes_per_token_per_gpu, state_bytes_per_sequence_per_gpu, weights_bytes_per_gpu,
--   activation_peak_bytes_per_gpu, non_torch_bytes_per_gpu, cuda_graph_bytes_per_gpu,
--   overhead_bytes_per_gpu, kv_budget_bytes_per_gpu, num_blocks, block_size, kv_cache_tokens,
--   physical_kv_token_slots
-- history: each raw row is stored once per partition version (part_id); the join with
--   raw.grid_partitions gives it to every retained run that published that version.
-- casts: each `@casts <set>` line is that set of the column dictionary's columns (capacity/columns.py),
--   each cast to its DuckDB type, written out by warehouse.sql.read_sql.
create or replace view staging.deployments as
with source as (
    -- rows published before the grid had DP x EP layouts are TP-only (dp = ep = 1)
    select
        parts.run_id,
        parts.run_date,
        stored.* exclude (part_id, dp, ep),
        coalesce(stored.dp, 1) as dp,
        coalesce(stored.ep, 1) as ep
    from raw.deployments as stored
    inner join raw.grid_partitions as parts on stored.part_id = parts.part_id
),

typed as (
    select
        @casts grid_row,
        @casts deployment_keys,
        @casts deployment_figures
    from source
)

select * from typed;
