-- staging.procurement_buckets: The request-size bucket plan (after Mélange): each bucket of every workload with a request rate, split across GPU layouts by a MILP (capacity.procurement.plan_buckets), typed and stamped with the run.
-- grain: one bucket x layout serving part of it (one row per workload x model it cannot serve).
-- columns: run_id, run_date, workload, model, bucket, input_tokens, output_tokens, bucket_share,
--   bucket_requests_per_second, gpu, layout, gpus_per_replica, share, requests_per_second,
--   batch_per_replica, tpot_ms, ttft_ms, requests_per_second_per_replica, replica_load,
--   layout_replicas, binding, usd_per_million_output_tokens, plan_gpus, plan_usd_per_hour,
--   plan_usd_per_million_output_tokens, method, optimal, whole_nodes, reason, notes
-- casts: `@casts workload_model` is workload, model cast to varchar, written out by warehouse.sql.read_sql.
create or replace view staging.procurement_buckets as
with source as (
    select * from raw.procurement_buckets
),

typed as (
    select
        run.run_id,
        run.run_date,
        @casts workload_model,
        bucket::varchar as bucket,
        input_tokens::bigint as input_tokens,
        output_tokens::bigint as output_tokens,
        bucket_share::double as bucket_share,
        bucket_requests_per_second::double as bucket_requests_per_second,
        gpu::varchar as gpu,
        layout::varchar as layout,
        gpus_per_replica::bigint as gpus_per_replica,
        share::double as share,
        requests_per_second::double as requests_per_second,
        batch_per_replica::bigint as batch_per_replica,
        tpot_ms::double as tpot_ms,
        ttft_ms::double as ttft_ms,
        requests_per_second_per_replica::double as requests_per_second_per_replica,
        replica_load::double as replica_load,
        layout_replicas::bigint as layout_replicas,
        binding::varchar as binding,
        usd_per_million_output_tokens::double as usd_per_million_output_tokens,
        plan_gpus::varchar[] as plan_gpus,
        plan_usd_per_hour::double as plan_usd_per_hour,
        plan_usd_per_million_output_tokens::double as plan_usd_per_million_output_tokens,
        method::varchar as method,
        optimal::boolean as optimal,
        whole_nodes::boolean as whole_nodes,
        reason::varchar as reason,
        notes::varchar as notes
    from source
    cross join raw.run as run
)

select * from typed;
