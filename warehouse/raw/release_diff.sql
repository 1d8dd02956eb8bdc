-- raw.release_diff: what upgrading vLLM would change for the fleet: for each release its deployments run
--   (raw.telemetry_deployments) older than the newest capplan has rules for, the grid of those models x
--   GPUs at that release against the newest, compared by marts.grid_diff's SQL (recommendations.grid_diff).
-- grain: one row per fleet_release x model x gpu x engine x weight_dtype x kv_dtype x tp x pp x dp x ep x context
--   whose answer differs between the two releases.
-- columns: fleet_release, next_release, change, cause, model, gpu, engine, weight_dtype, kv_dtype, tp,
--   pp, dp, ep, context, num_gpus, engine_version_before, engine_version_after, b_max_before, b_max_after,
--   max_concurrency_before, max_concurrency_after, kv_budget_bytes_per_gpu_before,
--   kv_budget_bytes_per_gpu_after, kv_cache_tokens_before, kv_cache_tokens_after, fits_before,
--   fits_after, tpot_ms_before, tpot_ms_after, usd_per_hour_before, usd_per_hour_after,
--   price_source_before, price_source_after, change_pct
-- meaning: marts.grid_diff's columns from change to change_pct, no run ids (recommendations.grid_diff).
-- written by: the `release_diff` asset, from the frame registered as `incoming`; replaced every run.
create or replace table raw.release_diff as
select * from incoming;

comment on table raw.release_diff is 'The fleet''s vLLM releases against the newest: grid rows that an upgrade changes.';
