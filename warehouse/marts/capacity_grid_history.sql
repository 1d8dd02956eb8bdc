-- marts.capacity_grid_history: marts.capacity_grid of every retained run: how each answer moved, run by run.
-- grain: one row per run_id x model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x dp x ep x context.
-- columns: run_id, run_date, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, dp, ep, num_gpus, context, weight_format, kv_cache_dtype,
--   weights_source, not_modelled, gpu_memory_bytes, gpu_memory_utilization, max_model_len, max_num_seqs,
--   kv_bytes_per_token, kv_bytes_per_token_per_gpu, state_bytes_per_sequence_per_gpu,
--   weights_bytes_per_gpu, activation_peak_bytes_per_gpu, non_torch_bytes_per_gpu,
--   cuda_graph_bytes_per_gpu, overhead_bytes_per_gpu, kv_budget_bytes_per_gpu, num_blocks,
--   block_size, kv_cache_tokens, physical_kv_token_slots, max_concurrency, b_max_memory, b_max,
--   fits, tpot_ms, output_tokens_per_second, usd_per_hour, usd_per_million_output_tokens
-- history: trimmed to the last CAPPLAN_HISTORY_RUNS runs by each publish (usd_per_hour at today's prices).
-- column comments: capacity/columns.py (the column dictionary), applied when the file is run
--   (warehouse.sql.build_relation); the columns here follow its order (tests/test_columns.py): each
--   `@columns <set> of deployments` line is that set of its columns, written out by warehouse.sql.read_sql.
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
    @columns deployment_keys of deployments,
    grid.context,
    @columns deployment_figures of deployments,
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
