-- staging.telemetry_deployments: one row per observed deployment: its preferred settings and measurements, and its usage (telemetry.deployment_summary), typed and stamped with the run.
-- grain: one deployment id.
-- columns: run_id, run_date, deployment_id, model, gpu, tp, pp, engine, engine_version,
--   engine_generation, gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens,
--   weight_dtype, quantization, kv_cache_dtype, block_size, enable_prefix_caching, enforce_eager, triton_kernels, disable_custom_all_reduce, gpu_peer_access, unmodelled_features, speculative_config,
--   total_gpu_memory_bytes, requested_memory_bytes, other_process_bytes, weights_bytes, activation_peak_bytes,
--   non_torch_bytes, cuda_graph_bytes, kv_cache_memory_bytes, num_gpu_blocks, kv_cache_tokens,
--   max_concurrency, max_concurrency_tokens, latest_startup_outcome, failed_starts, sources,
--   n_observations, last_observed_at, peak_kv_usage, p95_kv_usage, peak_requests_running,
--   peak_requests_waiting, preemptions_in_window, peak_fb_used_bytes, gpus_seen, first_sample_at,
--   last_sample_at, n_samples, speed_window_s, measured_output_tokens_per_second,
--   measured_throughput_source, requests_in_window, observed_input_tokens, observed_output_tokens,
--   observed_concurrency, engines_seen, measured_tpot_mean_ms, measured_tpot_p50_ms,
--   measured_tpot_p90_ms, measured_tpot_p99_ms, measured_ttft_mean_ms, measured_ttft_p50_ms,
--   measured_ttft_p90_ms, measured_ttft_p99_ms, prefix_cache_queries, prefix_cache_hits,
--   measured_prefix_hit_rate, prefix_hit_rate_source, telemetry_source
-- casts: `@casts observed_settings` / `@casts observed_memory_terms` are the telemetry columns both staging
--   views type alike (warehouse.sql TYPED_COLUMN_SETS), written out by warehouse.sql.read_sql.
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
        @casts observed_settings,
        @casts observed_memory_terms,
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
        speed_window_s::double as speed_window_s,
        measured_output_tokens_per_second::double as measured_output_tokens_per_second,
        measured_throughput_source::varchar as measured_throughput_source,
        requests_in_window::double as requests_in_window,
        observed_input_tokens::double as observed_input_tokens,
        observed_output_tokens::double as observed_output_tokens,
        observed_concurrency::double as observed_concurrency,
        engines_seen::integer as engines_seen,
        measured_tpot_mean_ms::double as measured_tpot_mean_ms,
        measured_tpot_p50_ms::double as measured_tpot_p50_ms,
        measured_tpot_p90_ms::double as measured_tpot_p90_ms,
        measured_tpot_p99_ms::double as measured_tpot_p99_ms,
        measured_ttft_mean_ms::double as measured_ttft_mean_ms,
        measured_ttft_p50_ms::double as measured_ttft_p50_ms,
        measured_ttft_p90_ms::double as measured_ttft_p90_ms,
        measured_ttft_p99_ms::double as measured_ttft_p99_ms,
        prefix_cache_queries::double as prefix_cache_queries,
        prefix_cache_hits::double as prefix_cache_hits,
        measured_prefix_hit_rate::double as measured_prefix_hit_rate,
        prefix_hit_rate_source::varchar as prefix_hit_rate_source,
        telemetry_source::varchar as telemetry_source
    from source
    cross join raw.run as run
)

select * from typed;
