-- How an answer moved across runs: B_max of Llama-3.1-8B on H100 SXM at 32k (vLLM, TP 1), per run.
select run_date, run_id, weight_dtype, kv_dtype, b_max
from marts.capacity_grid_history
where
    model = 'meta-llama/Llama-3.1-8B-Instruct'
    and gpu = 'h100-sxm-80gb'
    and engine = 'vllm'
    and tp = 1
    and pp = 1
    and context = 32768
order by run_date desc, run_id, weight_dtype, kv_dtype;
