-- marts.deployments: every deployment of the latest run's grid, with its memory breakdown and KV pool.
-- grain: one row per model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x dp x ep.
-- columns: run_id, run_date, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, dp, ep, num_gpus, weight_format, kv_cache_dtype, weights_source, not_modelled,
--   gpu_memory_bytes, gpu_memory_utilization, max_model_len, max_num_seqs, kv_bytes_per_token,
--   kv_bytes_per_token_per_gpu, state_bytes_per_sequence_per_gpu, weights_bytes_per_gpu,
--   activation_peak_bytes_per_gpu, non_torch_bytes_per_gpu, cuda_graph_bytes_per_gpu,
--   overhead_bytes_per_gpu, kv_budget_bytes_per_gpu, num_blocks, block_size, kv_cache_tokens,
--   physical_kv_token_slots, usd_per_hour
-- history: marts.deployments_history (every retained run, kept in place in raw.deployments); this
--   view is it at the published run: one column list, and its column comments (copied when built).
create or replace view marts.deployments as
select * from marts.deployments_history
where run_id = (select run.run_id from raw.run as run);

comment on view marts.deployments is 'Every deployment (model x GPU x engine x dtypes x TP x PP) of the latest run: what does not depend on the context.';
