-- marts.prediction_vs_measured: every observed deployment next to capplan's prediction for the same settings.
-- grain: one observed deployment (latest run).
-- columns: run_id, run_date, deployment_id, telemetry_source, model, model_family, gpu, engine,
--   engine_version, engine_version_predicted, tp, pp, weight_dtype, kv_dtype, max_model_len,
--   gpu_memory_utilization, startup_outcome, prediction_status, prediction_reason, not_modelled,
--   measured_weights_bytes, predicted_weights_bytes, weights_error, measured_activation_peak_bytes,
--   predicted_activation_peak_bytes, activation_peak_error, measured_non_torch_bytes,
--   predicted_non_torch_bytes, non_torch_error, measured_kv_pool_bytes, measured_kv_pool_source,
--   predicted_kv_pool_bytes, kv_pool_error, measured_num_gpu_blocks, predicted_num_gpu_blocks,
--   num_gpu_blocks_error, measured_kv_cache_tokens, predicted_kv_cache_tokens,
--   kv_cache_tokens_error, concurrency_tokens, measured_max_concurrency, predicted_max_concurrency,
--   max_concurrency_error, calibrated, calibration_scope, calibration_observations,
--   calibrated_kv_pool_bytes, calibrated_kv_pool_error, loo_kv_pool_bytes, loo_kv_pool_error,
--   predicted_b_max, measured_b_max, peak_kv_usage, p95_kv_usage, peak_requests_running,
--   peak_requests_waiting, preemptions_in_window, running_vs_b_max, saturation,
--   observed_concurrency, observed_input_tokens, observed_output_tokens, requests_in_window,
--   speed_window_s, engines_seen, speed_concurrency, speed_input_tokens, speed_output_tokens,
--   measured_output_tokens_per_second, measured_throughput_source,
--   predicted_output_tokens_per_second, output_tokens_per_second_error, measured_tpot_mean_ms,
--   measured_tpot_p50_ms, measured_tpot_p90_ms, measured_tpot_p99_ms, predicted_tpot_ms,
--   tpot_error, measured_ttft_mean_ms, measured_ttft_p50_ms, measured_ttft_p90_ms,
--   measured_ttft_p99_ms, predicted_ttft_ms, ttft_error, speed_reason, n_samples, last_observed_at
-- errors: (predicted - measured) / measured, null where either side is missing (tpot / ttft: against the measured mean).
-- history: marts.prediction_vs_measured_history (every retained run).
-- defines: the macro marts.relative_error(predicted, measured), the one formula of every *_error column.
-- column comments: prediction_vs_measured.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace macro marts.relative_error(predicted, measured) as
    (predicted::double - measured::double) / nullif(measured::double, 0);

create or replace view marts.prediction_vs_measured as
with deployments as (
    select * from staging.telemetry_deployments
),

predictions as (
    select * from staging.telemetry_predictions
),

calibration as (
    select * from staging.deployment_calibration
)

