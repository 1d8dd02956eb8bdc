-- raw.run: the run that built this snapshot (written when the run's build starts).
-- grain: exactly one row.
-- columns: run_id, run_date, started_at
-- written by: warehouse.publish.Warehouse.begin; every staging view stamps its rows with it.
create or replace table raw.run as
select
    $run_id::varchar as run_id,
    $run_date::date as run_date,
    $started_at::timestamptz as started_at;

comment on table raw.run is 'The run that built this snapshot: its id, UTC date and start time.';
