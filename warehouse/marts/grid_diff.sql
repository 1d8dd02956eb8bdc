-- marts.grid_diff: what changed in the capacity grid between the last two runs, and why.
-- grain: one row per model x gpu x engine x weight_dtype x kv_dtype x tp x pp x dp x ep x context whose answer
--   changed (b_max, max_concurrency, KV budget, KV tokens, fits, TPOT or $/hour), appeared or went.
-- columns: run_id_before, run_id_after, change, cause, causes, model, gpu, engine, weight_dtype,
--   kv_dtype, tp, pp, dp, ep, context, num_gpus, engine_version_before, engine_version_after, b_max_before,
--   b_max_after, max_concurrency_before, max_concurrency_after, kv_budget_bytes_per_gpu_before,
--   kv_budget_bytes_per_gpu_after, kv_cache_tokens_before, kv_cache_tokens_after, fits_before,
--   fits_after, tpot_ms_before, tpot_ms_after, usd_per_hour_before, usd_per_hour_after,
--   price_source_before, price_source_after, change_pct
-- causes: the inputs of the row whose fingerprints differ between the two runs (raw.grid_inputs):
--   engine_release (the engine's release), config (the model's config hash or checkpoint size),
--   catalog (the GPU's spec, price aside), price (the GPU's price or its source), calibration (the
--   speed model's fitted factors); `code` where none did (capplan's rules changed).
-- runs: the two latest runs recorded in raw.grid_inputs (CAPPLAN_HISTORY_RUNS keeps them); no rows
--   before the second run. $/hour is each run's own price (the grid's history is at today's prices).
--   No run_id column: the diff is about two runs, and it is not copied into a history of its own.
-- reads: the grid's run-keyed raw tables (raw.grid_partitions, raw.deployments, raw.capacity_grid), so
--   that only the partitions one run published and the other did not are compared: a night that
--   changed nothing compares nothing.
-- column comments: warehouse/diff_columns.py (one description for both diff marts), applied when the
--   file is run (warehouse.sql.build_relation).
-- select list: `@columns diff_row` is the diff marts' shared columns (warehouse/diff_columns.py),
--   written out by warehouse.sql.read_sql.
-- defines: the table macro marts.grid_diff_runs(): the two runs compared (run_id_before, run_id_after;
--   no row before the second run), so that a reader can say which runs a diff with no rows compared.
create or replace macro marts.grid_diff_runs() as table
with runs as (
    select
        run_id,
        max(run_started_at) as started_at
    from raw.grid_inputs
    group by run_id
    order by started_at desc
    limit 2
)

select
    arg_min(run_id, started_at) as run_id_before,
    arg_max(run_id, started_at) as run_id_after
from runs
having count(*) = 2;

create or replace view marts.grid_diff as
with pair as (
    select * from marts.grid_diff_runs()
),

parts as (
    select
        run_id,
        part_id
    from raw.grid_partitions
    where run_id in (select run_id_before from pair union all select run_id_after from pair)
),

-- a partition version both runs published holds the same rows from the same inputs (its key hashes
-- its models, every GPU with its price, the grid options and the code): nothing in it to compare
changed_parts as (
    select
        part_id,
        any_value(run_id) as run_id
    from parts
    group by part_id
    having count(distinct run_id) = 1
),

deployments as (
    select
        changed_parts.run_id,
        stored.part_id,
        stored.deployment_id,
        stored.model,
        stored.gpu,
        stored.engine,
        stored.engine_version,
        stored.weight_dtype,
        stored.kv_dtype,
        stored.tp,
        stored.pp,
        -- rows stored before the grid had DP x EP layouts are TP-only
        coalesce(stored.dp, 1) as dp,
        coalesce(stored.ep, 1) as ep,
        stored.num_gpus,
        stored.kv_budget_bytes_per_gpu,
        stored.kv_cache_tokens
    from changed_parts
    inner join raw.deployments as stored on changed_parts.part_id = stored.part_id
),

