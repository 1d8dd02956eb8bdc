-- raw.feature_value: what each serving feature a workload uses buys: its cheapest placement with the feature and without it.
-- grain: one workload x model x feature.
-- columns: workload, model, feature, setting, rate, rate_source, gpu_with, gpus_with, b_max_with,
--   usd_per_hour_with, gpu_without, gpus_without, b_max_without, usd_per_hour_without, gpus_saved,
--   usd_per_hour_saved, reason
-- written by: the `feature_value` asset (recommendations.feature_value), from the frame registered as `incoming`.
create or replace table raw.feature_value as
select * from incoming;

comment on table raw.feature_value is 'What each serving feature a workload uses buys: its cheapest placement with the feature and without it.';
