-- sample usage: per deployment, what telemetry.summary.sample_usage computes from a
-- frame, computed by DuckDB over the relation `samples` (the sample store's Parquet files, see
-- telemetry/store.py), so 100M samples never pass through Python.
-- grain: one deployment id.
-- columns: deployment_id, peak_kv_usage, p95_kv_usage, peak_requests_running,
--   peak_requests_waiting, preemptions_in_window, peak_fb_used_bytes, gpus_seen, _dcgm_gpu_sku,
--   _sample_model_id, first_sample_at, last_sample_at, n_samples
-- p95_kv_usage: Polars' quantile(0.95, interpolation = 'nearest'): the sorted values' element at
--   0-based index floor(0.95 (n - 1) + 0.5).
-- preemptions_in_window: per series (deployment, source metric, engine, GPU index, UUID, host), in
--   time order, the counter's increase; a drop means a restart from zero, so the value itself is the
--   increase; a series' first sample adds nothing; 0 without preemption samples.
-- _dcgm_gpu_sku, _sample_model_id: the value of the earliest sample that has one.
with preemptions as (
    select
        deployment_id,
        case
            when lag(value) over series is null then 0.0
            when value - lag(value) over series < 0 then value
            else value - lag(value) over series
        end as increase
    from samples
    where metric = 'preemptions_total'
    window series as (
        partition by deployment_id, source_metric, engine_index, gpu_index, gpu_uuid, hostname order by ts
    )
),

increases as (
    select deployment_id, sum(increase) as preemptions_in_window
    from preemptions
    group by deployment_id
),

per_deployment as (
    select
        deployment_id,
        max(value) filter (where metric = 'kv_cache_usage') as peak_kv_usage,
        list_sort(list(value) filter (where metric = 'kv_cache_usage')) as kv_values,
        max(value) filter (where metric = 'requests_running') as peak_requests_running,
        max(value) filter (where metric = 'requests_waiting') as peak_requests_waiting,
        trunc(max(value) filter (where metric = 'fb_used_bytes'))::bigint as peak_fb_used_bytes,
        count(distinct gpu_uuid)::integer as gpus_seen,
        arg_min(gpu_sku, ts) filter (where gpu_sku is not null) as _dcgm_gpu_sku,
        arg_min(model_id, ts) filter (where model_id is not null) as _sample_model_id,
        min(ts) as first_sample_at,
        max(ts) as last_sample_at,
        count(*)::bigint as n_samples
    from samples
    group by deployment_id
)

select
    d.deployment_id,
    d.peak_kv_usage,
    case when len(d.kv_values) > 0 then d.kv_values[(floor(0.95 * (len(d.kv_values) - 1) + 0.5))::bigint + 1] end
        as p95_kv_usage,
    d.peak_requests_running,
    d.peak_requests_waiting,
    coalesce(i.preemptions_in_window, 0.0) as preemptions_in_window,
    d.peak_fb_used_bytes,
    d.gpus_seen,
    d._dcgm_gpu_sku,
    d._sample_model_id,
    d.first_sample_at,
    d.last_sample_at,
    d.n_samples
from per_deployment as d
left join increases as i using (deployment_id)
order by d.deployment_id
