-- staging.telemetry_samples: metric samples read from the telemetry drop folder (vLLM and DCGM Prometheus snapshots), typed and stamped with the run.
-- grain: one metric sample (series x time).
-- columns: run_id, run_date, deployment_id, ts, ts_source, metric, value, source_metric, model,
--   model_name_raw, engine_index, le, series, gpu_index, gpu_uuid, gpu, hostname, pod, file, line
create or replace view staging.telemetry_samples as
with source as (
    select * from raw.telemetry_samples
),

typed as (
    select
        run.run_id,
        run.run_date,
        deployment_id::varchar as deployment_id,
        ts::timestamptz as ts,
        ts_source::varchar as ts_source,
        metric::varchar as metric,
        value::double as value,
        source_metric::varchar as source_metric,
        model_id::varchar as model,
        model_name_raw::varchar as model_name_raw,
        engine_index::varchar as engine_index,
        le::double as le,
        series::varchar as series,
        gpu_index::integer as gpu_index,
        gpu_uuid::varchar as gpu_uuid,
        gpu_sku::varchar as gpu,
        hostname::varchar as hostname,
        pod::varchar as pod,
        file::varchar as file,
        line::bigint as line
    from source
    cross join raw.run as run
)

select * from typed;
