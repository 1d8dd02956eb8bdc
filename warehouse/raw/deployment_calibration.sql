-- raw.deployment_calibration: per observed deployment, the calibration applied to it and the leave-one-out calibrated KV pool.
-- grain: one deployment id.
-- columns: deployment_id, calibrated, calibration_scope, calibration_level, n_observations,
--   weights_ratio, activation_ratio, non_torch_delta_bytes, calibrated_kv_pool_bytes,
--   calibrated_num_gpu_blocks, calibrated_b_max, calibrated_kv_capacity_tokens,
--   loo_calibration_scope, loo_n_observations, loo_kv_pool_bytes
-- written by: the `calibration` asset, from the frame registered as `incoming`.
create or replace table raw.deployment_calibration as
select * from incoming;

comment on table raw.deployment_calibration is 'Per observed deployment, the calibration applied to it and the leave-one-out calibrated KV pool.';
