-- raw.telemetry_predictions: capplan's prediction for every observed deployment, with the settings it reported (telemetry.predictions).
-- grain: one deployment id.
-- columns: deployment_id, prediction_status, prediction_reason, not_modelled, model_id, model_family, gpu,
--   engine, engine_version, engine_series, engine_profile, weight_dtype, kv_dtype, weight_format,
--   kv_cache_dtype, tp, pp, gpu_memory_bytes, gpu_memory_utilization, max_model_len, max_num_seqs,
--   max_num_batched_tokens, block_size, context_tokens, predicted_weights_bytes,
--   predicted_activation_peak_bytes, predicted_non_torch_bytes, predicted_cuda_graph_bytes,
--   predicted_kv_pool_bytes, predicted_num_gpu_blocks, predicted_kv_cache_tokens,
--   predicted_max_concurrency, predicted_b_max, predicted_kv_capacity_tokens, predicted_fits,
--   predicted_fit_reason, kv_block_bytes, measured_kv_pool_bytes, measured_kv_pool_source,
--   measured_b_max, measured_kv_capacity_tokens, speed_concurrency, speed_input_tokens,
--   speed_output_tokens, predicted_output_tokens_per_second, predicted_tpot_ms, predicted_ttft_ms,
--   speed_reason
-- written by: the `telemetry_predictions` asset, from the frame registered as `incoming`.
create or replace table raw.telemetry_predictions as
select * from incoming;

comment on table raw.telemetry_predictions is 'Capplan''s prediction for every observed deployment, with the settings it reported (telemetry.predictions).';
