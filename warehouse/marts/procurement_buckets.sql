-- marts.procurement_buckets: The request-size bucket plan (after Mélange): each bucket of every workload with a request rate, split across GPU layouts by a MILP (capacity.procurement.plan_buckets) (latest run).
-- grain: one bucket x layout serving part of it (one row per workload x model it cannot serve).
-- columns: run_id, run_date, workload, model, bucket, input_tokens, output_tokens, bucket_share,
--   bucket_requests_per_second, gpu, layout, gpus_per_replica, share, requests_per_second,
--   batch_per_replica, tpot_ms, ttft_ms, requests_per_second_per_replica, replica_load,
--   layout_replicas, binding, usd_per_million_output_tokens, plan_gpus, plan_usd_per_hour,
--   plan_usd_per_million_output_tokens, method, optimal, whole_nodes, reason, notes
-- history: marts.procurement_buckets_history (every retained run).
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
comment on column marts.procurement_buckets.workload is 'Workload profile (marts.workloads.workload) with a request_rate.';
comment on column marts.procurement_buckets.model is 'Registry id of the model.';
comment on column marts.procurement_buckets.bucket is 'Request-size bucket: the input and output percentile intervals (in<=p50/out<=p95 = prompts up to p50, outputs between p50 and p95).';
comment on column marts.procurement_buckets.input_tokens is 'Prompt tokens the bucket is sized at (its interval''s upper edge, clipped to fit max_model_len).';
comment on column marts.procurement_buckets.output_tokens is 'Generated tokens the bucket is sized at.';
comment on column marts.procurement_buckets.bucket_share is 'Share of the workload''s requests in the bucket (input share x output share: independent lengths).';
comment on column marts.procurement_buckets.bucket_requests_per_second is 'The bucket''s load: request_rate x bucket_share.';
comment on column marts.procurement_buckets.gpu is 'GPU catalog id of the layout.';
comment on column marts.procurement_buckets.layout is 'The replica layout: gpu tp=.. pp=.. weight dtype/KV dtype.';
comment on column marts.procurement_buckets.gpus_per_replica is 'TP x PP.';
comment on column marts.procurement_buckets.share is 'Share of the bucket''s requests sent to this layout (the MILP''s x).';
comment on column marts.procurement_buckets.requests_per_second is 'Requests/s of the bucket served here: bucket_requests_per_second x share.';
comment on column marts.procurement_buckets.batch_per_replica is 'B a replica runs at for this bucket: the largest that meets memory (headroom x B_max) and the workload''s TPOT/TTFT targets, capped at max_num_seqs.';
comment on column marts.procurement_buckets.tpot_ms is 'TPOT at that B and the bucket''s lengths (capacity.performance).';
comment on column marts.procurement_buckets.ttft_ms is 'Steady-state TTFT at that B.';
comment on column marts.procurement_buckets.requests_per_second_per_replica is 'What one replica serves of this bucket: B / (TTFT + output_tokens x TPOT).';
comment on column marts.procurement_buckets.replica_load is 'Replicas'' worth of time this share takes: requests_per_second / requests_per_second_per_replica.';
comment on column marts.procurement_buckets.layout_replicas is 'Replicas of this layout bought for the workload x model (all its buckets on the layout share them): ceil of the summed replica_load.';
comment on column marts.procurement_buckets.binding is 'What sets B: memory (the KV pool), latency (a TPOT or TTFT target) or throughput (the engine''s max_num_seqs: memory and latency have room).';
comment on column marts.procurement_buckets.usd_per_million_output_tokens is '$ per million generated tokens of this bucket on this layout with the replica fully used: replica $/hour / (requests_per_second_per_replica x output_tokens x 3600) x 1e6.';
comment on column marts.procurement_buckets.plan_gpus is 'GPUs the bucket replicas of all rated workloads use, per SKU (gpu: count); what is bought, in whole nodes shared with the other workloads, is marts.procurement_plan.';
comment on column marts.procurement_buckets.plan_usd_per_hour is '$/hour of the GPUs the bucket replicas use (spare GPUs of partly used nodes not counted).';
comment on column marts.procurement_buckets.plan_usd_per_million_output_tokens is 'plan_usd_per_hour over the output tokens per hour the rated workloads ask for (request_rate x output tokens), x 1e6.';
comment on column marts.procurement_buckets.method is 'highs (the fleet MILP, proven optimal when optimal) or cheapest-per-request (no solver: each bucket on its cheapest layout per request); none when no workload has a request_rate.';
comment on column marts.procurement_buckets.optimal is 'True when HiGHS proved the plan optimal.';
comment on column marts.procurement_buckets.whole_nodes is 'False: the bucket part counts GPUs used; nodes are bought for the whole fleet (marts.procurement_plan.whole_nodes).';
comment on column marts.procurement_buckets.reason is 'For a workload x model the plan cannot serve (no layout for a bucket, per-GPU limits): why; the layout columns are null.';
comment on column marts.procurement_buckets.notes is 'Solver notes.';
