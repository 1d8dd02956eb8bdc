-- The cheapest placement of every model x workload profile (workloads.yaml), with its $/hour per concurrent sequence.
select
    workload,
    model,
    gpu,
    tp,
    pp,
    weight_dtype,
    kv_dtype,
    replicas,
    gpus_total,
    round(usd_per_hour, 2) as usd_per_hour,
    round(usd_per_sequence_hour, 4) as usd_per_sequence_hour,
    calibrated,
    in_fleet_plan
from marts.recommended_placements
where rank = 1
order by workload, usd_per_hour;
