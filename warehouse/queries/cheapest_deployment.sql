-- The cheapest ways to serve 64 concurrent 8k-token sequences of Llama-3.1-8B with vLLM, by $/hour of one
-- replica, with its layout (tp x pp = gpus per replica).
select
    gpu,
    weight_dtype,
    kv_dtype,
    tp,
    pp,
    num_gpus as gpus,
    b_max,
    usd_per_hour,
    round(usd_per_hour / b_max, 4) as usd_per_sequence_hour
from marts.capacity_grid
where
    model = 'meta-llama/Llama-3.1-8B-Instruct'
    and engine = 'vllm'
    and context = 8192
    and fits
    and b_max >= 64
    and usd_per_hour is not null
order by usd_per_hour, usd_per_sequence_hour, gpu
limit 10;
