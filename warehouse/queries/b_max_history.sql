-- How an answer moved across runs: B_max of Llama-3.1-8B on H100 SXM at 32k (vLLM, TP 1), per run.
-- History keeps the per-context columns; the deployment's own columns are in deployments_history.
select d.run_date, d.run_id, d.weight_dtype, d.kv_dtype, g.b_max
from marts.capacity_grid_history as g
inner join marts.deployments_history as d
    on g.run_id = d.run_id and g.deployment_id = d.deployment_id
where
    d.model = 'meta-llama/Llama-3.1-8B-Instruct'
    and d.gpu = 'h100-sxm-80gb'
    and d.engine = 'vllm'
    and d.tp = 1
    and d.pp = 1
    and g.context = 32768
order by d.run_date desc, d.run_id, d.weight_dtype, d.kv_dtype;
