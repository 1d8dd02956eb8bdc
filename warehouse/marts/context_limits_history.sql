-- marts.context_limits_history: marts.context_limits of every retained run.
-- grain: one row per run_id x model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x dp x ep x concurrency.
-- columns: run_id, run_date, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, dp, ep, num_gpus, concurrency, max_context
-- history: trimmed to the last CAPPLAN_HISTORY_RUNS runs by each publish.
-- defines: the table macro marts.context_limits_at(latest_only), the one column list; this view is
--   context_limits_at(false), marts.context_limits is context_limits_at(true).
-- column comments: context_limits_history.yaml beside this file; the columns the marts share, capacity/columns.py.
-- select list: `@columns deployment_keys of deployments` is the dictionary's deployment keys (warehouse.sql.read_sql).
create or replace macro marts.context_limits_at(latest_only) as table
with limits as (
    select * from staging.context_limits
    where not latest_only or run_id = (select run.run_id from raw.run as run)
),

deployments as (
    select * from staging.deployments
    where not latest_only or run_id = (select run.run_id from raw.run as run)
)

select
    limits.run_id,
    limits.run_date,
    deployments.deployment_id,
    @columns deployment_keys of deployments,
    limits.concurrency,
    limits.max_context
from limits
inner join deployments on limits.run_id = deployments.run_id and limits.deployment_id = deployments.deployment_id;

create or replace view marts.context_limits_history as
select * from marts.context_limits_at(false);

comment on view marts.context_limits_history is 'marts.context_limits of every retained run (run_id, run_date on each row).';
