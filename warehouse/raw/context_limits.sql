-- raw.context_limits: the largest context per deployment at each target concurrency, as computed.
-- grain: one row per deployment_id x concurrency (1, 8, 32, 128, 512).
-- columns: deployment_id (raw.deployments), concurrency, max_context.
-- written by: the `capacity_grid` asset, from the frame registered as `incoming`.
create or replace table raw.context_limits as
select * from incoming;

comment on table raw.context_limits is 'Max context per deployment (raw.deployments) for target concurrencies 1, 8, 32, 128, 512.';
