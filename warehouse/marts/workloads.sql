-- marts.workloads: workload profiles the latest run planned for (workloads.yaml), and entries that could not be read.
-- grain: one workload entry.
-- columns: run_id, run_date, workload, description, models, target_concurrency, context_tokens,
--   context_source, max_model_len, dtype_policy, weight_dtypes, kv_dtypes, headroom, engine,
--   engine_version, gpus, max_gpus_per_replica, request_rate_per_s, request_buckets, adapters,
--   adapter_rank, adapter_slots, speculative_method, speculative_draft, num_speculative_tokens,
--   acceptance_rate, shared_prefix_tokens, prefix_hit_rate, valid, error, source_path
-- history: marts.workloads_history (every retained run).
-- column comments: workloads.yaml beside this file; the columns the marts share, capacity/columns.py.
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
    adapters,
    adapter_rank,
    adapter_slots,
    speculative_method,
    speculative_draft,
    num_speculative_tokens,
    acceptance_rate,
    shared_prefix_tokens,
    prefix_hit_rate,
    valid,
    error,
    source_path
from profiles;

comment on view marts.workloads is 'Workload profiles the latest run planned for (workloads.yaml), and entries that could not be read.';