-- the deployments of the two runs paired on their key first (a few per cent of the rows), then
-- their contexts by integer ids: the wide string keys are hashed once per deployment, not per row
paired as materialized (
    select
        row_number() over () as pair_id,
        coalesce(after.model, before.model) as model,
        coalesce(after.gpu, before.gpu) as gpu,
        coalesce(after.engine, before.engine) as engine,
        coalesce(after.weight_dtype, before.weight_dtype) as weight_dtype,
        coalesce(after.kv_dtype, before.kv_dtype) as kv_dtype,
        coalesce(after.tp, before.tp) as tp,
        coalesce(after.pp, before.pp) as pp,
        coalesce(after.dp, before.dp) as dp,
        coalesce(after.ep, before.ep) as ep,
        coalesce(after.num_gpus, before.num_gpus) as num_gpus,
        before.part_id as part_id_before,
        before.deployment_id as deployment_id_before,
        after.part_id as part_id_after,
        after.deployment_id as deployment_id_after,
        before.engine_version as engine_version_before,
        after.engine_version as engine_version_after,
        before.kv_budget_bytes_per_gpu as kv_budget_bytes_per_gpu_before,
        after.kv_budget_bytes_per_gpu as kv_budget_bytes_per_gpu_after,
        before.kv_cache_tokens as kv_cache_tokens_before,
        after.kv_cache_tokens as kv_cache_tokens_after
    from (select * from deployments where run_id = (select run_id_before from pair)) as before
    full outer join (select * from deployments where run_id = (select run_id_after from pair)) as after
        on before.model = after.model
        and before.gpu = after.gpu
        and before.engine = after.engine
        and before.weight_dtype = after.weight_dtype
        and before.kv_dtype = after.kv_dtype
        and before.tp = after.tp
        and before.pp = after.pp
        and before.dp = after.dp
        and before.ep = after.ep
),

sides as (
    select
        paired.pair_id,
        side.is_after,
        case when side.is_after then paired.part_id_after else paired.part_id_before end as part_id,
        case when side.is_after then paired.deployment_id_after else paired.deployment_id_before end
            as deployment_id
    from paired
    cross join (values (false), (true)) as side (is_after)
),

contexts as (
    select
        sides.pair_id,
        sides.is_after,
        stored.context,
        stored.b_max,
        stored.max_concurrency,
        stored.fits,
        stored.tpot_ms
    from sides
    inner join raw.capacity_grid as stored
        on sides.part_id = stored.part_id and sides.deployment_id = stored.deployment_id
),

by_context as (
    select
        pair_id,
        context,
        count(*) filter (where not is_after) > 0 as in_before,
        count(*) filter (where is_after) > 0 as in_after,
        max(b_max) filter (where not is_after) as b_max_before,
        max(b_max) filter (where is_after) as b_max_after,
        max(max_concurrency) filter (where not is_after) as max_concurrency_before,
        max(max_concurrency) filter (where is_after) as max_concurrency_after,
        bool_or(fits) filter (where not is_after) as fits_before,
        bool_or(fits) filter (where is_after) as fits_after,
        max(tpot_ms) filter (where not is_after) as tpot_ms_before,
        max(tpot_ms) filter (where is_after) as tpot_ms_after
    from contexts
    group by pair_id, context
),

fingerprints as (
    select
        inputs.input_kind,
        inputs.input_key,
        max(inputs.fingerprint) filter (where inputs.run_id = pair.run_id_before) as before,
        max(inputs.fingerprint) filter (where inputs.run_id = pair.run_id_after) as after,
        max(inputs.price_usd_per_gpu_hour) filter (where inputs.run_id = pair.run_id_before) as price_before,
        max(inputs.price_usd_per_gpu_hour) filter (where inputs.run_id = pair.run_id_after) as price_after,
        max(inputs.price_source) filter (where inputs.run_id = pair.run_id_before) as price_source_before,
        max(inputs.price_source) filter (where inputs.run_id = pair.run_id_after) as price_source_after
    from raw.grid_inputs as inputs
    cross join pair
    where inputs.run_id in (pair.run_id_before, pair.run_id_after)
    group by inputs.input_kind, inputs.input_key
),

