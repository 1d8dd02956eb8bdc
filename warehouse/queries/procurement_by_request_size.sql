-- Where each request-size bucket of the rated workloads runs, what binds there and its $ per million output tokens.
select
    workload,
    model,
    bucket,
    input_tokens,
    output_tokens,
    round(bucket_requests_per_second, 2) as bucket_requests_per_s,
    layout,
    round(share, 3) as share,
    batch_per_replica,
    round(tpot_ms, 1) as tpot_ms,
    binding,
    layout_replicas,
    round(usd_per_million_output_tokens, 4) as usd_per_million_output_tokens
from marts.procurement_buckets
where reason is null
order by workload, model, bucket, share desc;
