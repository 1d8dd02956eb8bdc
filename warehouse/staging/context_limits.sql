-- staging.context_limits: max context per deployment and target concurrency, typed.
-- grain: one row per model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x concurrency.
-- columns: run_id, run_date, model, model_family, gpu, engine, engine_version, weight_dtype,
--   kv_dtype, tp, pp, num_gpus, concurrency, max_context
create or replace view staging.context_limits as
with source as (
    select * from raw.context_limits
),

run as (
    select run_id, run_date from raw.run
),

typed as (
    select
        run.run_id,
        run.run_date,
        model::varchar as model,
        model_family::varchar as model_family,
        gpu::varchar as gpu,
        engine::varchar as engine,
        engine_version::varchar as engine_version,
        weight_dtype::varchar as weight_dtype,
        kv_dtype::varchar as kv_dtype,
        tp::integer as tp,
        pp::integer as pp,
        num_gpus::integer as num_gpus,
        concurrency::bigint as concurrency,
        max_context::bigint as max_context
    from source
    cross join run
)

select * from typed;
