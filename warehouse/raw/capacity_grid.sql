-- raw.capacity_grid: the per-context columns of the capacity grid, as computed.
-- grain: one row per deployment_id x context.
-- columns: deployment_id (raw.deployments), context, max_concurrency, b_max_memory, b_max, fits.
--   Joined to raw.deployments it is exactly capacity.grid.build_capacity_grid.
-- written by: the `capacity_grid` asset, from the frame registered as `incoming`.
create or replace table raw.capacity_grid as
select * from incoming;

comment on table raw.capacity_grid is 'B_max and concurrency per deployment (raw.deployments) and context.';
