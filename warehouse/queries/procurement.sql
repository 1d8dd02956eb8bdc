-- What to buy to serve every workload profile: GPUs per SKU, nodes, and $/hour (the fleet plan).
select
    gpu,
    nodes,
    gpus_bought,
    spare_gpus,
    round(usd_per_hour, 2) as usd_per_hour,
    workloads,
    round(fleet_usd_per_hour, 2) as fleet_usd_per_hour,
    method,
    optimal
from marts.procurement_plan
order by usd_per_hour desc, gpu;
