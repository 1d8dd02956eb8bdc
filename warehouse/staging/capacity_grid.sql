-- staging.capacity_grid: the per-context columns of the grid, typed.
-- grain: one row per run_id x deployment_id x context, for every retained run (the marts pick the published one).
-- columns: run_id, run_date, deployment_id, context, max_concurrency, b_max_memory, b_max, fits, tpot_ms,
--   output_tokens_per_second
-- history: each raw row is stored once per partition version (part_id); the join with
--   raw.grid_partitions gives it to every retained run that published that version.
-- casts: `@casts grid_row` is run_id, run_date, deployment_id cast to the column dictionary's types
--   (capacity/columns.py), written out by warehouse.sql.read_sql.
create or replace view staging.capacity_grid as
with source as (
    select parts.run_id, parts.run_date, stored.* exclude (part_id)
    from raw.capacity_grid as stored
    inner join raw.grid_partitions as parts on stored.part_id = parts.part_id
),

typed as (
    select
        @casts grid_row,
        context::bigint as context,
        max_concurrency::double as max_concurrency,
        b_max_memory::bigint as b_max_memory,
        b_max::bigint as b_max,
        fits::boolean as fits,
        tpot_ms::double as tpot_ms,
        output_tokens_per_second::double as output_tokens_per_second
    from source
)

select * from typed;
