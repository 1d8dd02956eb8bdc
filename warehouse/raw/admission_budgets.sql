-- raw.admission_budgets: per observed deployment, the token and sequence budget a router should enforce (recommendations.admission).
-- grain: one deployment id.
-- columns: deployment_id, model, served_model_name, gpu, tp, pp, engine, engine_version,
--   max_model_len, max_num_seqs, capacity_source, kv_capacity_tokens, b_max_at_max_len, headroom,
--   token_budget, sequence_budget_at_max_len, tokens_per_sequence, tokens_per_sequence_source,
--   sequence_budget, max_request_tokens, calibrated, calibration_scope, n_observations,
--   peak_kv_usage, peak_requests_running, peak_requests_waiting, preemptions_in_window,
--   peak_kv_tokens, over_budget, over_capacity, status_reason
-- written by: the `admission_budgets` asset, from the frame registered as `incoming`.
create or replace table raw.admission_budgets as
select * from incoming;

comment on table raw.admission_budgets is 'Per observed deployment, the token and sequence budget a router should enforce (recommendations.admission).';
