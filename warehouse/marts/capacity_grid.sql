-- marts.capacity_grid: B_max and the full memory breakdown of every deployment and context, latest run.
-- grain: one row per model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x dp x ep x context.
-- columns: run_id, run_date, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, dp, ep, num_gpus, context, weight_format, kv_cache_dtype,
--   weights_source, not_modelled, gpu_memory_bytes, gpu_memory_utilization, max_model_len, max_num_seqs,
--   kv_bytes_per_token, kv_bytes_per_token_per_gpu, state_bytes_per_sequence_per_gpu,
--   weights_bytes_per_gpu, activation_peak_bytes_per_gpu, non_torch_bytes_per_gpu,
--   cuda_graph_bytes_per_gpu, overhead_bytes_per_gpu, kv_budget_bytes_per_gpu, num_blocks,
--   block_size, kv_cache_tokens, physical_kv_token_slots, max_concurrency, b_max_memory, b_max,
--   fits, tpot_ms, output_tokens_per_second, usd_per_hour, usd_per_million_output_tokens
-- history: marts.capacity_grid_history (every retained run, kept in place in raw); this view is
--   marts.capacity_grid_at(true), the history's rows at the published run (column list and column
--   comments live with the history view).
create or replace view marts.capacity_grid as
select * from marts.capacity_grid_at(true);

comment on view marts.capacity_grid is 'Every model x GPU x engine x dtype x KV dtype x TP x PP x context of the latest run, as capplan estimate --json computes it.';