joined as (
    select
        paired.model,
        paired.gpu,
        paired.engine,
        paired.weight_dtype,
        paired.kv_dtype,
        paired.tp,
        paired.pp,
        paired.dp,
        paired.ep,
        by_context.context,
        paired.num_gpus,
        case when not by_context.in_before then 'added' when not by_context.in_after then 'removed' else 'changed' end
            as change,
        paired.engine_version_before,
        paired.engine_version_after,
        by_context.b_max_before,
        by_context.b_max_after,
        by_context.max_concurrency_before,
        by_context.max_concurrency_after,
        case when by_context.in_before then paired.kv_budget_bytes_per_gpu_before end as kv_budget_bytes_per_gpu_before,
        case when by_context.in_after then paired.kv_budget_bytes_per_gpu_after end as kv_budget_bytes_per_gpu_after,
        case when by_context.in_before then paired.kv_cache_tokens_before end as kv_cache_tokens_before,
        case when by_context.in_after then paired.kv_cache_tokens_after end as kv_cache_tokens_after,
        by_context.fits_before,
        by_context.fits_after,
        by_context.tpot_ms_before,
        by_context.tpot_ms_after
    from by_context
    inner join paired on by_context.pair_id = paired.pair_id
),

caused as (
    select
        joined.*,
        joined.num_gpus * price.price_before as usd_per_hour_before,
        joined.num_gpus * price.price_after as usd_per_hour_after,
        price.price_source_before,
        price.price_source_after,
        list_filter(
            [
                case when release.before is distinct from release.after then 'engine_release' end,
                case when config.before is distinct from config.after then 'config' end,
                case when catalog.before is distinct from catalog.after then 'catalog' end,
                case when price.before is distinct from price.after then 'price' end,
                case when calibration.before is distinct from calibration.after then 'calibration' end
            ],
            name -> name is not null
        ) as found
    from joined
    left join fingerprints as release
        on release.input_kind = 'engine_release' and release.input_key = joined.engine
    left join fingerprints as config on config.input_kind = 'config' and config.input_key = joined.model
    left join fingerprints as catalog on catalog.input_kind = 'catalog' and catalog.input_key = joined.gpu
    left join fingerprints as price on price.input_kind = 'price' and price.input_key = joined.gpu
    left join fingerprints as calibration on calibration.input_kind = 'calibration'
),

changed as (
    select
        caused.*,
        case when len(found) = 0 then ['code'] else found end as causes,
        list_max([
            abs(b_max_after - b_max_before) / nullif(abs(b_max_before), 0),
            abs(kv_budget_bytes_per_gpu_after - kv_budget_bytes_per_gpu_before)
            / nullif(abs(kv_budget_bytes_per_gpu_before), 0),
            abs(tpot_ms_after - tpot_ms_before) / nullif(abs(tpot_ms_before), 0),
            abs(usd_per_hour_after - usd_per_hour_before) / nullif(abs(usd_per_hour_before), 0)
        ]) * 100 as change_pct
    from caused
    where
        change <> 'changed'
        or b_max_before is distinct from b_max_after
        or max_concurrency_before is distinct from max_concurrency_after
        or kv_budget_bytes_per_gpu_before is distinct from kv_budget_bytes_per_gpu_after
        or kv_cache_tokens_before is distinct from kv_cache_tokens_after
        or fits_before is distinct from fits_after
        or tpot_ms_before is distinct from tpot_ms_after
        or usd_per_hour_before is distinct from usd_per_hour_after
)

select
    (select run_id_before from pair) as run_id_before,
    (select run_id_after from pair) as run_id_after,
    change,
    array_to_string(causes, '+') as cause,
    causes,
    @columns diff_row,
    case when change = 'changed' then change_pct end as change_pct
from changed;

comment on view marts.grid_diff is 'The grid rows that changed between the last two runs, each with the inputs that changed under it.';
