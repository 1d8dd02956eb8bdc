-- raw.workloads: the workload profiles as read from workloads.yaml (CAPPLAN_WORKLOADS), and the entries that could not be.
-- grain: one workload entry.
-- columns: workload, description, models, target_concurrency, context_tokens, context_source,
--   max_model_len, dtype_policy, weight_dtypes, kv_dtypes, headroom, engine, engine_version, gpus,
--   max_gpus_per_replica, request_rate_per_s, request_buckets, adapters, adapter_rank, adapter_slots,
--   speculative_method, speculative_draft, num_speculative_tokens, acceptance_rate, shared_prefix_tokens,
--   prefix_hit_rate, valid, error, source_path
-- written by: the `recommendations` asset, from the frame registered as `incoming`.
create or replace table raw.workloads as
select * from incoming;

comment on table raw.workloads is 'The workload profiles as read from workloads.yaml (CAPPLAN_WORKLOADS), and the entries that could not be.';
