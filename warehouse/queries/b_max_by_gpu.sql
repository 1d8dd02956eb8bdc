-- How many concurrent 32k-token sequences can Llama-3.1-70B serve, on each GPU? One row per GPU: its
-- layout with the most sequences per GPU (best over engines, dtypes and TP x PP), ranked per GPU, so a
-- 32-GPU replica of small cards does not outrank an 8-GPU one on its total. Rows whose B_max is the
-- engine's max_num_seqs cap (the memory holds more) are left out: they measure the cap, not the GPU.
-- Columns: gpu, layout (TP x PP), gpus (per replica), engine, weight_dtype, kv_dtype, b_max (per replica),
-- b_max_per_gpu.
select
    gpu,
    'TP ' || tp || ' x PP ' || pp as layout,
    num_gpus as gpus,
    engine,
    weight_dtype,
    kv_dtype,
    b_max,
    round(b_max / num_gpus, 2) as b_max_per_gpu
from marts.capacity_grid
where
    model = 'meta-llama/Llama-3.1-70B-Instruct'
    and context = 32768
    and fits
    and b_max > 0
    and (max_num_seqs is null or b_max_memory <= max_num_seqs)
qualify row_number() over (partition by gpu order by b_max / num_gpus desc, num_gpus, b_max desc, engine) = 1
order by b_max_per_gpu desc, gpu;
