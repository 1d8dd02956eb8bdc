-- marts.context_limits: the longest context each deployment serves at a target concurrency, latest run.
-- grain: one row per model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x dp x ep x concurrency.
-- columns: run_id, run_date, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, dp, ep, num_gpus, concurrency, max_context
-- history: marts.context_limits_history (every retained run, kept in place in raw); this view is
--   marts.context_limits_at(true), the history's rows at the published run.
create or replace view marts.context_limits as
select * from marts.context_limits_at(true);

comment on view marts.context_limits is 'Max context per deployment for target concurrencies 1, 8, 32, 128, 512 (latest run).';
