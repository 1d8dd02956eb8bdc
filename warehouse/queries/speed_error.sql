-- Measured output tokens/s, TPOT and TTFT of each observed deployment next to capplan's at the observed load, worst TPOT first.
select
    deployment_id,
    model,
    gpu,
    round(observed_concurrency, 1) as concurrency,
    round(observed_input_tokens) as input_tokens,
    round(observed_output_tokens) as output_tokens,
    round(measured_output_tokens_per_second, 1) as measured_tokens_per_s,
    round(predicted_output_tokens_per_second, 1) as predicted_tokens_per_s,
    round(measured_tpot_mean_ms, 2) as measured_tpot_ms,
    round(measured_tpot_p99_ms, 2) as measured_tpot_p99_ms,
    round(predicted_tpot_ms, 2) as predicted_tpot_ms,
    round(100 * tpot_error, 1) as tpot_error_pct,
    round(measured_ttft_mean_ms, 1) as measured_ttft_ms,
    round(predicted_ttft_ms, 1) as predicted_ttft_ms,
    round(100 * ttft_error, 1) as ttft_error_pct,
    speed_reason
from marts.prediction_vs_measured
where measured_tpot_mean_ms is not null or measured_output_tokens_per_second is not null
order by abs(tpot_error) desc nulls last, deployment_id;
