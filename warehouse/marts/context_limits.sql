-- marts.context_limits: the longest context each deployment serves at a target concurrency, latest run.
-- grain: one row per model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x concurrency.
-- columns: run_id, run_date, deployment_id, model, model_family, gpu, engine, engine_version,
--   weight_dtype, kv_dtype, tp, pp, num_gpus, concurrency, max_context
-- history: marts.context_limits_history (every retained run, kept in place in raw).
create or replace view marts.context_limits as
with limits as (
    select * from staging.context_limits
    where run_id = (select run.run_id from raw.run as run)
),

deployments as (
    select * from staging.deployments
    where run_id = (select run.run_id from raw.run as run)
)

select
    limits.run_id,
    limits.run_date,
    deployments.deployment_id,
    deployments.model,
    deployments.model_family,
    deployments.gpu,
    deployments.engine,
    deployments.engine_version,
    deployments.weight_dtype,
    deployments.kv_dtype,
    deployments.tp,
    deployments.pp,
    deployments.num_gpus,
    limits.concurrency,
    limits.max_context
from limits
inner join deployments on limits.deployment_id = deployments.deployment_id;

comment on view marts.context_limits is 'Max context per deployment for target concurrencies 1, 8, 32, 128, 512 (latest run).';
comment on column marts.context_limits.run_id is 'The nightly run that published this row (marts.runs.run_id).';
comment on column marts.context_limits.run_date is 'UTC date the run started.';
comment on column marts.context_limits.deployment_id is 'Key of the deployment within its run (marts.deployments.deployment_id; join history on run_id and deployment_id).';
comment on column marts.context_limits.model is 'Hugging Face repo id (marts.models.model).';
comment on column marts.context_limits.model_family is 'Model family.';
comment on column marts.context_limits.gpu is 'GPU catalog id (marts.gpus.gpu).';
comment on column marts.context_limits.engine is 'Engine profile: vllm, sglang, trtllm, plain.';
comment on column marts.context_limits.engine_version is 'Engine version the profile follows.';
comment on column marts.context_limits.weight_dtype is 'Requested weight dtype (--dtype): bf16, auto, fp8, int4, mxfp4.';
comment on column marts.context_limits.kv_dtype is 'Requested KV cache dtype (--kv-dtype): auto or fp8.';
comment on column marts.context_limits.tp is 'Tensor-parallel size.';
comment on column marts.context_limits.pp is 'Pipeline-parallel size.';
comment on column marts.context_limits.num_gpus is 'GPUs per replica: tp * pp.';
comment on column marts.context_limits.concurrency is 'Target concurrent sequences B.';
comment on column marts.context_limits.max_context is 'Largest T (a multiple of the block size, capped by the model limit) with B_max(T) >= concurrency; 0 when none.';
