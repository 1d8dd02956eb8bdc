-- staging.effective_context_limits: effective context limits per deployment and per model x GPU x TP at target concurrencies (recommendations.limits), typed, for every retained run (the marts pick the published one).
-- grain: one run_id x kind x deployment (or model x gpu x tp x pp) x concurrency.
-- columns: run_id, run_date, kind, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, max_model_len, concurrency, model_limit, memory_limit,
--   calibrated_limit, measured_limit, effective_limit, binding, calibrated, calibration_scope,
--   n_observations
-- history: the deployment rows per run (raw.effective_context_limits) and the model_gpu_tp rows
--   per limits partition version (raw.grid_limits), given to each run that published it by raw.limit_partitions.
create or replace view staging.effective_context_limits as
with source as (
    select * from raw.effective_context_limits
    union all by name
    select parts.run_id, parts.run_date, stored.* exclude (part_id)
    from raw.grid_limits as stored
    inner join raw.limit_partitions as parts on stored.part_id = parts.part_id
),

typed as (
    select
        run_id::varchar as run_id,
        run_date::date as run_date,
        kind::varchar as kind,
        deployment_id::varchar as deployment_id,
        model::varchar as model,
        model_family::varchar as model_family,
        gpu::varchar as gpu,
        engine::varchar as engine,
        engine_version::varchar as engine_version,
        weight_dtype::varchar as weight_dtype,
        kv_dtype::varchar as kv_dtype,
        tp::integer as tp,
        pp::integer as pp,
        max_model_len::bigint as max_model_len,
        concurrency::bigint as concurrency,
        model_limit::bigint as model_limit,
        memory_limit::bigint as memory_limit,
        calibrated_limit::bigint as calibrated_limit,
        measured_limit::bigint as measured_limit,
        effective_limit::bigint as effective_limit,
        binding::varchar as binding,
        calibrated::boolean as calibrated,
        calibration_scope::varchar as calibration_scope,
        n_observations::bigint as n_observations
    from source
)

select * from typed;
