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
        run_id::varchar as run_id,
        run_date::date as run_date,
        deployment_id::bigint as deployment_id,
        model::varchar as model,
        model_family::varchar as model_family,
        gpu::varchar as gpu,
        engine::varchar as engine,
        engine_version::varchar as engine_version,
        weight_dtype::varchar as weight_dtype,
        kv_dtype::varchar as kv_dtype,
        tp::integer as tp,
        pp::integer as pp,
        dp::integer as dp,
        ep::integer as ep,
        num_gpus::integer as num_gpus,
        weight_format::varchar as weight_format,
        kv_cache_dtype::varchar as kv_cache_dtype,
        weights_source::varchar as weights_source,
        not_modelled::varchar as not_modelled,
        gpu_memory_bytes::bigint as gpu_memory_bytes,
        gpu_memory_utilization::double as gpu_memory_utilization,
        max_model_len::bigint as max_model_len,
        max_num_seqs::bigint as max_num_seqs,
        kv_bytes_per_token::bigint as kv_bytes_per_token,
        kv_bytes_per_token_per_gpu::bigint as kv_bytes_per_token_per_gpu,
        state_bytes_per_sequence_per_gpu::bigint as state_bytes_per_sequence_per_gpu,
        weights_bytes_per_gpu::bigint as weights_bytes_per_gpu,
        activation_peak_bytes_per_gpu::bigint as activation_peak_bytes_per_gpu,
        non_torch_bytes_per_gpu::bigint as non_torch_bytes_per_gpu,
        cuda_graph_bytes_per_gpu::bigint as cuda_graph_bytes_per_gpu,
        overhead_bytes_per_gpu::bigint as overhead_bytes_per_gpu,
        kv_budget_bytes_per_gpu::bigint as kv_budget_bytes_per_gpu,
        num_blocks::bigint as num_blocks,
        block_size::bigint as block_size,
        kv_cache_tokens::bigint as kv_cache_tokens,
        physical_kv_token_slots::bigint as physical_kv_token_slots
    from source
)

select * from typed;
