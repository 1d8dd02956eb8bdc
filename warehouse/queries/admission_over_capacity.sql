-- Deployments that admitted more than their KV capacity (preemptions, queueing with a full cache), and the budget to enforce.
select
    deployment_id,
    model,
    gpu,
    capacity_source,
    token_budget,
    sequence_budget,
    max_request_tokens,
    round(peak_kv_usage, 3) as peak_kv_usage,
    preemptions_in_window,
    status_reason
from marts.admission_budgets
where over_capacity
order by preemptions_in_window desc nulls last, deployment_id;
