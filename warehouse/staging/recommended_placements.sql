-- staging.recommended_placements: ranked placements per model x workload profile (capacity.placement), typed and stamped with the run.
-- grain: one workload x model x rank (one row with feasible = false when none fits).
-- columns: run_id, run_date, workload, model, model_family, rank, feasible, gpu, gpus_per_node, tp,
--   pp, dp, ep, gpus_per_replica, weight_dtype, kv_dtype, weight_format, kv_cache_dtype, engine,
--   engine_version, context_tokens, max_model_len, target_concurrency, headroom, b_max,
--   b_max_predicted, planned_per_replica, replicas, gpus_total, planned_capacity, usd_per_gpu_hour,
--   usd_per_replica_hour, usd_per_hour, usd_per_sequence_hour, binding, b_latency, tpot_ms, ttft_ms,
--   output_tokens_per_second, usd_per_million_output_tokens, kv_tier, host_memory_gib,
--   host_usd_per_hour, kv_tier_reason, calibrated, calibration_scope,
--   n_observations, feasible_options, in_fleet_plan, reason
-- casts: `@casts workload_model` is workload, model cast to varchar, written out by warehouse.sql.read_sql.
create or replace view staging.recommended_placements as
with source as (
    select * from raw.recommended_placements
),

typed as (
    select
        run.run_id,
        run.run_date,
        @casts workload_model,
        model_family::varchar as model_family,
        rank::bigint as rank,
        feasible::boolean as feasible,
        gpu::varchar as gpu,
        gpus_per_node::bigint as gpus_per_node,
        tp::integer as tp,
        pp::integer as pp,
        dp::integer as dp,
        ep::integer as ep,
        gpus_per_replica::bigint as gpus_per_replica,
        weight_dtype::varchar as weight_dtype,
        kv_dtype::varchar as kv_dtype,
        weight_format::varchar as weight_format,
        kv_cache_dtype::varchar as kv_cache_dtype,
        engine::varchar as engine,
        engine_version::varchar as engine_version,
        context_tokens::bigint as context_tokens,
        max_model_len::bigint as max_model_len,
        target_concurrency::bigint as target_concurrency,
        headroom::double as headroom,
        b_max::bigint as b_max,
        b_max_predicted::bigint as b_max_predicted,
        planned_per_replica::bigint as planned_per_replica,
        replicas::bigint as replicas,
        gpus_total::bigint as gpus_total,
        planned_capacity::bigint as planned_capacity,
        usd_per_gpu_hour::double as usd_per_gpu_hour,
        usd_per_replica_hour::double as usd_per_replica_hour,
        usd_per_hour::double as usd_per_hour,
        usd_per_sequence_hour::double as usd_per_sequence_hour,
        binding::varchar as binding,
        b_latency::bigint as b_latency,
        tpot_ms::double as tpot_ms,
        ttft_ms::double as ttft_ms,
        output_tokens_per_second::double as output_tokens_per_second,
        usd_per_million_output_tokens::double as usd_per_million_output_tokens,
        kv_tier::varchar as kv_tier,
        host_memory_gib::double as host_memory_gib,
        host_usd_per_hour::double as host_usd_per_hour,
        kv_tier_reason::varchar as kv_tier_reason,
        calibrated::boolean as calibrated,
        calibration_scope::varchar as calibration_scope,
        n_observations::bigint as n_observations,
        feasible_options::bigint as feasible_options,
        in_fleet_plan::boolean as in_fleet_plan,
        reason::varchar as reason
    from source
    cross join raw.run as run
)

select * from typed;
