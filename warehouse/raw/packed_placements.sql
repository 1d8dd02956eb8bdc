-- raw.packed_placements: Several models on one GPU: fleet-plan assignments of a GPU each that one GPU holds for less (recommendations.packing, capacity.packing).
-- grain: one model of a pack (a pack: one GPU, its engines in start order).
-- columns: pack, gpu, start_order, workload, model, engine, context_tokens, packed_concurrency,
--   kv_budget_bytes, gpu_memory_utilization, footprint_bytes, others_at_start_bytes,
--   usd_per_hour_apart, pack_usd_per_hour, command
-- written by: the `recommendations` asset, from the frame registered as `incoming`.
create or replace table raw.packed_placements as
select * from incoming;

comment on table raw.packed_placements is 'Several models on one GPU: fleet-plan assignments of a GPU each that one GPU holds for less (recommendations.packing, capacity.packing).';
