-- marts.effective_context_limits: the context to enforce per deployment and per model x GPU x TP at target concurrencies (latest run), with which limit binds.
-- grain: one kind x deployment (or model x gpu x tp x pp) x concurrency.
-- columns: run_id, run_date, kind, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, max_model_len, concurrency, model_limit, memory_limit,
--   calibrated_limit, measured_limit, effective_limit, binding, calibrated, calibration_scope,
--   n_observations
-- history: marts.effective_context_limits_history (every retained run, kept in place in raw); this
--   view is it at the published run (column list and comments live with the history view).
create or replace view marts.effective_context_limits as
select * from marts.effective_context_limits_history
where run_id = (select run.run_id from raw.run as run);

comment on view marts.effective_context_limits is 'The context to enforce per deployment and per model x GPU x TP at target concurrencies (latest run), with which limit binds.';
