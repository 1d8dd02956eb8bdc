-- marts.prefix_cache_hit_rates: the prefix-cache hit rate each observed deployment measured (latest run).
-- grain: one deployment id with prefix-cache samples.
-- columns: run_id, run_date, deployment_id, model, gpu, engine, engine_version, enable_prefix_caching,
--   prefix_cache_queries, prefix_cache_hits, measured_prefix_hit_rate, prefix_hit_rate_source,
--   first_sample_at, last_sample_at, telemetry_source
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
comment on column marts.prefix_cache_hit_rates.run_id is 'The nightly run that published this row (marts.runs.run_id).';
comment on column marts.prefix_cache_hit_rates.run_date is 'UTC date the run started.';
comment on column marts.prefix_cache_hit_rates.deployment_id is 'The deployment (its telemetry labels or folder).';
comment on column marts.prefix_cache_hit_rates.model is 'Registry id of the model it serves.';
comment on column marts.prefix_cache_hit_rates.gpu is 'GPU catalog id.';
comment on column marts.prefix_cache_hit_rates.engine is 'Serving engine.';
comment on column marts.prefix_cache_hit_rates.engine_version is 'Engine release.';
comment on column marts.prefix_cache_hit_rates.enable_prefix_caching is 'Whether its startup log says prefix caching is on (null: not seen).';
comment on column marts.prefix_cache_hit_rates.prefix_cache_queries is 'Prompt tokens looked up in the prefix cache over the window: increase of vLLM''s prefix_cache_queries counter, summed over its series (null: SGLang, which exports a gauge).';
comment on column marts.prefix_cache_hit_rates.prefix_cache_hits is 'Of them, tokens found in the cache: increase of vLLM''s prefix_cache_hits counter.';
comment on column marts.prefix_cache_hit_rates.measured_prefix_hit_rate is 'Share of prompt tokens served from the prefix cache: prefix_cache_hits / prefix_cache_queries; SGLang: the mean of its sglang:cache_hit_rate gauge. What a workload''s prefix_hit_rate means.';
comment on column marts.prefix_cache_hit_rates.prefix_hit_rate_source is 'prefix_cache_hits_total (vLLM''s counters) or prefix_cache_hit_rate (SGLang''s gauge).';
comment on column marts.prefix_cache_hit_rates.first_sample_at is 'First metric sample of the deployment in the window.';
comment on column marts.prefix_cache_hit_rates.last_sample_at is 'Last metric sample of the deployment in the window.';
comment on column marts.prefix_cache_hit_rates.telemetry_source is 'Where the telemetry came from: sample, drop_folder or prometheus.';
