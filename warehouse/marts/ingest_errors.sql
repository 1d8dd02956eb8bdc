-- marts.ingest_errors: everything the latest run rejected, and why; the rest of the run went on.
-- grain: one row per rejected item and stage.
-- columns: run_id, run_date, source, ingest_run_id, item_kind, item_key, stage, reason,
--   source_path, raw_excerpt
-- history: marts.ingest_errors_history (every retained run).
create or replace view marts.ingest_errors as
with errors as (
    select * from staging.ingest_errors
)

select
    run_id,
    run_date,
    source,
    ingest_run_id,
    item_kind,
    item_key,
    stage,
    reason,
    source_path,
    raw_excerpt
from errors;

comment on view marts.ingest_errors is 'Items the latest run rejected (registry ingest or capacity grid), each with a one-line reason.';
comment on column marts.ingest_errors.source is 'Which step rejected it: registry_models, gpu_catalog or capacity_grid.';
comment on column marts.ingest_errors.ingest_run_id is 'The registry''s ingest_runs.id (null for capacity_grid).';
comment on column marts.ingest_errors.item_kind is 'model, gpu or catalog.';
comment on column marts.ingest_errors.item_key is 'Repo id, GPU id, or the catalog entry (file#position).';
comment on column marts.ingest_errors.stage is 'Where it failed: read, catalog, index, json, config, validate, store, grid.';
comment on column marts.ingest_errors.reason is 'One-line reason.';
comment on column marts.ingest_errors.source_path is 'File the item came from, when there is one.';
comment on column marts.ingest_errors.raw_excerpt is 'The start of the raw input, for diagnosis.';
