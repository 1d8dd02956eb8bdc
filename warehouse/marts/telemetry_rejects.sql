-- marts.telemetry_rejects: every telemetry input row that was rejected, with a reason code and reason (latest run).
-- grain: one rejected row (a line, a CSV/Parquet row, or a whole file).
-- columns: run_id, run_date, file, line, source_kind, deployment_id, reason_code, reason,
--   raw_excerpt
-- reconciliation: per file, rows_in = accepted + rejected (marts.telemetry_files.reconciles).
-- history: marts.telemetry_rejects_history (every retained run).
-- column comments: telemetry_rejects.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.telemetry_rejects as
with rejects as (
    select * from staging.telemetry_rejects
)

select
    run_id,
    run_date,
    file,
    line,
    source_kind,
    deployment_id,
    reason_code,
    reason,
    raw_excerpt
from rejects;

comment on view marts.telemetry_rejects is 'Every telemetry input row that was rejected, with a reason code and reason (latest run).';
