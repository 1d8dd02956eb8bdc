-- marts.ingest_errors: everything the latest run rejected, and why; the rest of the run went on.
-- grain: one row per rejected item and stage.
-- columns: run_id, run_date, source, ingest_run_id, item_kind, item_key, stage, reason,
--   source_path, raw_excerpt
-- history: marts.ingest_errors_history (every retained run).
-- column comments: ingest_errors.yaml beside this file; the columns the marts share, capacity/columns.py.
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
