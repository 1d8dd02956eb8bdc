-- staging.packed_placements: Several models on one GPU: fleet-plan assignments of a GPU each that one GPU holds for less (recommendations.packing, capacity.packing), typed and stamped with the run.
-- grain: one model of a pack (a pack: one GPU, its engines in start order).
-- columns: run_id, run_date, pack, gpu, start_order, workload, model, engine, context_tokens,
--   packed_concurrency, kv_budget_bytes, gpu_memory_utilization, footprint_bytes,
--   others_at_start_bytes, usd_per_hour_apart, pack_usd_per_hour, command
create or replace view staging.packed_placements as
with source as (
    select * from raw.packed_placements
),

typed as (
    select
        run.run_id,
        run.run_date,
        pack::bigint as pack,
        gpu::varchar as gpu,
        start_order::bigint as start_order,
        workload::varchar as workload,
        model::varchar as model,
        engine::varchar as engine,
        context_tokens::bigint as context_tokens,
        packed_concurrency::bigint as packed_concurrency,
        kv_budget_bytes::bigint as kv_budget_bytes,
        gpu_memory_utilization::double as gpu_memory_utilization,
        footprint_bytes::bigint as footprint_bytes,
        others_at_start_bytes::bigint as others_at_start_bytes,
        usd_per_hour_apart::double as usd_per_hour_apart,
        pack_usd_per_hour::double as pack_usd_per_hour,
        command::varchar as command
    from source
    cross join raw.run as run
)

select * from typed;
