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
comment on column marts.prediction_vs_measured.deployment_id is 'Observed deployment (marts.telemetry_observations.deployment_id).';
comment on column marts.prediction_vs_measured.telemetry_source is 'sample (the shipped SAMPLE fleet: made-up numbers), drop_folder or prometheus (your telemetry; drop_folder+prometheus when a run read both).';
comment on column marts.prediction_vs_measured.model is 'Registry id of the model (marts.models.model).';
comment on column marts.prediction_vs_measured.engine_version is 'Engine version the deployment reported.';
comment on column marts.prediction_vs_measured.engine_version_predicted is 'Engine version capplan predicted for (a representative release of the generation when none was reported).';
comment on column marts.prediction_vs_measured.weight_dtype is 'capplan --dtype the reported settings map to (auto = the checkpoint as published).';
comment on column marts.prediction_vs_measured.kv_dtype is 'capplan --kv-dtype the reported settings map to.';
comment on column marts.prediction_vs_measured.max_model_len is 'max_model_len predicted for (the reported one, else the model''s limit).';
comment on column marts.prediction_vs_measured.gpu_memory_utilization is 'GPU memory utilization predicted for (the reported one, else the engine default).';
comment on column marts.prediction_vs_measured.startup_outcome is 'Outcome of the latest engine start in a log: started, failed or unknown.';
comment on column marts.prediction_vs_measured.prediction_status is 'predicted, or skipped (prediction_reason says why).';
comment on column marts.prediction_vs_measured.prediction_reason is 'Why no prediction, or the estimate''s notes.';
comment on column marts.prediction_vs_measured.not_modelled is 'What capplan does not size in this deployment (LoRA, speculative decoding, CPU offload, DP attention, an engine path it does not model); null when modelled. Such rows are reported, never fitted into the calibration.';
comment on column marts.prediction_vs_measured.measured_weights_bytes is 'Weights per GPU the engine reported (bytes).';
comment on column marts.prediction_vs_measured.predicted_weights_bytes is 'Weights per GPU capplan predicted (bytes).';
comment on column marts.prediction_vs_measured.weights_error is '(predicted - measured) / measured: positive = capplan predicts more than the engine took.';
comment on column marts.prediction_vs_measured.measured_activation_peak_bytes is 'Activation peak of the profiling pass per GPU the engine reported (bytes).';
comment on column marts.prediction_vs_measured.predicted_activation_peak_bytes is 'Activation peak per GPU capplan predicted (bytes).';
comment on column marts.prediction_vs_measured.activation_peak_error is '(predicted - measured) / measured.';
comment on column marts.prediction_vs_measured.measured_non_torch_bytes is 'Non-torch memory per GPU the engine reported (bytes).';
comment on column marts.prediction_vs_measured.predicted_non_torch_bytes is 'Non-torch memory per GPU capplan predicted (bytes).';
comment on column marts.prediction_vs_measured.non_torch_error is '(predicted - measured) / measured.';
comment on column marts.prediction_vs_measured.measured_kv_pool_bytes is 'KV cache memory per GPU the engine sized its pool from (bytes).';
comment on column marts.prediction_vs_measured.measured_kv_pool_source is 'log (Available KV cache memory) or blocks (# GPU blocks x capplan''s block size).';
comment on column marts.prediction_vs_measured.predicted_kv_pool_bytes is 'KV budget per GPU capplan predicted (bytes).';
comment on column marts.prediction_vs_measured.kv_pool_error is '(predicted - measured) / measured: positive = capplan promises more KV than the engine has.';
comment on column marts.prediction_vs_measured.measured_num_gpu_blocks is 'KV blocks the engine reported.';
comment on column marts.prediction_vs_measured.predicted_num_gpu_blocks is 'KV blocks capplan predicted.';
comment on column marts.prediction_vs_measured.num_gpu_blocks_error is '(predicted - measured) / measured.';
comment on column marts.prediction_vs_measured.measured_kv_cache_tokens is 'GPU KV cache size in tokens as the engine printed it.';
comment on column marts.prediction_vs_measured.predicted_kv_cache_tokens is 'The same number as capplan computes it for that engine version.';
comment on column marts.prediction_vs_measured.kv_cache_tokens_error is '(predicted - measured) / measured.';
comment on column marts.prediction_vs_measured.concurrency_tokens is 'The T of Maximum concurrency for T tokens per request compared below.';
comment on column marts.prediction_vs_measured.measured_max_concurrency is 'Maximum concurrency the engine printed.';
comment on column marts.prediction_vs_measured.predicted_max_concurrency is 'Maximum concurrency capplan predicted.';
comment on column marts.prediction_vs_measured.max_concurrency_error is '(predicted - measured) / measured.';
comment on column marts.prediction_vs_measured.calibrated is 'True when a calibration scope with enough observations applies to this deployment.';
comment on column marts.prediction_vs_measured.calibration_observations is 'Deployments that scope was fitted on.';
comment on column marts.prediction_vs_measured.calibrated_kv_pool_bytes is 'KV budget per GPU after calibration (the fit includes this deployment).';
comment on column marts.prediction_vs_measured.calibrated_kv_pool_error is '(calibrated - measured) / measured.';
comment on column marts.prediction_vs_measured.loo_kv_pool_bytes is 'KV budget per GPU after calibration on every other deployment (leave-one-out: the honest error).';
comment on column marts.prediction_vs_measured.loo_kv_pool_error is '(leave-one-out calibrated - measured) / measured.';
comment on column marts.prediction_vs_measured.predicted_b_max is 'Sequences of max_model_len tokens capplan''s predicted pool holds.';
comment on column marts.prediction_vs_measured.measured_b_max is 'Sequences of max_model_len tokens the engine''s reported pool holds.';
comment on column marts.prediction_vs_measured.peak_kv_usage is 'Largest KV usage fraction observed (metrics, log stats, exports).';
comment on column marts.prediction_vs_measured.p95_kv_usage is '95th percentile of the KV usage samples.';
comment on column marts.prediction_vs_measured.running_vs_b_max is 'peak_requests_running / B_max at max_model_len (measured, else predicted): above 1 the deployment relies on requests shorter than max_model_len.';
comment on column marts.prediction_vs_measured.saturation is 'saturated (KV cache >= 95 % with requests waiting or preempted), busy (>= 80 %), ok, or unknown (no usage seen).';
comment on column marts.prediction_vs_measured.observed_concurrency is 'Requests running per engine, mean over the scrapes with at least one running (vllm:num_requests_running, sglang:num_running_reqs): the busy-time batch.';
comment on column marts.prediction_vs_measured.observed_input_tokens is 'Mean prompt length: increase of prompt_tokens_total / requests_in_window.';
comment on column marts.prediction_vs_measured.observed_output_tokens is 'Mean generated length: increase of generation_tokens_total / requests_in_window.';
comment on column marts.prediction_vs_measured.requests_in_window is 'Requests that got a first token in the window: increase of the TTFT histogram''s _count (one observation per request).';
comment on column marts.prediction_vs_measured.speed_window_s is 'Seconds between the first and last generation_tokens_total sample (the window the rate is over).';
comment on column marts.prediction_vs_measured.engines_seen is 'Engines (vLLM engine label / data-parallel ranks) in the token counters; predicted throughput is per engine times this.';
comment on column marts.prediction_vs_measured.speed_concurrency is 'B capplan''s speed was predicted at: observed_concurrency rounded (at least 1).';
comment on column marts.prediction_vs_measured.speed_input_tokens is 'Prompt length the speed was predicted at: observed_input_tokens rounded.';
comment on column marts.prediction_vs_measured.speed_output_tokens is 'Output length the speed was predicted at: observed_output_tokens rounded (decode runs at prompt + half of it).';
comment on column marts.prediction_vs_measured.measured_output_tokens_per_second is 'Measured output tokens/s of the deployment: sum over series of increase(generation_tokens_total) / their span (PromQL sum(rate(...))); SGLang without counters: mean of its non-zero gen_throughput gauge.';
comment on column marts.prediction_vs_measured.measured_throughput_source is 'generation_tokens_total (counter rate) or gen_throughput (SGLang''s gauge).';
comment on column marts.prediction_vs_measured.predicted_output_tokens_per_second is 'capplan''s output tokens/s (capacity.performance) at speed_concurrency and the observed lengths, per engine times engines_seen.';
comment on column marts.prediction_vs_measured.output_tokens_per_second_error is '(predicted - measured) / measured output tokens/s.';
comment on column marts.prediction_vs_measured.measured_tpot_mean_ms is 'Mean inter-token latency (= TPOT) in ms: increase of the histogram''s _sum / _count over the window (vllm:inter_token_latency_seconds, or the older vllm:time_per_output_token_seconds; SGLang''s equivalents).';
comment on column marts.prediction_vs_measured.measured_tpot_p50_ms is 'Median TPOT in ms from the bucket increases, interpolated as Prometheus histogram_quantile.';
comment on column marts.prediction_vs_measured.measured_tpot_p90_ms is '90th percentile TPOT in ms (histogram_quantile).';
comment on column marts.prediction_vs_measured.measured_tpot_p99_ms is '99th percentile TPOT in ms (histogram_quantile; the highest finite bucket bound when it falls in +Inf).';
comment on column marts.prediction_vs_measured.predicted_tpot_ms is 'capplan''s TPOT in ms at speed_concurrency and the observed lengths (capacity.performance).';
comment on column marts.prediction_vs_measured.tpot_error is '(predicted - measured mean) / measured mean TPOT.';
comment on column marts.prediction_vs_measured.measured_ttft_mean_ms is 'Mean time to first token in ms: increase of _sum / _count of vllm:time_to_first_token_seconds (sglang:time_to_first_token_seconds).';
comment on column marts.prediction_vs_measured.measured_ttft_p50_ms is 'Median TTFT in ms (histogram_quantile over the window''s bucket increases).';
comment on column marts.prediction_vs_measured.measured_ttft_p90_ms is '90th percentile TTFT in ms.';
comment on column marts.prediction_vs_measured.measured_ttft_p99_ms is '99th percentile TTFT in ms.';
comment on column marts.prediction_vs_measured.predicted_ttft_ms is 'capplan''s steady-state TTFT in ms (chunked prefill beside the running batch plus the engine''s request overhead; no queueing).';
comment on column marts.prediction_vs_measured.ttft_error is '(predicted - measured mean) / measured mean TTFT: queueing in the measurement shows up as a negative error.';
comment on column marts.prediction_vs_measured.speed_reason is 'Why the speed was not predicted (no request lengths, no GPU bandwidth in the catalog...), null when it was or when nothing was measured.';
comment on column marts.prediction_vs_measured.n_samples is 'Metric samples of the deployment.';
comment on column marts.prediction_vs_measured.last_observed_at is 'Latest observation (UTC).';