select
    d.run_id,
    d.run_date,
    d.deployment_id as deployment_id,
    d.telemetry_source as telemetry_source,
    d.model as model,
    p.model_family as model_family,
    d.gpu as gpu,
    coalesce(d.engine, p.engine) as engine,
    d.engine_version as engine_version,
    p.engine_version as engine_version_predicted,
    coalesce(d.tp, p.tp) as tp,
    coalesce(d.pp, p.pp) as pp,
    p.weight_dtype as weight_dtype,
    p.kv_dtype as kv_dtype,
    p.max_model_len as max_model_len,
    p.gpu_memory_utilization as gpu_memory_utilization,
    d.latest_startup_outcome as startup_outcome,
    coalesce(p.prediction_status, 'skipped') as prediction_status,
    p.prediction_reason as prediction_reason,
    p.not_modelled as not_modelled,
    d.weights_bytes as measured_weights_bytes,
    p.predicted_weights_bytes as predicted_weights_bytes,
    marts.relative_error(p.predicted_weights_bytes, d.weights_bytes) as weights_error,
    d.activation_peak_bytes as measured_activation_peak_bytes,
    p.predicted_activation_peak_bytes as predicted_activation_peak_bytes,
    marts.relative_error(p.predicted_activation_peak_bytes, d.activation_peak_bytes) as activation_peak_error,
    d.non_torch_bytes as measured_non_torch_bytes,
    p.predicted_non_torch_bytes as predicted_non_torch_bytes,
    marts.relative_error(p.predicted_non_torch_bytes, d.non_torch_bytes) as non_torch_error,
    p.measured_kv_pool_bytes as measured_kv_pool_bytes,
    p.measured_kv_pool_source as measured_kv_pool_source,
    p.predicted_kv_pool_bytes as predicted_kv_pool_bytes,
    marts.relative_error(p.predicted_kv_pool_bytes, p.measured_kv_pool_bytes) as kv_pool_error,
    d.num_gpu_blocks as measured_num_gpu_blocks,
    p.predicted_num_gpu_blocks as predicted_num_gpu_blocks,
    marts.relative_error(p.predicted_num_gpu_blocks, d.num_gpu_blocks) as num_gpu_blocks_error,
    d.kv_cache_tokens as measured_kv_cache_tokens,
    p.predicted_kv_cache_tokens as predicted_kv_cache_tokens,
    marts.relative_error(p.predicted_kv_cache_tokens, d.kv_cache_tokens) as kv_cache_tokens_error,
    p.context_tokens as concurrency_tokens,
    d.max_concurrency as measured_max_concurrency,
    p.predicted_max_concurrency as predicted_max_concurrency,
    marts.relative_error(p.predicted_max_concurrency, d.max_concurrency) as max_concurrency_error,
    coalesce(c.calibrated, false) as calibrated,
    c.calibration_scope as calibration_scope,
    coalesce(c.n_observations, 0) as calibration_observations,
    c.calibrated_kv_pool_bytes as calibrated_kv_pool_bytes,
    marts.relative_error(c.calibrated_kv_pool_bytes, p.measured_kv_pool_bytes) as calibrated_kv_pool_error,
    c.loo_kv_pool_bytes as loo_kv_pool_bytes,
    marts.relative_error(c.loo_kv_pool_bytes, p.measured_kv_pool_bytes) as loo_kv_pool_error,
    p.predicted_b_max as predicted_b_max,
    p.measured_b_max as measured_b_max,
    d.peak_kv_usage as peak_kv_usage,
    d.p95_kv_usage as p95_kv_usage,
    d.peak_requests_running as peak_requests_running,
    d.peak_requests_waiting as peak_requests_waiting,
    d.preemptions_in_window as preemptions_in_window,
    d.peak_requests_running / nullif(coalesce(p.measured_b_max, p.predicted_b_max), 0) as running_vs_b_max,
    case
        when d.peak_kv_usage is null then 'unknown'
        when d.peak_kv_usage >= 0.95
            and (coalesce(d.preemptions_in_window, 0) > 0 or coalesce(d.peak_requests_waiting, 0) > 0) then 'saturated'
        when d.peak_kv_usage >= 0.8 then 'busy'
        else 'ok'
    end as saturation,
    d.observed_concurrency as observed_concurrency,
    d.observed_input_tokens as observed_input_tokens,
    d.observed_output_tokens as observed_output_tokens,
    d.requests_in_window as requests_in_window,
    d.speed_window_s as speed_window_s,
    d.engines_seen as engines_seen,
    p.speed_concurrency as speed_concurrency,
    p.speed_input_tokens as speed_input_tokens,
    p.speed_output_tokens as speed_output_tokens,
    d.measured_output_tokens_per_second as measured_output_tokens_per_second,
    d.measured_throughput_source as measured_throughput_source,
    p.predicted_output_tokens_per_second as predicted_output_tokens_per_second,
    marts.relative_error(p.predicted_output_tokens_per_second, d.measured_output_tokens_per_second) as output_tokens_per_second_error,
    d.measured_tpot_mean_ms as measured_tpot_mean_ms,
    d.measured_tpot_p50_ms as measured_tpot_p50_ms,
    d.measured_tpot_p90_ms as measured_tpot_p90_ms,
    d.measured_tpot_p99_ms as measured_tpot_p99_ms,
    p.predicted_tpot_ms as predicted_tpot_ms,
    marts.relative_error(p.predicted_tpot_ms, d.measured_tpot_mean_ms) as tpot_error,
    d.measured_ttft_mean_ms as measured_ttft_mean_ms,
    d.measured_ttft_p50_ms as measured_ttft_p50_ms,
    d.measured_ttft_p90_ms as measured_ttft_p90_ms,
    d.measured_ttft_p99_ms as measured_ttft_p99_ms,
    p.predicted_ttft_ms as predicted_ttft_ms,
    marts.relative_error(p.predicted_ttft_ms, d.measured_ttft_mean_ms) as ttft_error,
    p.speed_reason as speed_reason,
    d.n_samples as n_samples,
    d.last_observed_at as last_observed_at
from deployments as d
left join predictions as p on d.deployment_id = p.deployment_id
left join calibration as c on d.deployment_id = c.deployment_id;

comment on view marts.prediction_vs_measured is 'Every observed deployment with capplan''s prediction for the same settings: weights, KV pool, KV tokens, concurrency, each with its error; usage and saturation (latest run).';
