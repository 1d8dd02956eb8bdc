-- staging.telemetry_observations: deployment observations read from the telemetry drop folder (telemetry), typed and stamped with the run.
-- grain: one deployment observation per source record (a startup-log engine start, a CSV/Parquet row, a vllm:cache_config_info sample).
-- columns: run_id, run_date, observation_id, deployment_id, source_kind, observed_at,
--   observed_at_source, model, model_name_raw, served_model_name, gpu, gpu_name_raw, tp, pp,
--   engine, engine_version, engine_generation, gpu_memory_utilization, max_model_len, max_num_seqs,
--   max_num_batched_tokens, weight_dtype, quantization, kv_cache_dtype, block_size,
--   enable_prefix_caching, enforce_eager, triton_kernels, disable_custom_all_reduce, gpu_peer_access, unmodelled_features, speculative_config, startup_outcome, startup_error, total_gpu_memory_bytes,
--   requested_memory_bytes, other_process_bytes, weights_bytes, activation_peak_bytes, non_torch_bytes,
--   cuda_graph_bytes, non_kv_bytes, kv_cache_memory_bytes, num_gpu_blocks, num_cpu_blocks,
--   kv_cache_tokens, max_concurrency, max_concurrency_tokens, peak_kv_usage, peak_requests_running,
--   peak_requests_waiting, preemptions_total, fb_used_bytes, fb_free_bytes, input_rows, file, line
-- casts: `@casts observed_settings` / `@casts observed_memory_terms` are the telemetry columns both staging
--   views type alike (warehouse.sql TYPED_COLUMN_SETS), written out by warehouse.sql.read_sql.
create or replace view staging.telemetry_observations as
with source as (
    select * from raw.telemetry_observations
),

typed as (
    select
        run.run_id,
        run.run_date,
        observation_id::varchar as observation_id,
        deployment_id::varchar as deployment_id,
        source_kind::varchar as source_kind,
        observed_at::timestamptz as observed_at,
        observed_at_source::varchar as observed_at_source,
        model_id::varchar as model,
        model_name_raw::varchar as model_name_raw,
        served_model_name::varchar as served_model_name,
        gpu_sku::varchar as gpu,
        gpu_name_raw::varchar as gpu_name_raw,
        @casts observed_settings,
        startup_outcome::varchar as startup_outcome,
        startup_error::varchar as startup_error,
        @casts observed_memory_terms,
        non_kv_bytes::bigint as non_kv_bytes,
        kv_cache_memory_bytes::bigint as kv_cache_memory_bytes,
        num_gpu_blocks::bigint as num_gpu_blocks,
        num_cpu_blocks::bigint as num_cpu_blocks,
        kv_cache_tokens::bigint as kv_cache_tokens,
        max_concurrency::double as max_concurrency,
        max_concurrency_tokens::bigint as max_concurrency_tokens,
        peak_kv_usage::double as peak_kv_usage,
        peak_requests_running::double as peak_requests_running,
        peak_requests_waiting::double as peak_requests_waiting,
        preemptions_total::double as preemptions_total,
        fb_used_bytes::bigint as fb_used_bytes,
        fb_free_bytes::bigint as fb_free_bytes,
        input_rows::integer as input_rows,
        file::varchar as file,
        line::bigint as line
    from source
    cross join raw.run as run
)

select * from typed;
