-- marts.calibration: the calibration fit (latest run): per scope and term, the correction of capplan's predicted memory terms with an error band.
-- grain: one scope x term.
-- columns: run_id, run_date, scope, level, engine, engine_version, engine_profile, gpu,
--   model_family, term, correction_kind, n_observations, scope_observations, median, mad, ci_low,
--   ci_high, usable, min_observations, deployments
-- speed: the terms tpot, ttft and output_throughput are measured / predicted of capacity.performance
--   at each deployment's observed load; reported per scope, not applied to the memory terms.
-- usage: a deployment uses its most specific usable scope (engine_version_gpu_family first, engine_profile last).
-- history: marts.calibration_history (every retained run).
-- column comments: calibration.yaml beside this file; the columns the marts share, capacity/columns.py.
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
