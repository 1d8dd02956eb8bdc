-- How an answer moved across runs: B_max of Llama-3.1-8B on H100 SXM at 32k (vLLM, TP 1), per run date.
select h.run_date, h.run_id, h.weight_dtype, h.kv_dtype, h.b_max
from marts.capacity_grid_history as h
where
    h.model = 'meta-llama/Llama-3.1-8B-Instruct'
    and h.gpu = 'h100-sxm-80gb'
    and h.engine = 'vllm'
    and h.tp = 1
    and h.pp = 1
    and h.context = 32768
order by h.run_date desc, h.run_id, h.weight_dtype, h.kv_dtype;
