-- marts.packed_placements: Several models on one GPU: fleet-plan assignments of a GPU each that one GPU holds for less (recommendations.packing, capacity.packing) (latest run).
-- grain: one model of a pack (a pack: one GPU, its engines in start order).
-- columns: run_id, run_date, pack, gpu, start_order, workload, model, engine, context_tokens,
--   packed_concurrency, kv_budget_bytes, gpu_memory_utilization, footprint_bytes,
--   others_at_start_bytes, usd_per_hour_apart, pack_usd_per_hour, command
-- history: marts.packed_placements_history (every retained run).
-- column comments: packed_placements.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.packed_placements as
with packs as (
    select * from staging.packed_placements
)

select
    run_id,
    run_date,
    pack,
    gpu,
    start_order,
    workload,
    model,
    engine,
    context_tokens,
    packed_concurrency,
    kv_budget_bytes,
    gpu_memory_utilization,
    footprint_bytes,
    others_at_start_bytes,
    usd_per_hour_apart,
    pack_usd_per_hour,
    command
from packs;

comment on view marts.packed_placements is 'Several models on one GPU (latest run): where the fleet plan gives workloads a GPU each and one GPU holds them for less, each model''s KV budget, its share of the GPU in start order and the engine command that realizes it.';
