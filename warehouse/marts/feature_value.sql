-- marts.feature_value: what each serving feature buys per workload (latest run): the cheapest placement with the feature as the workload has it (stated in workloads.yaml, or the hit rate the fleet measured) against the same workload with the feature off.
-- grain: one workload x model x feature (prefix_caching, kv_offload, lora, speculative_decoding).
-- columns: run_id, run_date, workload, model, feature, setting, rate, rate_source, gpu_with, gpus_with,
--   b_max_with, usd_per_hour_with, gpu_without, gpus_without, b_max_without, usd_per_hour_without,
--   gpus_saved, usd_per_hour_saved, reason
-- history: marts.feature_value_history (every retained run).
-- column comments: feature_value.yaml beside this file; the columns the marts share, capacity/columns.py.
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
