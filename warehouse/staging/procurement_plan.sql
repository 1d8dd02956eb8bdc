-- staging.procurement_plan: the fleet's procurement plan: GPUs to buy per SKU to serve every workload (capacity.placement.plan_procurement), typed and stamped with the run.
-- grain: one GPU SKU bought.
-- columns: run_id, run_date, gpu, gpu_name, gpus_used, gpus_bought, nodes, spare_gpus,
--   usd_per_gpu_hour, usd_per_hour, workloads, fleet_gpus, fleet_usd_per_hour, method, optimal,
--   whole_nodes, unserved, notes
create or replace view staging.procurement_plan as
with source as (
    select * from raw.procurement_plan
),

typed as (
    select
        run.run_id,
        run.run_date,
        gpu::varchar as gpu,
        gpu_name::varchar as gpu_name,
        gpus_used::bigint as gpus_used,
        gpus_bought::bigint as gpus_bought,
        nodes::bigint as nodes,
        spare_gpus::bigint as spare_gpus,
        usd_per_gpu_hour::double as usd_per_gpu_hour,
        usd_per_hour::double as usd_per_hour,
        workloads::varchar[] as workloads,
        fleet_gpus::bigint as fleet_gpus,
        fleet_usd_per_hour::double as fleet_usd_per_hour,
        method::varchar as method,
        optimal::boolean as optimal,
        whole_nodes::boolean as whole_nodes,
        unserved::varchar[] as unserved,
        notes::varchar as notes
    from source
    cross join raw.run as run
)

select * from typed;
