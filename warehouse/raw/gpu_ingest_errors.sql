-- raw.gpu_ingest_errors: GPU catalog entries the registry ingest rejected in this run's sync.
-- grain: one row per rejected item (a SKU entry, or the catalog file itself).
-- columns: ingest_run_id, item_kind, item_key, stage, reason, source_path, raw_excerpt.
-- written by: the `gpu_catalog` asset, from the frame registered as `incoming`.
create or replace table raw.gpu_ingest_errors as
select * from incoming;

comment on table raw.gpu_ingest_errors is 'Items the registry ingest rejected while syncing the GPU catalog.';
