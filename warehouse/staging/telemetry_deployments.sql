-- staging.telemetry_deployments: one row per observed deployment: its preferred settings and measurements, and its usage (warehouse.telemetry.deployment_summary), typed and stamped with the run.
-- grain: one deployment id.
-- columns: run_id, run_date, deployment_id, model, gpu, tp, pp, engine, engine_version,
--   engine_generation, gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens,
--   weight_dtype, quantization, kv_cache_dtype, block_size, enable_prefix_caching,
--   total_gpu_memory_bytes, requested_memory_bytes, weights_bytes, activation_peak_bytes,
--   non_torch_bytes, cuda_graph_bytes, kv_cache_memory_bytes, num_gpu_blocks, kv_cache_tokens,
--   max_concurrency, max_concurrency_tokens, latest_startup_outcome, failed_starts, sources,
--   n_observations, last_observed_at, peak_kv_usage, p95_kv_usage, peak_requests_running,
--   peak_requests_waiting, preemptions_in_window, peak_fb_used_bytes, gpus_seen, first_sample_at,
--   last_sample_at, n_samples, telemetry_source
create or replace view staging.telemetry_deployments as
with source as (
    select * from raw.telemetry_deployments
),

typed as (
    select
        run.run_id,
        run.run_date,
        deployment_id::varchar as deployment_id,
        model_id::varchar as model,
        gpu_sku::varchar as gpu,
        tp::integer as tp,
        pp::integer as pp,
        engine::varchar as engine,
        engine_version::varchar as engine_version,
        engine_generation::varchar as engine_generation,
        gpu_memory_utilization::double as gpu_memory_utilization,
        max_model_len::bigint as max_model_len,
        max_num_seqs::bigint as max_num_seqs,
        max_num_batched_tokens::bigint as max_num_batched_tokens,
        weight_dtype::varchar as weight_dtype,
        quantization::varchar as quantization,
        kv_cache_dtype::varchar as kv_cache_dtype,
        block_size::integer as block_size,
        enable_prefix_caching::boolean as enable_prefix_caching,
        total_gpu_memory_bytes::bigint as total_gpu_memory_bytes,
        requested_memory_bytes::bigint as requested_memory_bytes,
        weights_bytes::bigint as weights_bytes,
        activation_peak_bytes::bigint as activation_peak_bytes,
        non_torch_bytes::bigint as non_torch_bytes,
        cuda_graph_bytes::bigint as cuda_graph_bytes,
        kv_cache_memory_bytes::bigint as kv_cache_memory_bytes,
        num_gpu_blocks::bigint as num_gpu_blocks,
        kv_cache_tokens::bigint as kv_cache_tokens,
        max_concurrency::double as max_concurrency,
        max_concurrency_tokens::bigint as max_concurrency_tokens,
        latest_startup_outcome::varchar as latest_startup_outcome,
        failed_starts::integer as failed_starts,
        sources::varchar as sources,
        n_observations::integer as n_observations,
        last_observed_at::timestamptz as last_observed_at,
        peak_kv_usage::double as peak_kv_usage,
        p95_kv_usage::double as p95_kv_usage,
        peak_requests_running::double as peak_requests_running,
        peak_requests_waiting::double as peak_requests_waiting,
        preemptions_in_window::double as preemptions_in_window,
        peak_fb_used_bytes::bigint as peak_fb_used_bytes,
        gpus_seen::integer as gpus_seen,
        first_sample_at::timestamptz as first_sample_at,
        last_sample_at::timestamptz as last_sample_at,
        n_samples::bigint as n_samples,
        telemetry_source::varchar as telemetry_source
    from source
    cross join raw.run as run
)

select * from typed;
