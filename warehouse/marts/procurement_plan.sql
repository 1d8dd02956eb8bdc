-- marts.procurement_plan: gPUs to buy per SKU, and their cost, to serve every workload profile with the recommended placements (latest run).
-- grain: one GPU SKU bought.
-- columns: run_id, run_date, gpu, gpu_name, gpus_used, gpus_bought, nodes, spare_gpus,
--   usd_per_gpu_hour, price_basis, price_provider, price_region, price_commitment, price_source,
--   price_date, usd_per_hour, workloads, fleet_gpus, fleet_usd_per_hour, method, optimal,
--   whole_nodes, unserved, notes
-- history: marts.procurement_plan_history (every retained run).
create or replace view marts.procurement_plan as
with plan as (
    select * from staging.procurement_plan
),

prices as (
    select gpu, price_basis, price_provider, price_region, price_commitment, price_source, price_date
    from staging.gpus
)

select
    run_id,
    run_date,
    gpu,
    gpu_name,
    gpus_used,
    gpus_bought,
    nodes,
    spare_gpus,
    usd_per_gpu_hour,
    price_basis,
    price_provider,
    price_region,
    price_commitment,
    price_source,
    price_date,
    usd_per_hour,
    workloads,
    fleet_gpus,
    fleet_usd_per_hour,
    method,
    optimal,
    whole_nodes,
    unserved,
    notes
from plan
left join prices using (gpu);

comment on view marts.procurement_plan is 'GPUs to buy per SKU, and their cost, to serve every workload profile (latest run): one recommended placement per workload x model, or, for a workload with a request_rate, its request-size buckets split across GPU types (marts.procurement_buckets); one MILP for both, so they share nodes.';
comment on column marts.procurement_plan.gpu is 'GPU catalog id to buy.';
comment on column marts.procurement_plan.gpu_name is 'GPU name.';
comment on column marts.procurement_plan.gpus_used is 'GPUs the planned replicas use on this SKU (placements and bucket replicas).';
comment on column marts.procurement_plan.gpus_bought is 'GPUs to buy (whole nodes when whole_nodes).';
comment on column marts.procurement_plan.nodes is 'Nodes to buy; null when GPUs are bought one by one.';
comment on column marts.procurement_plan.spare_gpus is 'gpus_bought - gpus_used.';
comment on column marts.procurement_plan.usd_per_gpu_hour is 'GPU price.';
comment on column marts.procurement_plan.usd_per_hour is 'gpus_bought x usd_per_gpu_hour.';
comment on column marts.procurement_plan.workloads is 'workload:model pairs served on this SKU (by a placement, or by some of their request-size buckets).';
comment on column marts.procurement_plan.fleet_gpus is 'GPUs of the whole plan.';
comment on column marts.procurement_plan.fleet_usd_per_hour is '$/hour of the whole plan.';
comment on column marts.procurement_plan.method is 'How the plan was solved: highs (one MILP for placements and buckets), enumeration, or greedy; with request-size buckets and no solver, enumeration+cheapest-per-request or greedy+cheapest-per-request (planned apart, GPUs added up, not proven optimal).';
comment on column marts.procurement_plan.optimal is 'True when proven optimal (highs or enumeration).';
comment on column marts.procurement_plan.whole_nodes is 'True when GPUs are bought in whole nodes.';
comment on column marts.procurement_plan.unserved is 'workload:model: reason for every demand the plan cannot serve.';
comment on column marts.procurement_plan.notes is 'Solver notes (time limit reached, greedy fallback).';
