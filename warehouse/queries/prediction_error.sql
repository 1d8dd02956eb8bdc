-- How far capplan's KV pool prediction is from what each observed deployment measured, worst first (before and after calibration).
select
    deployment_id,
    model,
    gpu,
    engine_version,
    round(measured_kv_pool_bytes / 2 ^ 30, 2) as measured_gib,
    round(predicted_kv_pool_bytes / 2 ^ 30, 2) as predicted_gib,
    round(100 * kv_pool_error, 2) as error_pct,
    round(100 * loo_kv_pool_error, 2) as calibrated_error_pct,
    calibration_scope,
    saturation
from marts.prediction_vs_measured
where kv_pool_error is not null
order by abs(kv_pool_error) desc, deployment_id
limit 20;
