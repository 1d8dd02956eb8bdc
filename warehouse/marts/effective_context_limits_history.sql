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
comment on column marts.effective_context_limits_history.kind is 'deployment (an observed deployment, its own settings) or model_gpu_tp (a registry model on a GPU at a TP x PP, vLLM at capplan''s default release, checkpoint weights, KV in the model dtype).';
comment on column marts.effective_context_limits_history.deployment_id is 'Observed deployment (kind = deployment); null for model_gpu_tp rows.';
comment on column marts.effective_context_limits_history.model is 'Registry id (marts.models.model).';
comment on column marts.effective_context_limits_history.gpu is 'GPU catalog id; null for a deployment that named only its device total.';
comment on column marts.effective_context_limits_history.engine_version is 'Engine version the limits are computed for.';
comment on column marts.effective_context_limits_history.weight_dtype is '--dtype: auto (the checkpoint as published), bf16, fp8...';
comment on column marts.effective_context_limits_history.kv_dtype is '--kv-cache-dtype: auto (the model dtype), fp8...';
comment on column marts.effective_context_limits_history.max_model_len is 'The engine''s max_model_len (model_gpu_tp: the model''s context limit).';
comment on column marts.effective_context_limits_history.concurrency is 'Target concurrent sequences: 1, 8, 32, 128, 512.';
comment on column marts.effective_context_limits_history.model_limit is 'The model''s context limit (rope scaling included); for a deployment also capped by its max_model_len.';
comment on column marts.effective_context_limits_history.memory_limit is 'Largest context (a multiple of the block size) at which `concurrency` sequences fit capplan''s predicted KV pool; 0 when none.';
comment on column marts.effective_context_limits_history.calibrated_limit is 'The same on the calibrated KV pool; null when no calibration scope with enough observations applies.';
comment on column marts.effective_context_limits_history.measured_limit is 'The same on the engine''s reported block count (deployments that reported one).';
comment on column marts.effective_context_limits_history.effective_limit is 'min(model_limit, memory_limit, calibrated_limit): the context to enforce at this concurrency.';
comment on column marts.effective_context_limits_history.binding is 'Which limit binds: model, calibrated or memory (ties in that order); weights when the weights alone exceed the usable memory (limit 0).';
comment on column marts.effective_context_limits_history.calibrated is 'True when a calibration scope applies (calibrated_limit is set).';
comment on column marts.effective_context_limits_history.n_observations is 'Deployments the applied scope was fitted on (0 when not calibrated).';
