-- marts.feature_value: what each serving feature buys per workload (latest run): the cheapest placement with the feature as the workload has it (stated in workloads.yaml, or the hit rate the fleet measured) against the same workload with the feature off.
-- grain: one workload x model x feature (prefix_caching today; offload, LoRA and speculative decoding add rows).
-- columns: run_id, run_date, workload, model, feature, setting, rate, rate_source, gpu_with, gpus_with,
--   b_max_with, usd_per_hour_with, gpu_without, gpus_without, b_max_without, usd_per_hour_without,
--   gpus_saved, usd_per_hour_saved, reason
-- history: marts.feature_value_history (every retained run).
create or replace view marts.feature_value as
with valued as (
    select * from staging.feature_value
)

select
    run_id,
    run_date,
    workload,
    model,
    feature,
    setting,
    rate,
    rate_source,
    gpu_with,
    gpus_with,
    b_max_with,
    usd_per_hour_with,
    gpu_without,
    gpus_without,
    b_max_without,
    usd_per_hour_without,
    gpus_saved,
    usd_per_hour_saved,
    reason
from valued;

comment on view marts.feature_value is 'What each serving feature buys per workload: the cheapest placement with the feature as the workload has it against the same workload with it off.';
comment on column marts.feature_value.run_id is 'The nightly run that published this row (marts.runs.run_id).';
comment on column marts.feature_value.run_date is 'UTC date the run started.';
comment on column marts.feature_value.workload is 'Workload profile name.';
comment on column marts.feature_value.model is 'Registry id of the model placed.';
comment on column marts.feature_value.feature is 'The serving feature valued: prefix_caching (capacity.features.prefix_caching).';
comment on column marts.feature_value.setting is 'The feature as the workload has it, in words (prefix caching: the shared prefix and the hit rate).';
comment on column marts.feature_value.rate is 'The rate the row is valued at (prefix caching: the share of prompt tokens served from the cache); null: none.';
comment on column marts.feature_value.rate_source is 'stated (workloads.yaml) or measured (the fleet''s hit rate for the model, marts.prefix_cache_hit_rates); null: no rate.';
comment on column marts.feature_value.gpu_with is 'GPU of the cheapest placement with the feature.';
comment on column marts.feature_value.gpus_with is 'GPUs it takes (replicas x GPUs per replica).';
comment on column marts.feature_value.b_max_with is 'Sequences of the workload''s context per replica with the feature (a shared prefix held once).';
comment on column marts.feature_value.usd_per_hour_with is 'Its cost in USD per hour.';
comment on column marts.feature_value.gpu_without is 'GPU of the cheapest placement with the feature off.';
comment on column marts.feature_value.gpus_without is 'GPUs it takes.';
comment on column marts.feature_value.b_max_without is 'Sequences per replica with the feature off.';
comment on column marts.feature_value.usd_per_hour_without is 'Its cost in USD per hour.';
comment on column marts.feature_value.gpus_saved is 'gpus_without - gpus_with: what the feature buys in GPUs.';
comment on column marts.feature_value.usd_per_hour_saved is 'usd_per_hour_without - usd_per_hour_with: what the feature buys in USD per hour.';
comment on column marts.feature_value.reason is 'Why one side has no placement (null when both do).';
