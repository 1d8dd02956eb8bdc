-- raw.deployments: every deployment of the capacity grid (what does not depend on the context).
-- grain: one row per model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp.
-- columns: run_id, run_date, deployment_id (this run's key of the deployment) and the grid's deployment columns:
--   keys, dtypes, memory breakdown, KV pool (capacity.grid.GRID_COLUMNS minus the per-context ones).
-- history: kept in place. The table holds the rows of every retained run (CAPPLAN_HISTORY_RUNS),
--   keyed by run_id: each run appends its own (replacing them if it runs again) and publishing
--   trims the oldest; staging shows the published run, marts.*_history every retained run.
-- written by: the `capacity_grid` asset, from the frame registered as `incoming`.
create table if not exists raw.deployments as
select $run_id::varchar as run_id, $run_date::date as run_date, * from incoming
with no data;

delete from raw.deployments where run_id = $run_id;

insert into raw.deployments by name
select $run_id::varchar as run_id, $run_date::date as run_date, * from incoming;

comment on table raw.deployments is 'The capacity grid''s deployments: one row each, with the memory breakdown and KV pool.';
