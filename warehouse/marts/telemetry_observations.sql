-- marts.telemetry_observations: deployment observations from the telemetry drop folder (latest run): settings and the engine's own memory numbers.
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
-- history: marts.telemetry_observations_history (every retained run).
-- column comments: telemetry_observations.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.telemetry_observations as
with observations as (
    select * from staging.telemetry_observations
)

select
    run_id,
    run_date,
    observation_id,
    deployment_id,
    source_kind,
    observed_at,
    observed_at_source,
    model,
    model_name_raw,
    served_model_name,
    gpu,
    gpu_name_raw,
    tp,
    pp,
    engine,
    engine_version,
    engine_generation,
    gpu_memory_utilization,
    max_model_len,
    max_num_seqs,
    max_num_batched_tokens,
    weight_dtype,
    quantization,
    kv_cache_dtype,
    block_size,
    enable_prefix_caching,
    enforce_eager,
    triton_kernels,
    disable_custom_all_reduce,
    gpu_peer_access,
    unmodelled_features,
    speculative_config,
    startup_outcome,
    startup_error,
    total_gpu_memory_bytes,
    requested_memory_bytes,
    other_process_bytes,
    weights_bytes,
    activation_peak_bytes,
    non_torch_bytes,
    cuda_graph_bytes,
    non_kv_bytes,
    kv_cache_memory_bytes,
    num_gpu_blocks,
    num_cpu_blocks,
    kv_cache_tokens,
    max_concurrency,
    max_concurrency_tokens,
    peak_kv_usage,
    peak_requests_running,
    peak_requests_waiting,
    preemptions_total,
    fb_used_bytes,
    fb_free_bytes,
    input_rows,
    file,
    line
from observations;

comment on view marts.telemetry_observations is 'Deployment observations from the telemetry drop folder (latest run): settings and the engine''s own memory numbers.';
