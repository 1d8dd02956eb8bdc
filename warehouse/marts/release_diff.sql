-- marts.release_diff: what upgrading vLLM would change for the fleet, release by release.
-- grain: one row per fleet_release x model x gpu x engine x weight_dtype x kv_dtype x tp x pp x context
--   whose answer differs between the fleet's release and the newest capplan has rules for.
-- columns: fleet_release, next_release, change, cause, model, gpu, engine, weight_dtype, kv_dtype, tp,
--   pp, context, num_gpus, engine_version_before, engine_version_after, b_max_before, b_max_after,
--   max_concurrency_before, max_concurrency_after, kv_budget_bytes_per_gpu_before,
--   kv_budget_bytes_per_gpu_after, kv_cache_tokens_before, kv_cache_tokens_after, fits_before,
--   fits_after, tpot_ms_before, tpot_ms_after, usd_per_hour_before, usd_per_hour_after,
--   price_source_before, price_source_after, change_pct
-- meaning: the models x GPUs of the fleet's vLLM deployments (raw.telemetry_deployments), for each
--   release they run, planned at that release and at next_release, compared by marts.grid_diff's own
--   SQL; `cause` is engine_release on every row (the releases are the only input that differs).
create or replace view marts.release_diff as
select
    fleet_release,
    next_release,
    change,
    cause,
    model,
    gpu,
    engine,
    weight_dtype,
    kv_dtype,
    tp,
    pp,
    context,
    num_gpus,
    engine_version_before,
    engine_version_after,
    b_max_before,
    b_max_after,
    max_concurrency_before,
    max_concurrency_after,
    kv_budget_bytes_per_gpu_before,
    kv_budget_bytes_per_gpu_after,
    kv_cache_tokens_before,
    kv_cache_tokens_after,
    fits_before,
    fits_after,
    tpot_ms_before,
    tpot_ms_after,
    usd_per_hour_before,
    usd_per_hour_after,
    price_source_before,
    price_source_after,
    change_pct
from raw.release_diff;

comment on view marts.release_diff is 'The fleet''s vLLM releases against the newest: the grid rows an upgrade changes, and how.';
comment on column marts.release_diff.fleet_release is 'The vLLM release (minor) the fleet''s deployments run.';
comment on column marts.release_diff.next_release is 'The newest vLLM release capplan has rules for: what an upgrade reaches.';
comment on column marts.release_diff.change is 'changed (both releases have the row), added (only the next release has it) or removed (only the fleet''s).';
comment on column marts.release_diff.cause is 'The causes joined with +: engine_release, config, catalog, price, calibration, or code.';
comment on column marts.release_diff.model is 'Model registry id.';
comment on column marts.release_diff.gpu is 'GPU catalog id.';
comment on column marts.release_diff.engine is 'Serving engine.';
comment on column marts.release_diff.weight_dtype is 'Weight dtype as requested (--dtype).';
comment on column marts.release_diff.kv_dtype is 'KV cache dtype as requested (--kv-cache-dtype).';
comment on column marts.release_diff.tp is 'Tensor-parallel size.';
comment on column marts.release_diff.pp is 'Pipeline-parallel size.';
comment on column marts.release_diff.context is 'Tokens per sequence (prompt + output) of the row.';
comment on column marts.release_diff.num_gpus is 'GPUs per replica (tp x pp).';
comment on column marts.release_diff.engine_version_before is 'The release the fleet runs, as the grid plans it.';
comment on column marts.release_diff.engine_version_after is 'The newest release, as the grid plans it.';
comment on column marts.release_diff.b_max_before is 'Whole sequences of this context that fit at once, fleet release.';
comment on column marts.release_diff.b_max_after is 'Whole sequences of this context that fit at once, next release.';
comment on column marts.release_diff.max_concurrency_before is 'The engine''s printed maximum concurrency, fleet release.';
comment on column marts.release_diff.max_concurrency_after is 'The engine''s printed maximum concurrency, next release.';
comment on column marts.release_diff.kv_budget_bytes_per_gpu_before is 'KV cache budget per GPU in bytes, fleet release.';
comment on column marts.release_diff.kv_budget_bytes_per_gpu_after is 'KV cache budget per GPU in bytes, next release.';
comment on column marts.release_diff.kv_cache_tokens_before is 'KV cache size in tokens as the engine prints it, fleet release.';
comment on column marts.release_diff.kv_cache_tokens_after is 'KV cache size in tokens as the engine prints it, next release.';
comment on column marts.release_diff.fits_before is 'Whether one sequence of this context fits, fleet release.';
comment on column marts.release_diff.fits_after is 'Whether one sequence of this context fits, next release.';
comment on column marts.release_diff.tpot_ms_before is 'Time per output token at b_max in milliseconds, fleet release.';
comment on column marts.release_diff.tpot_ms_after is 'Time per output token at b_max in milliseconds, next release.';
comment on column marts.release_diff.usd_per_hour_before is 'US dollars per replica-hour at this run''s price.';
comment on column marts.release_diff.usd_per_hour_after is 'US dollars per replica-hour at this run''s price (the same: only the release differs).';
comment on column marts.release_diff.price_source_before is 'Where this run''s GPU price came from.';
comment on column marts.release_diff.price_source_after is 'Where this run''s GPU price came from (the same as price_source_before).';
comment on column marts.release_diff.change_pct is 'The largest relative change of b_max, KV budget, TPOT and $/hour, in percent (changed rows).';
