-- staging.deployment_calibration: per observed deployment, the calibration applied to it and the leave-one-out calibrated KV pool, typed and stamped with the run.
-- grain: one deployment id.
-- columns: run_id, run_date, deployment_id, calibrated, calibration_scope, calibration_level,
--   n_observations, weights_ratio, activation_ratio, non_torch_delta_bytes,
--   calibrated_kv_pool_bytes, calibrated_num_gpu_blocks, calibrated_b_max,
--   calibrated_kv_capacity_tokens, loo_calibration_scope, loo_n_observations, loo_kv_pool_bytes
create or replace view staging.deployment_calibration as
with source as (
    select * from raw.deployment_calibration
),

typed as (
    select
        run.run_id,
        run.run_date,
        deployment_id::varchar as deployment_id,
        calibrated::boolean as calibrated,
        calibration_scope::varchar as calibration_scope,
        calibration_level::varchar as calibration_level,
        n_observations::bigint as n_observations,
        weights_ratio::double as weights_ratio,
        activation_ratio::double as activation_ratio,
        non_torch_delta_bytes::double as non_torch_delta_bytes,
        calibrated_kv_pool_bytes::bigint as calibrated_kv_pool_bytes,
        calibrated_num_gpu_blocks::bigint as calibrated_num_gpu_blocks,
        calibrated_b_max::bigint as calibrated_b_max,
        calibrated_kv_capacity_tokens::bigint as calibrated_kv_capacity_tokens,
        loo_calibration_scope::varchar as loo_calibration_scope,
        loo_n_observations::bigint as loo_n_observations,
        loo_kv_pool_bytes::bigint as loo_kv_pool_bytes
    from source
    cross join raw.run as run
)

select * from typed;
