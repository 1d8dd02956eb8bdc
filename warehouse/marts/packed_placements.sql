-- marts.packed_placements: Several models on one GPU: fleet-plan assignments of a GPU each that one GPU holds for less (recommendations.packing, capacity.packing) (latest run).
-- grain: one model of a pack (a pack: one GPU, its engines in start order).
-- columns: run_id, run_date, pack, gpu, start_order, workload, model, engine, context_tokens,
--   packed_concurrency, kv_budget_bytes, gpu_memory_utilization, footprint_bytes,
--   others_at_start_bytes, usd_per_hour_apart, pack_usd_per_hour, command
-- history: marts.packed_placements_history (every retained run).
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
comment on column marts.packed_placements.run_id is 'The nightly run that published this row (marts.runs.run_id).';
comment on column marts.packed_placements.run_date is 'UTC date the run started.';
comment on column marts.packed_placements.pack is 'Pack number within the run: the models sharing one GPU.';
comment on column marts.packed_placements.gpu is 'GPU catalog id of the shared GPU.';
comment on column marts.packed_placements.start_order is 'Order the engines start in (1 first): each later engine sees the earlier ones'' memory as used.';
comment on column marts.packed_placements.workload is 'Workload profile (marts.workloads.workload).';
comment on column marts.packed_placements.model is 'Registry id of the model.';
comment on column marts.packed_placements.engine is 'Serving engine (vllm, sglang, trtllm).';
comment on column marts.packed_placements.context_tokens is 'Tokens per sequence the workload is planned at.';
comment on column marts.packed_placements.packed_concurrency is 'Sequences the packed engine holds at once: the B_max that plans the workload''s target at its headroom.';
comment on column marts.packed_placements.kv_budget_bytes is 'KV budget per GPU the engine sizes its pool from (vLLM: --kv-cache-memory-bytes).';
comment on column marts.packed_placements.gpu_memory_utilization is 'Fraction on the command line: vLLM''s --gpu-memory-utilization (with the bytes, it passes the start check against what is free), SGLang''s --mem-fraction-static.';
comment on column marts.packed_placements.footprint_bytes is 'What the engine holds on the GPU: weights + overhead + KV budget (+ SGLang''s reserve outside its fraction).';
comment on column marts.packed_placements.others_at_start_bytes is 'Memory the engines started before it hold when it starts.';
comment on column marts.packed_placements.usd_per_hour_apart is '$/hour of the model''s own placement in the fleet plan (a GPU of its own).';
comment on column marts.packed_placements.pack_usd_per_hour is '$/hour of the shared GPU.';
comment on column marts.packed_placements.command is 'The engine''s server command with the flags that realize the split (one port per engine).';
