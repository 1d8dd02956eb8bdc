-- marts.release_diff: what upgrading vLLM would change for the fleet, release by release.
-- grain: one row per fleet_release x model x gpu x engine x weight_dtype x kv_dtype x tp x pp x dp x ep x context
--   whose answer differs between the fleet's release and the newest capplan has rules for.
-- columns: fleet_release, next_release, change, cause, model, gpu, engine, weight_dtype, kv_dtype, tp,
--   pp, dp, ep, context, num_gpus, engine_version_before, engine_version_after, b_max_before, b_max_after,
--   max_concurrency_before, max_concurrency_after, kv_budget_bytes_per_gpu_before,
--   kv_budget_bytes_per_gpu_after, kv_cache_tokens_before, kv_cache_tokens_after, fits_before,
--   fits_after, tpot_ms_before, tpot_ms_after, usd_per_hour_before, usd_per_hour_after,
--   price_source_before, price_source_after, change_pct
-- meaning: the models x GPUs of the fleet's vLLM deployments (raw.telemetry_deployments), for each
--   release they run, planned at that release and at next_release, compared by marts.grid_diff's own
--   SQL; `cause` is engine_release on every row (the releases are the only input that differs).
-- column comments: warehouse/diff_columns.py (one description for both diff marts), applied when the
--   file is run (warehouse.sql.build_relation).
-- select list: `@columns diff_row` is the diff marts' shared columns (warehouse/diff_columns.py),
--   written out by warehouse.sql.read_sql.
create or replace view marts.release_diff as
select
    fleet_release,
    next_release,
    change,
    cause,
    @columns diff_row,
    change_pct
from raw.release_diff;

comment on view marts.release_diff is 'The fleet''s vLLM releases against the newest: the grid rows an upgrade changes, and how.';
