-- staging.context_limits: max context per deployment and target concurrency, typed.
-- grain: one row per run_id x deployment_id x concurrency, for every retained run (the marts pick the published one).
-- columns: run_id, run_date, deployment_id, concurrency, max_context
-- history: each raw row is stored once per partition version (part_id); the join with
--   raw.grid_partitions gives it to every retained run that published that version.
create or replace view staging.context_limits as
with source as (
    select parts.run_id, parts.run_date, stored.* exclude (part_id)
    from raw.context_limits as stored
    inner join raw.grid_partitions as parts on stored.part_id = parts.part_id
),

typed as (
    select
        run_id::varchar as run_id,
        run_date::date as run_date,
        deployment_id::bigint as deployment_id,
        concurrency::bigint as concurrency,
        max_context::bigint as max_context
    from source
)

select * from typed;
