-- raw.context_limits: the largest context per deployment at each target concurrency, as computed.
-- grain: one row per model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x concurrency.
-- columns: the grid's deployment keys, concurrency, max_context (and whatever else
--   capacity.grid.build_context_limits returns; staging.context_limits picks the columns).
-- written by: the `capacity_grid` asset, from the frame registered as `incoming`.
create or replace table raw.context_limits as
select * from incoming;

comment on table raw.context_limits is 'Max context per deployment for target concurrencies 1, 8, 32, 128, 512.';
