-- raw.capacity_grid: the per-context columns of the capacity grid, as computed.
-- grain: one row per deployment_id x context.
-- columns: run_id, run_date, deployment_id (raw.deployments), context, max_concurrency, b_max_memory, b_max, fits,
--   tpot_ms, output_tokens_per_second.
--   Joined to raw.deployments it is exactly capacity.grid.build_capacity_grid.
-- history: kept in place. The table holds the rows of every retained run (CAPPLAN_HISTORY_RUNS),
--   keyed by run_id: each run appends its own (replacing them if it runs again) and publishing
--   trims the oldest; staging shows the published run, marts.*_history every retained run.
-- written by: the `capacity_grid` asset, from the frame registered as `incoming`.
create table if not exists raw.capacity_grid as
select $run_id::varchar as run_id, $run_date::date as run_date, * from incoming
with no data;

delete from raw.capacity_grid where run_id = $run_id;

-- stored by context first: a query for one context reads a few row groups (zone maps)
insert into raw.capacity_grid by name
select $run_id::varchar as run_id, $run_date::date as run_date, * from incoming
order by context, deployment_id;

comment on table raw.capacity_grid is 'B_max and concurrency per deployment (raw.deployments) and context.';
