-- raw.calibration: the calibration fit: per scope and term, the correction of capplan's predicted memory terms with an error band (capacity.calibration).
-- grain: one scope x term.
-- columns: scope, level, engine, engine_version, engine_profile, gpu, model_family, term,
--   correction_kind, n_observations, scope_observations, median, mad, ci_low, ci_high, usable,
--   min_observations, deployments
-- written by: the `calibration` asset, from the frame registered as `incoming`.
create or replace table raw.calibration as
select * from incoming;

comment on table raw.calibration is 'The calibration fit: per scope and term, the correction of capplan''s predicted memory terms with an error band (capacity.calibration).';
