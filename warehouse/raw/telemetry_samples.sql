-- raw.telemetry_samples: metric samples read from the telemetry drop folder (vLLM and DCGM Prometheus snapshots).
-- grain: one metric sample (series x time).
-- columns: deployment_id, ts, ts_source, metric, value, source_metric, model_id, model_name_raw,
--   engine_index, le, series, gpu_index, gpu_uuid, gpu_sku, hostname, pod, file, line
-- written by: the `telemetry_ingest` asset, from the frame registered as `incoming`.
create or replace table raw.telemetry_samples as
select * from incoming;

comment on table raw.telemetry_samples is 'Metric samples read from the telemetry drop folder (vLLM and DCGM Prometheus snapshots).';
