-- marts.telemetry_samples: metric samples from the telemetry drop folder (latest run): KV usage, running/waiting requests, preemptions, framebuffer.
-- grain: one metric sample (series x time).
-- columns: run_id, run_date, deployment_id, ts, ts_source, metric, value, source_metric, model,
--   model_name_raw, engine_index, le, series, gpu_index, gpu_uuid, gpu, hostname, pod, file, line
-- history: marts.telemetry_samples_history (every retained run).
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
comment on column marts.telemetry_samples.deployment_id is 'Deployment id.';
comment on column marts.telemetry_samples.ts is 'Scrape time (UTC).';
comment on column marts.telemetry_samples.ts_source is 'Which rule gave ts: sample, comment, sidecar or mtime.';
comment on column marts.telemetry_samples.metric is 'kv_cache_usage (fraction), requests_running, requests_waiting, preemptions_total (counter), fb_used_bytes, fb_free_bytes; generation_tokens_total, prompt_tokens_total (counters), gen_throughput (SGLang, tokens/s); itl_seconds_bucket/_sum/_count (inter-token latency = TPOT, vllm:inter_token_latency_seconds or the older vllm:time_per_output_token_seconds) and ttft_seconds_bucket/_sum/_count (time to first token) histogram series.';
comment on column marts.telemetry_samples.value is 'The value, in the unit the metric name says.';
comment on column marts.telemetry_samples.source_metric is 'The metric as exported (vllm:kv_cache_usage_perc, DCGM_FI_DEV_FB_USED...).';
comment on column marts.telemetry_samples.model is 'Registry id of the model (vLLM model_name label, or the sidecar).';
comment on column marts.telemetry_samples.model_name_raw is 'The model name as exported.';
comment on column marts.telemetry_samples.engine_index is 'vLLM engine label (data-parallel engine), null for V0.';
comment on column marts.telemetry_samples.le is 'Upper bound of a histogram bucket in seconds (the le label; Infinity for +Inf), null for other metrics.';
comment on column marts.telemetry_samples.series is 'For token counters and latency histograms: the labels that tell one series from another within the deployment (engine, model_name, SGLang is_streaming ...), le and the deployment label excluded.';
comment on column marts.telemetry_samples.gpu_index is 'DCGM gpu index.';
comment on column marts.telemetry_samples.gpu_uuid is 'DCGM GPU UUID.';
comment on column marts.telemetry_samples.gpu is 'GPU catalog id from DCGM modelName.';
comment on column marts.telemetry_samples.hostname is 'DCGM Hostname label.';
comment on column marts.telemetry_samples.pod is 'Kubernetes pod label.';
comment on column marts.telemetry_samples.line is 'Line in the file.';
