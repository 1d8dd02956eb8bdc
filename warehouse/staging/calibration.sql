-- staging.calibration: the calibration fit: per scope and term, the correction of capplan's predicted memory terms with an error band (capacity.calibration), typed and stamped with the run.
-- grain: one scope x term.
-- columns: run_id, run_date, scope, level, engine, engine_version, engine_profile, gpu,
--   model_family, term, correction_kind, n_observations, scope_observations, median, mad, ci_low,
--   ci_high, usable, min_observations, deployments
create or replace view staging.calibration as
with source as (
    select * from raw.calibration
),

typed as (
    select
        run.run_id,
        run.run_date,
        scope::varchar as scope,
        level::varchar as level,
        engine::varchar as engine,
        engine_version::varchar as engine_version,
        engine_profile::varchar as engine_profile,
        gpu::varchar as gpu,
        model_family::varchar as model_family,
        term::varchar as term,
        correction_kind::varchar as correction_kind,
        n_observations::bigint as n_observations,
        scope_observations::bigint as scope_observations,
        median::double as median,
        mad::double as mad,
        ci_low::double as ci_low,
        ci_high::double as ci_high,
        usable::boolean as usable,
        min_observations::bigint as min_observations,
        deployments::varchar[] as deployments
    from source
    cross join raw.run as run
)

select * from typed;
