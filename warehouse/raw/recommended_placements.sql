-- raw.recommended_placements: ranked placements per model x workload profile (capacity.placement).
-- grain: one workload x model x rank (one row with feasible = false when none fits).
-- columns: workload, model, model_family, rank, feasible, gpu, gpus_per_node, tp, pp, dp, ep,
--   gpus_per_replica, weight_dtype, kv_dtype, weight_format, kv_cache_dtype, engine,
--   engine_version, context_tokens, max_model_len, target_concurrency, headroom, b_max,
--   b_max_predicted, planned_per_replica, replicas, gpus_total, planned_capacity, usd_per_gpu_hour,
--   usd_per_replica_hour, usd_per_hour, usd_per_sequence_hour, binding, b_latency, tpot_ms, ttft_ms,
--   output_tokens_per_second, usd_per_million_output_tokens, kv_tier, host_memory_gib,
--   host_usd_per_hour, kv_tier_reason, calibrated, calibration_scope,
--   n_observations, feasible_options, in_fleet_plan, reason
-- written by: the `recommendations` asset, from the frame registered as `incoming`.
create or replace table raw.recommended_placements as
select * from incoming;

comment on table raw.recommended_placements is 'Ranked placements per model x workload profile (capacity.placement).';
