-- raw.effective_context_limits: effective context limits per deployment and per model x GPU x TP at target concurrencies (recommendations.limits).
-- grain: one kind x deployment (or model x gpu x tp x pp) x concurrency.
-- columns: run_id, run_date, kind, deployment_id, model, model_family, gpu, engine, engine_version, weight_dtype,
--   kv_dtype, tp, pp, max_model_len, concurrency, model_limit, memory_limit, calibrated_limit,
--   measured_limit, effective_limit, binding, calibrated, calibration_scope, n_observations
-- rows: the kind = deployment rows; the kind = model_gpu_tp rows live in raw.grid_limits, one
--   copy per limits partition version (staging.effective_context_limits puts both together).
-- history: kept in place, keyed by run_id: each run appends its own rows (replacing them if it runs
--   again) and publishing trims the runs beyond CAPPLAN_HISTORY_RUNS.
-- written by: the `effective_context_limits` asset, from the frame registered as `incoming`.
append incoming to raw.effective_context_limits keyed by run_id;

comment on table raw.effective_context_limits is 'Effective context limits per deployment and per model x GPU x TP at target concurrencies (recommendations.limits).';
