-- The longest context Qwen3-32B serves to 32 concurrent sequences with vLLM, on each GPU. One row per
-- GPU: the smallest replica (fewest GPUs, then the lower TP) that reaches the model's own context
-- limit, else the longest context any replica reaches; rows that only repeat the model's limit on a
-- larger replica are left out. Columns: gpu, layout (TP x PP), gpus (per replica), weight_dtype,
-- kv_dtype, max_context, at_model_limit (max_context is the model's limit, not what memory allows).
with limits as (
    select
        l.*,
        l.max_context >= m.context_limit_tokens as at_model_limit
    from marts.context_limits as l
    inner join marts.models as m on l.model = m.model
    where l.model = 'Qwen/Qwen3-32B' and l.engine = 'vllm' and l.concurrency = 32 and l.max_context > 0
)

select
    gpu,
    'TP ' || tp || ' x PP ' || pp as layout,
    num_gpus as gpus,
    weight_dtype,
    kv_dtype,
    max_context,
    at_model_limit
from limits
qualify row_number() over (
    partition by gpu
    order by at_model_limit desc, case when at_model_limit then num_gpus end, max_context desc, num_gpus, tp,
        weight_dtype, kv_dtype
) = 1
order by max_context desc, gpus, gpu;
