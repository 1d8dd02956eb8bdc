-- staging.context_limits: max context per deployment and target concurrency, typed.
-- grain: one row per deployment_id x concurrency.
-- columns: run_id, run_date, deployment_id, concurrency, max_context
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
        deployment_id::bigint as deployment_id,
        concurrency::bigint as concurrency,
        max_context::bigint as max_context
    from source
    cross join run
)

select * from typed;
