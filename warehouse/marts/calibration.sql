-- marts.calibration: the calibration fit (latest run): per scope and term, the correction of capplan's predicted memory terms with an error band.
-- grain: one scope x term.
-- columns: run_id, run_date, scope, level, engine, engine_version, engine_profile, gpu,
--   model_family, term, correction_kind, n_observations, scope_observations, median, mad, ci_low,
--   ci_high, usable, min_observations, deployments
-- speed: the terms tpot, ttft and output_throughput are measured / predicted of capacity.performance
--   at each deployment's observed load; reported per scope, not applied to the memory terms.
-- usage: a deployment uses its most specific usable scope (engine_version_gpu_family first, engine_profile last).
-- history: marts.calibration_history (every retained run).
create or replace view marts.calibration as
with fit as (
    select * from staging.calibration
)

select
    run_id,
    run_date,
    scope,
    level,
    engine,
    engine_version,
    engine_profile,
    gpu,
    model_family,
    term,
    correction_kind,
    n_observations,
    scope_observations,
    median,
    mad,
    ci_low,
    ci_high,
    usable,
    min_observations,
    deployments
from fit;

comment on view marts.calibration is 'The calibration fit (latest run): per scope and term, the correction of capplan''s predicted memory terms with an error band, and the measured / predicted ratios of its speed (TPOT, TTFT, output tokens/s).';
comment on column marts.calibration.scope is 'The scope as a label: level(field=value, ...).';
comment on column marts.calibration.level is 'engine_version_gpu_family, engine_version_gpu, engine_version, engine_profile_gpu or engine_profile (specific to general).';
comment on column marts.calibration.engine_version is 'Engine release series (major.minor, e.g. 0.11), for the engine_version levels.';
comment on column marts.calibration.engine_profile is 'Era of capplan''s fitted overhead coefficients (vLLM: v0, v1-early, v1-mid, v1), for the engine_profile levels.';
comment on column marts.calibration.gpu is 'GPU catalog id, for the levels that include the GPU.';
comment on column marts.calibration.model_family is 'Model family, for the most specific level.';
comment on column marts.calibration.term is 'weights, activation_peak, non_torch, kv_pool (before calibration) or kv_pool_calibrated (after, leave-one-out); speed: tpot (measured mean inter-token latency / predicted TPOT), ttft (measured mean / predicted TTFT) and output_throughput (measured / predicted output tokens/s), each at the deployment''s observed concurrency and request lengths.';
comment on column marts.calibration.correction_kind is 'ratio (measured / predicted: multiply the prediction) or delta_bytes (measured - predicted: add to it).';
comment on column marts.calibration.n_observations is 'Deployments in the scope that measured this term.';
comment on column marts.calibration.scope_observations is 'Deployments in the scope that measured any term (what usable is judged on); for the speed terms, any speed term.';
comment on column marts.calibration.median is 'The fitted correction: median of the per-deployment corrections (kv_pool_calibrated: median of measured / calibrated; speed terms: median of measured / predicted, above 1 = slower TPOT/TTFT or more throughput than predicted).';
comment on column marts.calibration.mad is 'Median absolute deviation of the corrections (unscaled): the spread of the error band.';
comment on column marts.calibration.ci_low is 'Low end of the 90 % percentile-bootstrap interval of the median.';
comment on column marts.calibration.ci_high is 'High end of the 90 % percentile-bootstrap interval of the median.';
comment on column marts.calibration.usable is 'True when scope_observations >= min_observations: calibrated limits use this scope.';
comment on column marts.calibration.min_observations is 'Observations a scope needs to be used (CAPPLAN_CALIBRATION_MIN_OBSERVATIONS, default 3).';
comment on column marts.calibration.deployments is 'The deployments whose measurements the term was fitted on.';
