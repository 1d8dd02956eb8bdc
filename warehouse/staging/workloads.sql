-- staging.workloads: the workload profiles as read from workloads.yaml (CAPPLAN_WORKLOADS), and the entries that could not be, typed and stamped with the run.
-- grain: one workload entry.
-- columns: run_id, run_date, workload, description, models, target_concurrency, context_tokens,
--   context_source, max_model_len, dtype_policy, weight_dtypes, kv_dtypes, headroom, engine,
--   engine_version, gpus, max_gpus_per_replica, request_rate_per_s, request_buckets, adapters,
--   adapter_rank, adapter_slots, speculative_method, speculative_draft, num_speculative_tokens,
--   acceptance_rate, shared_prefix_tokens, prefix_hit_rate, valid, error, source_path
create or replace view staging.workloads as
with source as (
    select * from raw.workloads
),

typed as (
    select
        run.run_id,
        run.run_date,
        workload::varchar as workload,
        description::varchar as description,
        models::varchar[] as models,
        target_concurrency::bigint as target_concurrency,
        context_tokens::bigint as context_tokens,
        context_source::varchar as context_source,
        max_model_len::bigint as max_model_len,
        dtype_policy::varchar as dtype_policy,
        weight_dtypes::varchar[] as weight_dtypes,
        kv_dtypes::varchar[] as kv_dtypes,
        headroom::double as headroom,
        engine::varchar as engine,
        engine_version::varchar as engine_version,
        gpus::varchar[] as gpus,
        max_gpus_per_replica::bigint as max_gpus_per_replica,
        request_rate_per_s::double as request_rate_per_s,
        request_buckets::varchar[] as request_buckets,
        adapters::bigint as adapters,
        adapter_rank::bigint as adapter_rank,
        adapter_slots::bigint as adapter_slots,
        speculative_method::varchar as speculative_method,
        speculative_draft::varchar as speculative_draft,
        num_speculative_tokens::bigint as num_speculative_tokens,
        acceptance_rate::double as acceptance_rate,
        shared_prefix_tokens::bigint as shared_prefix_tokens,
        prefix_hit_rate::double as prefix_hit_rate,
        valid::boolean as valid,
        error::varchar as error,
        source_path::varchar as source_path
    from source
    cross join raw.run as run
)

select * from typed;
