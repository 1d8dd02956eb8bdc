-- marts.admission_budgets: per observed deployment, the token and sequence budget a router should enforce (latest run); `capplan export admission` writes it as JSON.
-- grain: one deployment id.
-- columns: run_id, run_date, deployment_id, model, served_model_name, gpu, tp, pp, engine,
--   engine_version, max_model_len, max_num_seqs, capacity_source, kv_capacity_tokens,
--   b_max_at_max_len, headroom, token_budget, sequence_budget_at_max_len, tokens_per_sequence,
--   tokens_per_sequence_source, sequence_budget, max_request_tokens, calibrated, calibration_scope,
--   n_observations, peak_kv_usage, peak_requests_running, peak_requests_waiting,
--   preemptions_in_window, peak_kv_tokens, over_budget, over_capacity, status_reason
-- history: marts.admission_budgets_history (every retained run).
-- column comments: admission_budgets.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.admission_budgets as
with budgets as (
    select * from staging.admission_budgets
)

select
    run_id,
    run_date,
    deployment_id,
    model,
    served_model_name,
    gpu,
    tp,
    pp,
    engine,
    engine_version,
    max_model_len,
    max_num_seqs,
    capacity_source,
    kv_capacity_tokens,
    b_max_at_max_len,
    headroom,
    token_budget,
    sequence_budget_at_max_len,
    tokens_per_sequence,
    tokens_per_sequence_source,
    sequence_budget,
    max_request_tokens,
    calibrated,
    calibration_scope,
    n_observations,
    peak_kv_usage,
    peak_requests_running,
    peak_requests_waiting,
    preemptions_in_window,
    peak_kv_tokens,
    over_budget,
    over_capacity,
    status_reason
from budgets;

comment on view marts.admission_budgets is 'Per observed deployment, the token and sequence budget a router should enforce (latest run); `capplan export admission` writes it as JSON.';
