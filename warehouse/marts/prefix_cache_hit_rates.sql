-- marts.prefix_cache_hit_rates: the prefix-cache hit rate each observed deployment measured (latest run).
-- grain: one deployment id with prefix-cache samples.
-- columns: run_id, run_date, deployment_id, model, gpu, engine, engine_version, enable_prefix_caching,
--   prefix_cache_queries, prefix_cache_hits, measured_prefix_hit_rate, prefix_hit_rate_source,
--   first_sample_at, last_sample_at, telemetry_source
-- column comments: prefix_cache_hit_rates.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.prefix_cache_hit_rates as
with deployments as (
    select * from staging.telemetry_deployments
)

select
    run_id,
    run_date,
    deployment_id,
    model,
    gpu,
    engine,
    engine_version,
    enable_prefix_caching,
    prefix_cache_queries,
    prefix_cache_hits,
    measured_prefix_hit_rate,
    prefix_hit_rate_source,
    first_sample_at,
    last_sample_at,
    telemetry_source
from deployments
where measured_prefix_hit_rate is not null;

comment on view marts.prefix_cache_hit_rates is 'The prefix-cache hit rate each observed deployment measured (latest run).';
