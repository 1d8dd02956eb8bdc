-- raw.deployments: every deployment of the capacity grid (what does not depend on the context).
-- grain: one row per model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp.
-- columns: deployment_id (this run's key of the deployment) and the grid's deployment columns:
--   keys, dtypes, memory breakdown, KV pool (capacity.grid.GRID_COLUMNS minus the per-context ones).
-- written by: the `capacity_grid` asset, from the frame registered as `incoming`.
create or replace table raw.deployments as
select * from incoming;

comment on table raw.deployments is 'The capacity grid''s deployments: one row each, with the memory breakdown and KV pool.';
