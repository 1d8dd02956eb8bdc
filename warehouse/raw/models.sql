-- raw.models: the registry's current revision of every model, as the nightly run read it.
-- grain: one row per repo_id (the current revision only; older revisions stay in the registry).
-- columns: the registry's `models` table (repo_id, revision, config_sha256, family, model_type,
--   architecture, is_generic, the normalized config fields, parameter counts, checkpoint_bytes,
--   published_parameters, gated, source, source_path, config_json, created_at).
-- written by: the `registry_models` asset, from the frame registered as `incoming`.
create or replace table raw.models as
select * from incoming;

comment on table raw.models is 'Current model revisions copied from the registry database (config_json included).';
