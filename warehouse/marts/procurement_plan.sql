-- marts.procurement_plan: gPUs to buy per SKU, and their cost, to serve every workload profile with the recommended placements (latest run).
-- grain: one GPU SKU bought.
-- columns: run_id, run_date, gpu, gpu_name, gpus_used, gpus_bought, nodes, spare_gpus,
--   usd_per_gpu_hour, price_basis, price_provider, price_region, price_commitment, price_source,
--   price_date, usd_per_hour, workloads, fleet_gpus, fleet_usd_per_hour, method, optimal,
--   whole_nodes, unserved, notes
-- history: marts.procurement_plan_history (every retained run).
-- select list: `@columns gpu_price` is the price offer's columns of staging.gpus (warehouse.sql.read_sql).
-- column comments: procurement_plan.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.procurement_plan as
with plan as (
    select * from staging.procurement_plan
),

prices as (
    select
        gpu,
        @columns gpu_price
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
    @columns gpu_price,
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
