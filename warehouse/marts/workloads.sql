-- marts.workloads: workload profiles the latest run planned for (workloads.yaml), and entries that could not be read.
-- grain: one workload entry.
-- columns: run_id, run_date, workload, description, models, target_concurrency, context_tokens,
--   context_source, max_model_len, dtype_policy, weight_dtypes, kv_dtypes, headroom, engine,
--   engine_version, gpus, max_gpus_per_replica, request_rate_per_s, request_buckets, valid, error,
--   source_path
-- history: marts.workloads_history (every retained run).
create or replace view marts.workloads as
with profiles as (
    select * from staging.workloads
)

select
    run_id,
    run_date,
    workload,
    description,
    models,
    target_concurrency,
    context_tokens,
    context_source,
    max_model_len,
    dtype_policy,
    weight_dtypes,
    kv_dtypes,
    headroom,
    engine,
    engine_version,
    gpus,
    max_gpus_per_replica,
    request_rate_per_s,
    request_buckets,
    valid,
    error,
    source_path
from profiles;

comment on view marts.workloads is 'Workload profiles the latest run planned for (workloads.yaml), and entries that could not be read.';
comment on column marts.workloads.workload is 'Workload profile name.';
comment on column marts.workloads.description is 'What it is.';
comment on column marts.workloads.models is 'Registry ids of the models that may serve it (each planned separately).';
comment on column marts.workloads.target_concurrency is 'Concurrent sequences to serve.';
comment on column marts.workloads.context_tokens is 'Tokens per sequence planned for.';
comment on column marts.workloads.context_source is 'context_tokens, or which percentile of the context distribution.';
comment on column marts.workloads.max_model_len is '--max-model-len of its replicas.';
comment on column marts.workloads.dtype_policy is 'native, fp8-kv, fp8, any, or a custom policy name.';
comment on column marts.workloads.weight_dtypes is 'Weight dtypes the policy allows.';
comment on column marts.workloads.kv_dtypes is 'KV dtypes the policy allows.';
comment on column marts.workloads.headroom is 'Share of B_max to plan at.';
comment on column marts.workloads.engine_version is 'Engine version (null: capplan''s default release).';
comment on column marts.workloads.gpus is 'SKUs allowed (empty: every GPU with a price).';
comment on column marts.workloads.max_gpus_per_replica is 'Largest replica allowed.';
comment on column marts.workloads.request_rate_per_s is 'Requests per second to serve (request_rate): the load of the request-size bucket plan (marts.procurement_buckets); null = planned by concurrency only.';
comment on column marts.workloads.request_buckets is 'The request-size buckets of that plan: label (input and output percentile intervals), prompt and output tokens each is sized at (the interval''s upper edge), share of the requests.';
comment on column marts.workloads.valid is 'False for an entry that could not be read (error says why).';
comment on column marts.workloads.error is 'Why the entry could not be read.';
comment on column marts.workloads.source_path is 'The workloads file read (CAPPLAN_WORKLOADS, default workloads.yaml).';
