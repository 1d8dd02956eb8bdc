-- marts.deployments_history: every deployment of every retained run's grid (marts.deployments, run by run).
-- grain: one row per run_id x model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x dp x ep.
-- columns: run_id, run_date, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, dp, ep, num_gpus, weight_format, kv_cache_dtype, weights_source, not_modelled,
--   gpu_memory_bytes, gpu_memory_utilization, max_model_len, max_num_seqs, kv_bytes_per_token,
--   kv_bytes_per_token_per_gpu, state_bytes_per_sequence_per_gpu, weights_bytes_per_gpu,
--   activation_peak_bytes_per_gpu, non_torch_bytes_per_gpu, cuda_graph_bytes_per_gpu,
--   overhead_bytes_per_gpu, kv_budget_bytes_per_gpu, num_blocks, block_size, kv_cache_tokens,
--   physical_kv_token_slots, usd_per_hour
-- column comments: capacity/columns.py (the column dictionary), applied when the file is run
--   (warehouse.sql.build_relation); the columns here follow its order (tests/test_columns.py): each
--   `@columns <set> of deployments` line is that set of its columns, written out by warehouse.sql.read_sql.
-- history: trimmed to the last CAPPLAN_HISTORY_RUNS runs by each publish (usd_per_hour at today's
--   prices). marts.deployments is this view at the published run: one column list, one set of
--   column comments (the current marts take theirs from their history view when they are built).
create or replace view marts.deployments_history as
with deployments as (
    select * from staging.deployments
),

gpus as (
    select gpu, price_usd_per_gpu_hour from staging.gpus
)

select
    deployments.run_id,
    deployments.run_date,
    deployments.deployment_id,
    @columns deployment_keys of deployments,
    @columns deployment_figures of deployments,
    deployments.num_gpus * gpus.price_usd_per_gpu_hour as usd_per_hour
from deployments
left join gpus on deployments.gpu = gpus.gpu;

comment on view marts.deployments_history is 'marts.deployments of every retained run (run_id, run_date on each row).';
