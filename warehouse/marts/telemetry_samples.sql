-- marts.telemetry_samples: metric samples from the telemetry drop folder (latest run): KV usage, running/waiting requests, preemptions, framebuffer.
-- grain: one metric sample (series x time).
-- columns: run_id, run_date, deployment_id, ts, ts_source, metric, value, source_metric, model,
--   model_name_raw, engine_index, le, series, gpu_index, gpu_uuid, gpu, hostname, pod, file, line
-- history: marts.telemetry_samples_history (every retained run).
-- column comments: telemetry_samples.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.telemetry_samples as
with samples as (
    select * from staging.telemetry_samples
)

select
    run_id,
    run_date,
    deployment_id,
    ts,
    ts_source,
    metric,
    value,
    source_metric,
    model,
    model_name_raw,
    engine_index,
    le,
    series,
    gpu_index,
    gpu_uuid,
    gpu,
    hostname,
    pod,
    file,
    line
from samples;

comment on view marts.telemetry_samples is 'Metric samples from the telemetry drop folder (latest run): KV usage, running/waiting requests, preemptions, framebuffer, token counters and latency histograms.';
