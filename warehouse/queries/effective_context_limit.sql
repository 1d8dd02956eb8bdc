-- The context to enforce for Llama-3.1-8B on each GPU and TP at 32 concurrent sequences, and which limit binds.
select
    gpu,
    tp,
    pp,
    model_limit,
    memory_limit,
    calibrated_limit,
    effective_limit,
    binding,
    n_observations
from marts.effective_context_limits
where
    kind = 'model_gpu_tp'
    and model = 'meta-llama/Llama-3.1-8B-Instruct'
    and concurrency = 32
    and effective_limit > 0
order by effective_limit desc, gpu, tp
limit 20;
