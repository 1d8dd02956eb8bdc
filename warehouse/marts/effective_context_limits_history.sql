-- marts.effective_context_limits_history: marts.effective_context_limits of every retained run.
-- grain: one row per run_id x kind x deployment (or model x gpu x tp x pp) x concurrency.
-- columns: run_id, run_date, kind, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, max_model_len, concurrency, model_limit, memory_limit,
--   calibrated_limit, measured_limit, effective_limit, binding, calibrated, calibration_scope,
--   n_observations
-- history: kept in place, each row once: the deployment rows per run (raw.effective_context_limits,
--   keyed by run_id), the model_gpu_tp rows per limits partition version (raw.grid_limits, mapped to
--   the runs that published them by raw.limit_partitions); trimmed to the last CAPPLAN_HISTORY_RUNS
--   runs by each publish. marts.effective_context_limits is this view at the published run: one
--   column list, one set of column comments.
-- column comments: effective_context_limits_history.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.effective_context_limits_history as
with limits as (
    select * from staging.effective_context_limits
)

select
    run_id,
    run_date,
    kind,
    deployment_id,
    model,
    model_family,
    gpu,
    engine,
    engine_version,
    weight_dtype,
    kv_dtype,
    tp,
    pp,
    max_model_len,
    concurrency,
    model_limit,
    memory_limit,
    calibrated_limit,
    measured_limit,
    effective_limit,
    binding,
    calibrated,
    calibration_scope,
    n_observations
from limits;

comment on view marts.effective_context_limits_history is 'marts.effective_context_limits of every retained run (run_id, run_date on each row).';
