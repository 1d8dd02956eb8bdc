-- marts.capacity_grid_history: marts.capacity_grid of every retained run: how each answer moved, run by run.
-- grain: one row per run_id x model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x context.
-- columns: run_id, run_date, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, num_gpus, context, weight_format, kv_cache_dtype,
--   weights_source, not_modelled, gpu_memory_bytes, gpu_memory_utilization, max_model_len, max_num_seqs,
--   kv_bytes_per_token, kv_bytes_per_token_per_gpu, state_bytes_per_sequence_per_gpu,
--   weights_bytes_per_gpu, activation_peak_bytes_per_gpu, non_torch_bytes_per_gpu,
--   cuda_graph_bytes_per_gpu, overhead_bytes_per_gpu, kv_budget_bytes_per_gpu, num_blocks,
--   block_size, kv_cache_tokens, physical_kv_token_slots, max_concurrency, b_max_memory, b_max,
--   fits, tpot_ms, output_tokens_per_second, usd_per_hour, usd_per_million_output_tokens
-- history: trimmed to the last CAPPLAN_HISTORY_RUNS runs by each publish (usd_per_hour at today's prices).
-- defines: the table macro marts.capacity_grid_at(latest_only), the one column list of the grid;
--   this view is capacity_grid_at(false), marts.capacity_grid is capacity_grid_at(true) (the run
--   filter is applied to both inputs before the join, so reads of the current grid stay fast).
create or replace macro marts.capacity_grid_at(latest_only) as table
with grid as (
    select * from staging.capacity_grid
    where not latest_only or run_id = (select run.run_id from raw.run as run)
),

deployments as (
    select * from marts.deployments_history
    where not latest_only or run_id = (select run.run_id from raw.run as run)
)

select
    grid.run_id,
    grid.run_date,
    deployments.deployment_id,
    deployments.model,
    deployments.model_family,
    deployments.gpu,
    deployments.engine,
    deployments.engine_version,
    deployments.weight_dtype,
    deployments.kv_dtype,
    deployments.tp,
    deployments.pp,
    deployments.num_gpus,
    grid.context,
    deployments.weight_format,
    deployments.kv_cache_dtype,
    deployments.weights_source,
    deployments.not_modelled,
    deployments.gpu_memory_bytes,
    deployments.gpu_memory_utilization,
    deployments.max_model_len,
    deployments.max_num_seqs,
    deployments.kv_bytes_per_token,
    deployments.kv_bytes_per_token_per_gpu,
    deployments.state_bytes_per_sequence_per_gpu,
    deployments.weights_bytes_per_gpu,
    deployments.activation_peak_bytes_per_gpu,
    deployments.non_torch_bytes_per_gpu,
    deployments.cuda_graph_bytes_per_gpu,
    deployments.overhead_bytes_per_gpu,
    deployments.kv_budget_bytes_per_gpu,
    deployments.num_blocks,
    deployments.block_size,
    deployments.kv_cache_tokens,
    deployments.physical_kv_token_slots,
    grid.max_concurrency,
    grid.b_max_memory,
    grid.b_max,
    grid.fits,
    grid.tpot_ms,
    grid.output_tokens_per_second,
    deployments.usd_per_hour,
    deployments.usd_per_hour / nullif(grid.output_tokens_per_second * 3600, 0) * 1e6 as usd_per_million_output_tokens
from grid
inner join deployments on grid.run_id = deployments.run_id and grid.deployment_id = deployments.deployment_id;

create or replace view marts.capacity_grid_history as
select * from marts.capacity_grid_at(false);

comment on view marts.capacity_grid_history is 'marts.capacity_grid of every retained run (run_id, run_date on each row).';
comment on column marts.capacity_grid_history.run_id is 'The nightly run that published this row (marts.runs.run_id).';
comment on column marts.capacity_grid_history.run_date is 'UTC date the run started.';
comment on column marts.capacity_grid_history.deployment_id is 'Key of the deployment within its run (marts.deployments.deployment_id; join history on run_id and deployment_id).';
comment on column marts.capacity_grid_history.model is 'Hugging Face repo id (marts.models.model).';
comment on column marts.capacity_grid_history.model_family is 'Model family.';
comment on column marts.capacity_grid_history.gpu is 'GPU catalog id (marts.gpus.gpu).';
comment on column marts.capacity_grid_history.engine is 'Engine profile whose accounting is reproduced: vllm, sglang, trtllm, plain.';
comment on column marts.capacity_grid_history.engine_version is 'Engine version the profile follows (vLLM rules change by release).';
comment on column marts.capacity_grid_history.weight_dtype is 'Requested weight dtype, as capplan estimate --dtype: bf16, auto (the checkpoint''s own format), fp8, int4, mxfp4.';
comment on column marts.capacity_grid_history.kv_dtype is 'Requested KV cache dtype, as --kv-dtype: auto (the model dtype) or fp8.';
comment on column marts.capacity_grid_history.tp is 'Tensor-parallel size.';
comment on column marts.capacity_grid_history.pp is 'Pipeline-parallel size.';
comment on column marts.capacity_grid_history.num_gpus is 'GPUs per replica: tp * pp.';
comment on column marts.capacity_grid_history.context is 'Tokens per sequence T (prompt included): powers of two from 1,024, plus the model limit.';
comment on column marts.capacity_grid_history.weight_format is 'Weight format weight_dtype resolves to for this model (bf16, fp8, int4-awq, mxfp4...).';
comment on column marts.capacity_grid_history.kv_cache_dtype is 'KV cache dtype kv_dtype resolves to (bfloat16, float16, fp8...).';
comment on column marts.capacity_grid_history.weights_source is 'checkpoint (scaled from model.safetensors.index.json) or modeled (counted from the config).';
comment on column marts.capacity_grid_history.not_modelled is 'Why the engine''s accounting of this model is not modelled (e.g. TensorRT-LLM per-window pools): the row''s numbers are then capplan''s approximation; NULL when modelled.';
comment on column marts.capacity_grid_history.gpu_memory_bytes is 'Device memory the engine sees (bytes, as the driver reports it).';
comment on column marts.capacity_grid_history.gpu_memory_utilization is 'Fraction of device memory the engine may use.';
comment on column marts.capacity_grid_history.max_model_len is 'The max_model_len the deployment runs with: the model''s context limit when the engine starts with it, else the largest length that starts (vLLM''s auto-fit, --max-model-len -1); contexts above it do not fit.';
comment on column marts.capacity_grid_history.max_num_seqs is 'Engine cap on concurrent sequences (null when none).';
comment on column marts.capacity_grid_history.kv_bytes_per_token is 'KV bytes per token over every layer that stores per-token KV, whole model (sliding layers counted as inside the window).';
comment on column marts.capacity_grid_history.kv_bytes_per_token_per_gpu is 'kv_bytes_per_token on the most loaded GPU under TP/PP (MLA latents replicated).';
comment on column marts.capacity_grid_history.state_bytes_per_sequence_per_gpu is 'Constant per-sequence state of Mamba/linear-attention layers on the most loaded GPU (bytes; 0 for pure attention).';
comment on column marts.capacity_grid_history.weights_bytes_per_gpu is 'Weights on the most loaded GPU (bytes).';
comment on column marts.capacity_grid_history.activation_peak_bytes_per_gpu is 'Peak activation memory of the engine''s profiling pass (bytes).';
comment on column marts.capacity_grid_history.non_torch_bytes_per_gpu is 'CUDA context, NCCL and other non-torch memory (bytes).';
comment on column marts.capacity_grid_history.cuda_graph_bytes_per_gpu is 'CUDA-graph memory deducted before sizing the KV cache (bytes; 0 where the release does not).';
comment on column marts.capacity_grid_history.overhead_bytes_per_gpu is 'Sum of the overhead terms (bytes).';
comment on column marts.capacity_grid_history.kv_budget_bytes_per_gpu is 'Memory left for the KV cache per GPU: usable - weights - overhead (bytes; <= 0 means it does not fit).';
comment on column marts.capacity_grid_history.num_blocks is 'KV blocks in the pool: floor(budget / bytes per block).';
comment on column marts.capacity_grid_history.block_size is 'Tokens per KV block (page) of the engine.';
comment on column marts.capacity_grid_history.kv_cache_tokens is 'What the engine prints as the KV cache size in tokens (meaning per engine version; see README).';
comment on column marts.capacity_grid_history.physical_kv_token_slots is 'num_blocks * block_size.';
comment on column marts.capacity_grid_history.max_concurrency is 'Maximum concurrency for context tokens per request, as vLLM prints it (fractional).';
comment on column marts.capacity_grid_history.b_max_memory is 'Whole sequences of context tokens that fit in the KV pool at once (memory bound only).';
comment on column marts.capacity_grid_history.b_max is 'Concurrent sequences of context tokens: b_max_memory capped by max_num_seqs.';
comment on column marts.capacity_grid_history.fits is 'True when the engine starts (its own start check at max_model_len) and at least one sequence of context tokens fits.';
comment on column marts.capacity_grid_history.tpot_ms is 'Predicted time per output token (ms) with b_max sequences of context tokens decoding (capacity.performance roofline, efficiency fitted on public benchmarks); NULL where nothing fits or the GPU lacks bandwidth / TFLOPS data.';
comment on column marts.capacity_grid_history.output_tokens_per_second is 'Predicted decode throughput of one replica at b_max sequences (b_max x PP / TPOT).';
comment on column marts.capacity_grid_history.usd_per_million_output_tokens is 'usd_per_hour over the replica''s output tokens per hour at b_max, x 1e6: the best case of a full pool.';
comment on column marts.capacity_grid_history.usd_per_hour is 'On-demand USD per hour of one replica at today''s price (also on past runs): num_gpus * marts.gpus.price_usd_per_gpu_hour.';
