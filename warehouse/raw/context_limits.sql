-- raw.context_limits: the largest context per deployment at each target concurrency, as computed.
-- grain: one row per deployment_id x concurrency (1, 8, 32, 128, 512).
-- columns: run_id, run_date, deployment_id (raw.deployments), concurrency, max_context.
-- history: kept in place. The table holds the rows of every retained run (CAPPLAN_HISTORY_RUNS),
--   keyed by run_id: each run appends its own (replacing them if it runs again) and publishing
--   trims the oldest; staging shows the published run, marts.*_history every retained run.
-- written by: the `capacity_grid` asset, from the frame registered as `incoming`.
create table if not exists raw.context_limits as
select $run_id::varchar as run_id, $run_date::date as run_date, * from incoming
with no data;

delete from raw.context_limits where run_id = $run_id;

-- stored by concurrency first: a query for one concurrency reads a few row groups (zone maps)
insert into raw.context_limits by name
select $run_id::varchar as run_id, $run_date::date as run_date, * from incoming
order by concurrency, deployment_id;

comment on table raw.context_limits is 'Max context per deployment (raw.deployments) for target concurrencies 1, 8, 32, 128, 512.';
