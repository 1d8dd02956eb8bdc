-- marts.telemetry_files: every file of the telemetry drop folder with its row accounting (latest run).
-- grain: one file.
-- columns: run_id, run_date, file, source_kind, size_bytes, sha256, encoding, deployment_id,
--   lines_total, lines_ignored, rows_in, accepted, rejected, observations, samples, notes,
--   telemetry_source, drop_dir, reconciles
-- history: marts.telemetry_files_history (every retained run).
-- column comments: telemetry_files.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.telemetry_files as
with files as (
    select * from staging.telemetry_files
)

select
    run_id,
    run_date,
    file,
    source_kind,
    size_bytes,
    sha256,
    encoding,
    deployment_id,
    lines_total,
    lines_ignored,
    rows_in,
    accepted,
    rejected,
    observations,
    samples,
    notes,
    telemetry_source,
    drop_dir,
    (rows_in = accepted + rejected) as reconciles
from files;

comment on view marts.telemetry_files is 'Every file of the telemetry drop folder with its row accounting (latest run).';
