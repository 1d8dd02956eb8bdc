-- marts.recommended_placements: cheapest feasible placements per model x workload profile and ranked alternatives (latest run).
-- grain: one workload x model x rank (one row with feasible = false when none fits).
-- columns: run_id, run_date, workload, model, model_family, rank, feasible, gpu, gpus_per_node, tp,
--   pp, dp, ep, gpus_per_replica, weight_dtype, kv_dtype, weight_format, kv_cache_dtype, engine,
--   engine_version, context_tokens, max_model_len, target_concurrency, headroom, b_max,
--   b_max_predicted, planned_per_replica, replicas, gpus_total, planned_capacity, usd_per_gpu_hour,
--   price_basis, price_provider, price_region, price_commitment, price_source, price_date,
--   usd_per_replica_hour, usd_per_hour, usd_per_sequence_hour, binding, b_latency, tpot_ms, ttft_ms,
--   output_tokens_per_second, usd_per_million_output_tokens, kv_tier, host_memory_gib,
--   host_usd_per_hour, kv_tier_reason, calibrated, calibration_scope,
--   n_observations, feasible_options, in_fleet_plan, reason
-- history: marts.recommended_placements_history (every retained run).
-- select list: `@columns gpu_price` is the price offer's columns of staging.gpus (warehouse.sql.read_sql).
-- column comments: recommended_placements.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.recommended_placements as
with placements as (
    select * from staging.recommended_placements
),

prices as (
    select
        gpu,
        @columns gpu_price
    from staging.gpus
)

select
    run_id,
    run_date,
    workload,
    model,
    model_family,
    rank,
    feasible,
    gpu,
    gpus_per_node,
    tp,
    pp,
    dp,
    ep,
    gpus_per_replica,
    weight_dtype,
    kv_dtype,
    weight_format,
    kv_cache_dtype,
    engine,
    engine_version,
    context_tokens,
    max_model_len,
    target_concurrency,
    headroom,
    b_max,
    b_max_predicted,
    planned_per_replica,
    replicas,
    gpus_total,
    planned_capacity,
    usd_per_gpu_hour,
    @columns gpu_price,
    usd_per_replica_hour,
    usd_per_hour,
    usd_per_sequence_hour,
    binding,
    b_latency,
    tpot_ms,
    ttft_ms,
    output_tokens_per_second,
    usd_per_million_output_tokens,
    kv_tier,
    host_memory_gib,
    host_usd_per_hour,
    kv_tier_reason,
    calibrated,
    calibration_scope,
    n_observations,
    feasible_options,
    in_fleet_plan,
    reason
from placements
left join prices using (gpu);

comment on view marts.recommended_placements is 'Cheapest feasible placements per model x workload profile and ranked alternatives (latest run).';
