-- raw.grid_limits: the model_gpu_tp rows of the effective context limits, one copy per limits partition version.
-- grain: one row per part_id x model x gpu x tp x pp x dp x ep x concurrency.
-- columns: part_id, kind, deployment_id, model, model_family, gpu, engine, engine_version, weight_dtype,
--   kv_dtype, tp, pp, max_model_len, concurrency, model_limit, memory_limit, calibrated_limit,
--   measured_limit, effective_limit, binding, calibrated, calibration_scope, n_observations
-- key: part_id (raw.limit_partitions); the other columns as in raw.effective_context_limits
--   (kind = model_gpu_tp, deployment_id null).
-- history: kept in place, each row once: raw.limit_partitions maps every retained run to the
--   part_ids it published; publishing drops the rows no retained run refers to.
-- written by: the `effective_context_limits` asset (recommendations.limit_partitions), one
--   partition at a time from its Parquet file in the run's staging area, registered as `incoming`.
append incoming to raw.grid_limits keyed by part_id;

comment on table raw.grid_limits is 'Effective context limits of every model x GPU x TP (kind model_gpu_tp), stored once per partition version.';
