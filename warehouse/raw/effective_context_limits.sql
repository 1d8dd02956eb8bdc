-- raw.effective_context_limits: effective context limits per deployment and per model x GPU x TP at target concurrencies (warehouse.recommendations.limits).
-- grain: one kind x deployment (or model x gpu x tp x pp) x concurrency.
-- columns: kind, deployment_id, model, model_family, gpu, engine, engine_version, weight_dtype,
--   kv_dtype, tp, pp, max_model_len, concurrency, model_limit, memory_limit, calibrated_limit,
--   measured_limit, effective_limit, binding, calibrated, calibration_scope, n_observations
-- written by: the `effective_context_limits` asset, from the frame registered as `incoming`.
create or replace table raw.effective_context_limits as
select * from incoming;

comment on table raw.effective_context_limits is 'Effective context limits per deployment and per model x GPU x TP at target concurrencies (warehouse.recommendations.limits).';
