-- marts.admission_budgets: per observed deployment, the token and sequence budget a router should enforce (latest run); `capplan export admission` writes it as JSON.
-- grain: one deployment id.
-- columns: run_id, run_date, deployment_id, model, served_model_name, gpu, tp, pp, engine,
--   engine_version, max_model_len, max_num_seqs, capacity_source, kv_capacity_tokens,
--   b_max_at_max_len, headroom, token_budget, sequence_budget_at_max_len, tokens_per_sequence,
--   tokens_per_sequence_source, sequence_budget, max_request_tokens, calibrated, calibration_scope,
--   n_observations, peak_kv_usage, peak_requests_running, peak_requests_waiting,
--   preemptions_in_window, peak_kv_tokens, over_budget, over_capacity, status_reason
-- history: marts.admission_budgets_history (every retained run).
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
comment on column marts.admission_budgets.deployment_id is 'Observed deployment.';
comment on column marts.admission_budgets.model is 'Registry id of the model it serves.';
comment on column marts.admission_budgets.served_model_name is 'The name clients use (--served-model-name), when reported.';
comment on column marts.admission_budgets.gpu is 'GPU catalog id.';
comment on column marts.admission_budgets.engine_version is 'Engine version.';
comment on column marts.admission_budgets.max_model_len is 'The engine''s max_model_len.';
comment on column marts.admission_budgets.max_num_seqs is 'The engine''s max_num_seqs (its own cap on running sequences).';
comment on column marts.admission_budgets.capacity_source is 'Where the KV capacity comes from: measured (the engine''s block count), calibrated, or predicted.';
comment on column marts.admission_budgets.kv_capacity_tokens is 'KV tokens the pool holds in sequences of max_model_len (per replica).';
comment on column marts.admission_budgets.b_max_at_max_len is 'Sequences of max_model_len tokens the pool holds at once.';
comment on column marts.admission_budgets.headroom is 'Share of the capacity to admit (CAPPLAN_ADMISSION_HEADROOM_PCT / 100).';
comment on column marts.admission_budgets.token_budget is 'floor(kv_capacity_tokens x headroom): KV tokens in flight (prompt + max_tokens of admitted requests) not to exceed.';
comment on column marts.admission_budgets.sequence_budget_at_max_len is 'floor(b_max_at_max_len x headroom), at least 1 when one fits: safe even if every request reaches max_model_len.';
comment on column marts.admission_budgets.tokens_per_sequence is 'Tokens a sequence holds: observed at the peak (peak_kv_tokens / peak_requests_running), else max_model_len.';
comment on column marts.admission_budgets.tokens_per_sequence_source is 'observed or max_model_len.';
comment on column marts.admission_budgets.sequence_budget is 'min(max_num_seqs, token_budget / tokens_per_sequence): concurrent requests to admit.';
comment on column marts.admission_budgets.max_request_tokens is 'Longest request to admit: the effective context limit at concurrency 1.';
comment on column marts.admission_budgets.calibrated is 'True when a calibration scope applies to this deployment.';
comment on column marts.admission_budgets.n_observations is 'Deployments the applied scope was fitted on.';
comment on column marts.admission_budgets.peak_kv_usage is 'Largest KV usage fraction observed.';
comment on column marts.admission_budgets.peak_kv_tokens is 'KV tokens in use at the peak: peak_kv_usage x the engine''s pool.';
comment on column marts.admission_budgets.over_budget is 'The observed peak used more than token_budget (the headroom).';
comment on column marts.admission_budgets.over_capacity is 'The deployment admitted more than its capacity: preemptions, queueing with a full KV cache, or peak demand above the capacity.';
comment on column marts.admission_budgets.status_reason is 'Why over_capacity / over_budget, one line.';
