-- raw.telemetry_deployments: one row per observed deployment: its preferred settings and measurements, and its usage (telemetry.deployment_summary).
-- grain: one deployment id.
-- columns: deployment_id, model_id, gpu_sku, tp, pp, dp, ep, engine, engine_version, engine_generation,
--   gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens, weight_dtype,
--   quantization, kv_cache_dtype, block_size, enable_prefix_caching, enforce_eager, triton_kernels, disable_custom_all_reduce, gpu_peer_access, unmodelled_features, speculative_config, total_gpu_memory_bytes,
--   requested_memory_bytes, other_process_bytes, weights_bytes, activation_peak_bytes, non_torch_bytes,
--   cuda_graph_bytes, kv_cache_memory_bytes, num_gpu_blocks, kv_cache_tokens, max_concurrency,
--   max_concurrency_tokens, latest_startup_outcome, failed_starts, sources, n_observations,
--   last_observed_at, peak_kv_usage, p95_kv_usage, peak_requests_running, peak_requests_waiting,
--   preemptions_in_window, peak_fb_used_bytes, gpus_seen, first_sample_at, last_sample_at,
--   n_samples, speed_window_s, measured_output_tokens_per_second, measured_throughput_source,
--   requests_in_window, observed_input_tokens, observed_output_tokens, observed_concurrency,
--   engines_seen, measured_tpot_mean_ms, measured_tpot_p50_ms, measured_tpot_p90_ms,
--   measured_tpot_p99_ms, measured_ttft_mean_ms, measured_ttft_p50_ms, measured_ttft_p90_ms,
--   measured_ttft_p99_ms, prefix_cache_queries, prefix_cache_hits, measured_prefix_hit_rate,
--   prefix_hit_rate_source, telemetry_source
-- written by: the `telemetry_predictions` asset, from the frame registered as `incoming`.
create or replace table raw.telemetry_deployments as
select * from incoming;

comment on table raw.telemetry_deployments is 'One row per observed deployment: its preferred settings and measurements, and its usage (telemetry.deployment_summary).';
