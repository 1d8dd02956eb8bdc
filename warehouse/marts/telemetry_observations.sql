-- marts.telemetry_observations: deployment observations from the telemetry drop folder (latest run): settings and the engine's own memory numbers.
-- grain: one deployment observation per source record (a startup-log engine start, a CSV/Parquet row, a vllm:cache_config_info sample).
-- columns: run_id, run_date, observation_id, deployment_id, source_kind, observed_at,
--   observed_at_source, model, model_name_raw, served_model_name, gpu, gpu_name_raw, tp, pp,
--   engine, engine_version, engine_generation, gpu_memory_utilization, max_model_len, max_num_seqs,
--   max_num_batched_tokens, weight_dtype, quantization, kv_cache_dtype, block_size,
--   enable_prefix_caching, enforce_eager, triton_kernels, disable_custom_all_reduce, gpu_peer_access, unmodelled_features, startup_outcome, startup_error, total_gpu_memory_bytes,
--   requested_memory_bytes, other_process_bytes, weights_bytes, activation_peak_bytes, non_torch_bytes,
--   cuda_graph_bytes, non_kv_bytes, kv_cache_memory_bytes, num_gpu_blocks, num_cpu_blocks,
--   kv_cache_tokens, max_concurrency, max_concurrency_tokens, peak_kv_usage, peak_requests_running,
--   peak_requests_waiting, preemptions_total, fb_used_bytes, fb_free_bytes, input_rows, file, line
-- history: marts.telemetry_observations_history (every retained run).
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
comment on column marts.telemetry_observations.observation_id is 'Stable id of the observation: hash of file, line and engine-start segment.';
comment on column marts.telemetry_observations.deployment_id is 'Deployment id: a label or column, the sidecar''s deployment_id, else the folder name.';
comment on column marts.telemetry_observations.source_kind is 'vllm_log, prometheus (vllm:cache_config_info), csv or parquet.';
comment on column marts.telemetry_observations.observed_at is 'When the observation was made (UTC).';
comment on column marts.telemetry_observations.observed_at_source is 'Which rule gave observed_at: sample, comment, sidecar, column or mtime.';
comment on column marts.telemetry_observations.model is 'Registry id of the model (marts.models.model).';
comment on column marts.telemetry_observations.model_name_raw is 'The model name as the source spelled it (path, alias, repo).';
comment on column marts.telemetry_observations.served_model_name is '--served-model-name, or the Prometheus model_name label.';
comment on column marts.telemetry_observations.gpu is 'GPU catalog id (marts.gpus.gpu); null when nothing names the GPU.';
comment on column marts.telemetry_observations.gpu_name_raw is 'The GPU name as written (nvidia-smi, DCGM modelName, sidecar).';
comment on column marts.telemetry_observations.engine is 'Serving engine (vllm unless a sidecar or column says otherwise).';
comment on column marts.telemetry_observations.engine_version is 'Engine version as reported (banner, API server line, image tag).';
comment on column marts.telemetry_observations.engine_generation is 'v0 or v1 when the log shows it.';
comment on column marts.telemetry_observations.gpu_memory_utilization is '--gpu-memory-utilization, in (0, 1].';
comment on column marts.telemetry_observations.max_model_len is 'Engine max_model_len (config, args, or the T of Maximum concurrency).';
comment on column marts.telemetry_observations.max_num_seqs is 'Engine max_num_seqs, configured or defaulted.';
comment on column marts.telemetry_observations.max_num_batched_tokens is 'Engine max_num_batched_tokens, configured or defaulted.';
comment on column marts.telemetry_observations.weight_dtype is 'Activation / weight dtype from dtype= (bfloat16, float16...).';
comment on column marts.telemetry_observations.quantization is 'Quantization method (fp8, awq_marlin, gptq_marlin, mxfp4...).';
comment on column marts.telemetry_observations.kv_cache_dtype is 'KV cache dtype: auto (the model dtype), fp8, fp8_e4m3...';
comment on column marts.telemetry_observations.block_size is 'Tokens per KV block (hybrid models: the forced attention block size).';
comment on column marts.telemetry_observations.enable_prefix_caching is 'Whether prefix caching was on.';
comment on column marts.telemetry_observations.enforce_eager is 'No CUDA graphs (--enforce-eager, SGLang --disable-cuda-graph): no graph estimate is deducted.';
comment on column marts.telemetry_observations.triton_kernels is 'Whether gpt-oss''s MXFP4 experts ran the OAI Triton kernels (the log''s Using Triton / Marlin backend line; false also from Marlin''s FP4 warning, which NVFP4 models on pre-Blackwell GPUs print too and where it sizes nothing): on Hopper Marlin''s layout takes more weight memory.';
comment on column marts.telemetry_observations.disable_custom_all_reduce is 'vLLM --disable-custom-all-reduce: at TP > 1 the CUDA graphs capture NCCL''s all-reduce, which the graph estimate charges more for.';
comment on column marts.telemetry_observations.gpu_peer_access is 'False where vLLM said the P2P test failed (custom all-reduce off); null where the log does not say.';
comment on column marts.telemetry_observations.unmodelled_features is 'Features the engine ran with that capplan does not size (lora, speculative, cpu_offload, dp_attention; comma-separated); its prediction is flagged not modelled.';
comment on column marts.telemetry_observations.startup_outcome is 'started, failed (KV too small, OOM) or unknown (a fragment).';
comment on column marts.telemetry_observations.startup_error is 'The startup error, one line, when failed.';
comment on column marts.telemetry_observations.total_gpu_memory_bytes is 'Device total the engine saw, bytes per GPU.';
comment on column marts.telemetry_observations.requested_memory_bytes is 'total x utilization, bytes per GPU.';
comment on column marts.telemetry_observations.other_process_bytes is 'Memory in use when the engine started (total - free, as its log prints both): other processes and its own CUDA context, bytes per GPU.';
comment on column marts.telemetry_observations.weights_bytes is 'Model weights per GPU (Model loading took X GiB), bytes.';
comment on column marts.telemetry_observations.activation_peak_bytes is 'Activation peak of the profiling pass per GPU, bytes.';
comment on column marts.telemetry_observations.non_torch_bytes is 'Non-torch memory per GPU (CUDA context, NCCL), bytes.';
comment on column marts.telemetry_observations.cuda_graph_bytes is 'CUDA graph memory per GPU (captured, else estimated), bytes.';
comment on column marts.telemetry_observations.non_kv_bytes is 'Total non KV cache memory per GPU, bytes.';
comment on column marts.telemetry_observations.kv_cache_memory_bytes is 'Memory the engine sized its KV pool from, per GPU, bytes.';
comment on column marts.telemetry_observations.num_gpu_blocks is 'KV blocks on the GPU (# GPU blocks, cache_config_info).';
comment on column marts.telemetry_observations.num_cpu_blocks is 'Swap blocks on the CPU.';
comment on column marts.telemetry_observations.kv_cache_tokens is 'GPU KV cache size: N tokens, as that engine version prints it.';
comment on column marts.telemetry_observations.max_concurrency is 'Maximum concurrency for T tokens per request, as printed.';
comment on column marts.telemetry_observations.max_concurrency_tokens is 'The T of that line.';
comment on column marts.telemetry_observations.peak_kv_usage is 'Largest KV usage fraction the source reported.';
comment on column marts.telemetry_observations.peak_requests_running is 'Most running requests the source reported.';
comment on column marts.telemetry_observations.peak_requests_waiting is 'Most waiting requests the source reported.';
comment on column marts.telemetry_observations.preemptions_total is 'Preemption counter value (exports).';
comment on column marts.telemetry_observations.fb_used_bytes is 'Framebuffer used per GPU, bytes (exports).';
comment on column marts.telemetry_observations.fb_free_bytes is 'Framebuffer free per GPU, bytes (exports).';
comment on column marts.telemetry_observations.input_rows is 'Input rows this observation was built from.';
comment on column marts.telemetry_observations.line is 'First line (CSV line, Parquet row).';
