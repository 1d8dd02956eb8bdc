-- marts.recommended_placements: cheapest feasible placements per model x workload profile and ranked alternatives (latest run).
-- grain: one workload x model x rank (one row with feasible = false when none fits).
-- columns: run_id, run_date, workload, model, model_family, rank, feasible, gpu, gpus_per_node, tp,
--   pp, dp, ep, gpus_per_replica, weight_dtype, kv_dtype, weight_format, kv_cache_dtype, engine,
--   engine_version, context_tokens, max_model_len, target_concurrency, headroom, b_max,
--   b_max_predicted, planned_per_replica, replicas, gpus_total, planned_capacity, usd_per_gpu_hour,
--   price_basis, price_provider, price_region, price_commitment, price_source, price_date,
--   usd_per_replica_hour, usd_per_hour, usd_per_sequence_hour, binding, b_latency, tpot_ms, ttft_ms,
--   output_tokens_per_second, usd_per_million_output_tokens, calibrated, calibration_scope,
--   n_observations, feasible_options, in_fleet_plan, reason
-- history: marts.recommended_placements_history (every retained run).
create or replace view marts.recommended_placements as
with placements as (
    select * from staging.recommended_placements
),

prices as (
    select gpu, price_basis, price_provider, price_region, price_commitment, price_source, price_date
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
    price_basis,
    price_provider,
    price_region,
    price_commitment,
    price_source,
    price_date,
    usd_per_replica_hour,
    usd_per_hour,
    usd_per_sequence_hour,
    binding,
    b_latency,
    tpot_ms,
    ttft_ms,
    output_tokens_per_second,
    usd_per_million_output_tokens,
    calibrated,
    calibration_scope,
    n_observations,
    feasible_options,
    in_fleet_plan,
    reason
from placements
left join prices using (gpu);

comment on view marts.recommended_placements is 'Cheapest feasible placements per model x workload profile and ranked alternatives (latest run).';
comment on column marts.recommended_placements.run_id is 'The nightly run that published this row (marts.runs.run_id).';
comment on column marts.recommended_placements.run_date is 'UTC date the run started.';
comment on column marts.recommended_placements.workload is 'Workload profile (marts.workloads.workload).';
comment on column marts.recommended_placements.model is 'Registry id of the model.';
comment on column marts.recommended_placements.model_family is 'Model family.';
comment on column marts.recommended_placements.rank is '1 = the cheapest feasible placement; alternatives follow (the fleet plan''s choice is kept even beyond the top 10).';
comment on column marts.recommended_placements.feasible is 'False for a model x workload with no feasible placement (one row, reason says why).';
comment on column marts.recommended_placements.gpu is 'GPU catalog id.';
comment on column marts.recommended_placements.gpus_per_node is 'GPUs per node of the SKU.';
comment on column marts.recommended_placements.tp is 'Tensor-parallel size.';
comment on column marts.recommended_placements.pp is 'Pipeline-parallel size.';
comment on column marts.recommended_placements.dp is 'Attention data-parallel ranks, a KV pool each (1: none; capacity.features.parallel_layout).';
comment on column marts.recommended_placements.ep is 'Expert-parallel width: routed experts split whole over it (1: split by TP).';
comment on column marts.recommended_placements.gpus_per_replica is 'tp x pp (x dp where vLLM''s DP ranks add GPUs; SGLang''s split tp).';
comment on column marts.recommended_placements.weight_dtype is '--dtype: auto (the checkpoint as published), fp8, int4.';
comment on column marts.recommended_placements.kv_dtype is '--kv-cache-dtype: auto or fp8.';
comment on column marts.recommended_placements.weight_format is 'What the weights resolve to.';
comment on column marts.recommended_placements.kv_cache_dtype is 'What the KV cache resolves to.';
comment on column marts.recommended_placements.engine is 'Serving engine.';
comment on column marts.recommended_placements.engine_version is 'Engine version sized for.';
comment on column marts.recommended_placements.context_tokens is 'Tokens per sequence planned for (the workload''s context or percentile).';
comment on column marts.recommended_placements.max_model_len is '--max-model-len of the replicas.';
comment on column marts.recommended_placements.target_concurrency is 'Concurrent sequences the workload needs.';
comment on column marts.recommended_placements.headroom is 'Replicas are planned at headroom x B_max.';
comment on column marts.recommended_placements.b_max is 'Sequences of context_tokens per replica (calibrated when calibrated is true).';
comment on column marts.recommended_placements.b_max_predicted is 'The same from capplan''s uncalibrated prediction.';
comment on column marts.recommended_placements.planned_per_replica is 'floor(b_max x headroom).';
comment on column marts.recommended_placements.replicas is 'ceil(target_concurrency / planned_per_replica).';
comment on column marts.recommended_placements.gpus_total is 'replicas x gpus_per_replica.';
comment on column marts.recommended_placements.planned_capacity is 'replicas x planned_per_replica (>= target_concurrency).';
comment on column marts.recommended_placements.usd_per_gpu_hour is 'GPU price (marts.gpus.price_usd_per_gpu_hour).';
comment on column marts.recommended_placements.price_basis is 'What the price rests on: list (a provider''s published offer), contract (your own catalog''s price) or estimate (no public list price; bought only when the workloads file sets procurement.allow_estimated_prices).';
comment on column marts.recommended_placements.price_provider is 'Who sells at that price (aws, gcp, azure, lambda, coreweave, or your catalog''s provider); null when the source names none.';
comment on column marts.recommended_placements.price_region is 'Region of the offer, where the source states one.';
comment on column marts.recommended_placements.price_commitment is 'Term of the offer: on-demand, spot, 1y or 3y.';
comment on column marts.recommended_placements.price_source is 'Where the price comes from (source text of the catalog or of your user catalog, CAPPLAN_USER_CATALOG).';
comment on column marts.recommended_placements.price_date is 'When the price was read.';
comment on column marts.recommended_placements.usd_per_replica_hour is '$/hour of one replica.';
comment on column marts.recommended_placements.usd_per_hour is '$/hour of all replicas.';
comment on column marts.recommended_placements.usd_per_sequence_hour is 'usd_per_hour / target_concurrency: $/hour per concurrent sequence.';
comment on column marts.recommended_placements.binding is 'What sets the sequences per replica: memory (B_max x headroom), tpot or ttft (the workload''s latency target).';
comment on column marts.recommended_placements.b_latency is 'The largest batch per replica that meets the workload''s latency targets (NULL without targets).';
comment on column marts.recommended_placements.tpot_ms is 'Predicted time per output token at planned_per_replica (capacity.performance roofline).';
comment on column marts.recommended_placements.ttft_ms is 'Predicted steady-state time to first token at planned_per_replica (prefill beside the running batch).';
comment on column marts.recommended_placements.output_tokens_per_second is 'Predicted decode throughput of one replica at planned_per_replica.';
comment on column marts.recommended_placements.usd_per_million_output_tokens is 'usd_per_replica_hour over the replica''s output tokens per hour, x 1e6.';
comment on column marts.recommended_placements.calibrated is 'True when B_max comes from a calibrated KV pool.';
comment on column marts.recommended_placements.calibration_scope is 'The calibration scope applied (marts.calibration.scope).';
comment on column marts.recommended_placements.n_observations is 'Deployments that scope was fitted on.';
comment on column marts.recommended_placements.feasible_options is 'Feasible placements found for this model x workload.';
comment on column marts.recommended_placements.in_fleet_plan is 'True for the placement marts.procurement_plan uses (false for every row of a workload with a request_rate: the plan serves it by request size, marts.procurement_buckets).';
comment on column marts.recommended_placements.reason is 'Why there is no feasible placement (feasible = false).';
