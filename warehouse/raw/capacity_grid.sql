-- raw.capacity_grid: the capacity grid exactly as capacity.grid.build_capacity_grid computed it.
-- grain: one row per model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x context.
-- columns: the grid's keys (model, model_family, gpu, engine, engine_version, weight_dtype, kv_dtype,
--   tp, pp, num_gpus, context) and the breakdown of `capplan estimate --json` (see staging.capacity_grid).
-- written by: the `capacity_grid` asset, from the frame registered as `incoming`.
create or replace table raw.capacity_grid as
select * from incoming;

comment on table raw.capacity_grid is 'The capacity grid as computed (Polars), one row per deployment and context.';
