-- raw.model_ingest_errors: models the registry ingest rejected in this run's catalog sync.
-- grain: one row per rejected item (a model entry, or the catalog file itself).
-- columns: ingest_run_id (the registry's ingest_runs.id), item_kind, item_key, stage, reason,
--   source_path, raw_excerpt.
-- written by: the `registry_models` asset, from the frame registered as `incoming`.
create or replace table raw.model_ingest_errors as
select * from incoming;

comment on table raw.model_ingest_errors is 'Items the registry ingest rejected while syncing the model catalog.';
