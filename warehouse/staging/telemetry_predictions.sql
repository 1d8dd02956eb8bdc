-- staging.telemetry_predictions: capplan's prediction for every observed deployment, with the settings it reported (telemetry.predictions), typed and stamped with the run.
-- grain: one deployment id.
-- columns: run_id, run_date, deployment_id, prediction_status, prediction_reason, not_modelled, model,
--   model_family, gpu, engine, engine_version, engine_series, engine_profile, weight_dtype,
--   kv_dtype, weight_format, kv_cache_dtype, tp, pp, gpu_memory_bytes, gpu_memory_utilization,
--   max_model_len, max_num_seqs, max_num_batched_tokens, block_size, context_tokens,
--   predicted_weights_bytes, predicted_activation_peak_bytes, predicted_non_torch_bytes,
--   predicted_cuda_graph_bytes, predicted_kv_pool_bytes, predicted_num_gpu_blocks,
--   predicted_kv_cache_tokens, predicted_max_concurrency, predicted_b_max,
--   predicted_kv_capacity_tokens, predicted_fits, predicted_fit_reason, kv_block_bytes,
--   measured_kv_pool_bytes, measured_kv_pool_source, measured_b_max, measured_kv_capacity_tokens,
--   speed_concurrency, speed_input_tokens, speed_output_tokens, predicted_output_tokens_per_second,
--   predicted_tpot_ms, predicted_ttft_ms, speed_reason
create or replace view staging.telemetry_predictions as
with source as (
    select * from raw.telemetry_predictions
),

typed as (
    select
        run.run_id,
        run.run_date,
        deployment_id::varchar as deployment_id,
        prediction_status::varchar as prediction_status,
        prediction_reason::varchar as prediction_reason,
        not_modelled::varchar as not_modelled,
        model_id::varchar as model,
        model_family::varchar as model_family,
        gpu::varchar as gpu,
        engine::varchar as engine,
        engine_version::varchar as engine_version,
        engine_series::varchar as engine_series,
        engine_profile::varchar as engine_profile,
        weight_dtype::varchar as weight_dtype,
        kv_dtype::varchar as kv_dtype,
        weight_format::varchar as weight_format,
        kv_cache_dtype::varchar as kv_cache_dtype,
        tp::integer as tp,
        pp::integer as pp,
        gpu_memory_bytes::bigint as gpu_memory_bytes,
        gpu_memory_utilization::double as gpu_memory_utilization,
        max_model_len::bigint as max_model_len,
        max_num_seqs::bigint as max_num_seqs,
        max_num_batched_tokens::bigint as max_num_batched_tokens,
        block_size::bigint as block_size,
        context_tokens::bigint as context_tokens,
        predicted_weights_bytes::bigint as predicted_weights_bytes,
        predicted_activation_peak_bytes::bigint as predicted_activation_peak_bytes,
        predicted_non_torch_bytes::bigint as predicted_non_torch_bytes,
        predicted_cuda_graph_bytes::bigint as predicted_cuda_graph_bytes,
        predicted_kv_pool_bytes::bigint as predicted_kv_pool_bytes,
        predicted_num_gpu_blocks::bigint as predicted_num_gpu_blocks,
        predicted_kv_cache_tokens::bigint as predicted_kv_cache_tokens,
        predicted_max_concurrency::double as predicted_max_concurrency,
        predicted_b_max::bigint as predicted_b_max,
        predicted_kv_capacity_tokens::bigint as predicted_kv_capacity_tokens,
        predicted_fits::boolean as predicted_fits,
        predicted_fit_reason::varchar as predicted_fit_reason,
        kv_block_bytes::bigint as kv_block_bytes,
        measured_kv_pool_bytes::bigint as measured_kv_pool_bytes,
        measured_kv_pool_source::varchar as measured_kv_pool_source,
        measured_b_max::bigint as measured_b_max,
        measured_kv_capacity_tokens::bigint as measured_kv_capacity_tokens,
        speed_concurrency::bigint as speed_concurrency,
        speed_input_tokens::bigint as speed_input_tokens,
        speed_output_tokens::bigint as speed_output_tokens,
        predicted_output_tokens_per_second::double as predicted_output_tokens_per_second,
        predicted_tpot_ms::double as predicted_tpot_ms,
        predicted_ttft_ms::double as predicted_ttft_ms,
        speed_reason::varchar as speed_reason
    from source
    cross join raw.run as run
)

select * from typed;
