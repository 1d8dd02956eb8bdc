-- raw.grid_errors: registry models the capacity grid could not plan (unparseable spec, no
--   deployment in the grid on any GPU).
-- grain: one row per model and reason.
-- columns: ingest_run_id (always null here), item_kind, item_key, stage, reason, source_path, raw_excerpt.
-- written by: the `capacity_grid` asset, from the frame registered as `incoming`.
create or replace table raw.grid_errors as
select * from incoming;

comment on table raw.grid_errors is 'Models left out of the capacity grid, with the reason.';
