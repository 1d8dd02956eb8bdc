-- Models that no single GPU can serve at 8k context, with the fewest GPUs per replica that can.
select
    model,
    min(num_gpus) filter (where fits) as min_gpus_per_replica,
    bool_or(fits and num_gpus = 1) as fits_one_gpu
from marts.capacity_grid
where context = 8192
group by model
having not bool_or(fits and num_gpus = 1)
order by min_gpus_per_replica desc nulls first, model;
