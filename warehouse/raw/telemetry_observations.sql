-- raw.telemetry_observations: deployment observations read from the telemetry drop folder (telemetry).
-- grain: one deployment observation per source record (a startup-log engine start, a CSV/Parquet row, a vllm:cache_config_info sample).
-- columns: observation_id, deployment_id, source_kind, observed_at, observed_at_source, model_id,
--   model_name_raw, served_model_name, gpu_sku, gpu_name_raw, tp, pp, dp, ep, engine, engine_version,
--   engine_generation, gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens,
--   weight_dtype, quantization, kv_cache_dtype, block_size, enable_prefix_caching, enforce_eager, triton_kernels, disable_custom_all_reduce, gpu_peer_access, unmodelled_features, speculative_config, startup_outcome,
--   startup_error, total_gpu_memory_bytes, requested_memory_bytes, other_process_bytes, weights_bytes,
--   activation_peak_bytes, non_torch_bytes, cuda_graph_bytes, non_kv_bytes, kv_cache_memory_bytes,
--   num_gpu_blocks, num_cpu_blocks, kv_cache_tokens, max_concurrency, max_concurrency_tokens,
--   peak_kv_usage, peak_requests_running, peak_requests_waiting, preemptions_total, fb_used_bytes,
--   fb_free_bytes, input_rows, file, line
-- written by: the `telemetry_ingest` asset, from the frame registered as `incoming`.
create or replace table raw.telemetry_observations as
select * from incoming;

comment on table raw.telemetry_observations is 'Deployment observations read from the telemetry drop folder (telemetry).';
