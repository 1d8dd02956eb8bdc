-- The longest context Qwen3-32B serves to 32 concurrent sequences, per GPU and tensor-parallel size (vLLM).
select gpu, tp, weight_dtype, kv_dtype, max_context
from marts.context_limits
where model = 'Qwen/Qwen3-32B' and engine = 'vllm' and concurrency = 32 and pp = 1
order by max_context desc, gpu, tp, weight_dtype, kv_dtype
limit 20;
