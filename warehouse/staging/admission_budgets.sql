-- staging.admission_budgets: per observed deployment, the token and sequence budget a router should enforce (recommendations.admission), typed and stamped with the run.
-- grain: one deployment id.
-- columns: run_id, run_date, deployment_id, model, served_model_name, gpu, tp, pp, engine,
--   engine_version, max_model_len, max_num_seqs, capacity_source, kv_capacity_tokens,
--   b_max_at_max_len, headroom, token_budget, sequence_budget_at_max_len, tokens_per_sequence,
--   tokens_per_sequence_source, sequence_budget, max_request_tokens, calibrated, calibration_scope,
--   n_observations, peak_kv_usage, peak_requests_running, peak_requests_waiting,
--   preemptions_in_window, peak_kv_tokens, over_budget, over_capacity, status_reason
create or replace view staging.admission_budgets as
with source as (
    select * from raw.admission_budgets
),

typed as (
    select
        run.run_id,
        run.run_date,
        deployment_id::varchar as deployment_id,
        model::varchar as model,
        served_model_name::varchar as served_model_name,
        gpu::varchar as gpu,
        tp::integer as tp,
        pp::integer as pp,
        engine::varchar as engine,
        engine_version::varchar as engine_version,
        max_model_len::bigint as max_model_len,
        max_num_seqs::bigint as max_num_seqs,
        capacity_source::varchar as capacity_source,
        kv_capacity_tokens::bigint as kv_capacity_tokens,
        b_max_at_max_len::bigint as b_max_at_max_len,
        headroom::double as headroom,
        token_budget::bigint as token_budget,
        sequence_budget_at_max_len::bigint as sequence_budget_at_max_len,
        tokens_per_sequence::bigint as tokens_per_sequence,
        tokens_per_sequence_source::varchar as tokens_per_sequence_source,
        sequence_budget::bigint as sequence_budget,
        max_request_tokens::bigint as max_request_tokens,
        calibrated::boolean as calibrated,
        calibration_scope::varchar as calibration_scope,
        n_observations::bigint as n_observations,
        peak_kv_usage::double as peak_kv_usage,
        peak_requests_running::double as peak_requests_running,
        peak_requests_waiting::double as peak_requests_waiting,
        preemptions_in_window::double as preemptions_in_window,
        peak_kv_tokens::bigint as peak_kv_tokens,
        over_budget::boolean as over_budget,
        over_capacity::boolean as over_capacity,
        status_reason::varchar as status_reason
    from source
    cross join raw.run as run
)

select * from typed;
