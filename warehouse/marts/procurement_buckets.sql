-- marts.procurement_buckets: The request-size bucket plan (after Mélange): each bucket of every workload with a request rate, split across GPU layouts by a MILP (capacity.procurement.plan_buckets) (latest run).
-- grain: one bucket x layout serving part of it (one row per workload x model it cannot serve).
-- columns: run_id, run_date, workload, model, bucket, input_tokens, output_tokens, bucket_share,
--   bucket_requests_per_second, gpu, layout, gpus_per_replica, share, requests_per_second,
--   batch_per_replica, tpot_ms, ttft_ms, requests_per_second_per_replica, replica_load,
--   layout_replicas, binding, usd_per_million_output_tokens, plan_gpus, plan_usd_per_hour,
--   plan_usd_per_million_output_tokens, method, optimal, whole_nodes, reason, notes
-- history: marts.procurement_buckets_history (every retained run).
-- column comments: procurement_buckets.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.procurement_buckets as
with plan as (
    select * from staging.procurement_buckets
)

select
    run_id,
    run_date,
    workload,
    model,
    bucket,
    input_tokens,
    output_tokens,
    bucket_share,
    bucket_requests_per_second,
    gpu,
    layout,
    gpus_per_replica,
    share,
    requests_per_second,
    batch_per_replica,
    tpot_ms,
    ttft_ms,
    requests_per_second_per_replica,
    replica_load,
    layout_replicas,
    binding,
    usd_per_million_output_tokens,
    plan_gpus,
    plan_usd_per_hour,
    plan_usd_per_million_output_tokens,
    method,
    optimal,
    whole_nodes,
    reason,
    notes
from plan;

comment on view marts.procurement_buckets is 'The request-size bucket plan (after Mélange): each bucket of every workload with a request rate, split across GPU layouts by a MILP (capacity.procurement.plan_buckets) (latest run): per bucket and layout its share, the batch and latency there, what binds, and $ per million output tokens.';
