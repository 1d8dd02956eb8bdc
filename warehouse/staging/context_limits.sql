-- staging.context_limits: max context per deployment and target concurrency, typed.
-- grain: one row per run_id x deployment_id x concurrency, for every retained run (the marts pick the published one).
-- columns: run_id, run_date, deployment_id, concurrency, max_context
-- history: each raw row is stored once per partition version (part_id); the join with
--   raw.grid_partitions gives it to every retained run that published that version.
-- casts: `@casts grid_row` is run_id, run_date, deployment_id cast to the column dictionary's types
--   (capacity/columns.py), written out by warehouse.sql.read_sql.
create or replace view staging.context_limits as
with source as (
    select parts.run_id, parts.run_date, stored.* exclude (part_id)
    from raw.context_limits as stored
    inner join raw.grid_partitions as parts on stored.part_id = parts.part_id
),

typed as (
    select
        @casts grid_row,
        concurrency::bigint as concurrency,
        max_context::bigint as max_context
    from source
)

select * from typed;
