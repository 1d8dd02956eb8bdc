-- staging.feature_value: what each serving feature a workload uses buys, typed and stamped with the run.
-- grain: one workload x model x feature.
-- columns: run_id, run_date, workload, model, feature, setting, rate, rate_source, gpu_with, gpus_with,
--   b_max_with, usd_per_hour_with, gpu_without, gpus_without, b_max_without, usd_per_hour_without,
--   gpus_saved, usd_per_hour_saved, reason
-- casts: `@casts workload_model` is workload, model cast to varchar, written out by warehouse.sql.read_sql.
create or replace view staging.feature_value as
with source as (
    select * from raw.feature_value
),

typed as (
    select
        run.run_id,
        run.run_date,
        @casts workload_model,
        feature::varchar as feature,
        setting::varchar as setting,
        rate::double as rate,
        rate_source::varchar as rate_source,
        gpu_with::varchar as gpu_with,
        gpus_with::bigint as gpus_with,
        b_max_with::bigint as b_max_with,
        usd_per_hour_with::double as usd_per_hour_with,
        gpu_without::varchar as gpu_without,
        gpus_without::bigint as gpus_without,
        b_max_without::bigint as b_max_without,
        usd_per_hour_without::double as usd_per_hour_without,
        gpus_saved::bigint as gpus_saved,
        usd_per_hour_saved::double as usd_per_hour_saved,
        reason::varchar as reason
    from source
    cross join raw.run as run
)

select * from typed;
