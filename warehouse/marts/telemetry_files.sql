-- marts.telemetry_files: every file of the telemetry drop folder with its row accounting (latest run).
-- grain: one file.
-- columns: run_id, run_date, file, source_kind, size_bytes, sha256, encoding, deployment_id,
--   lines_total, lines_ignored, rows_in, accepted, rejected, observations, samples, notes,
--   telemetry_source, drop_dir, reconciles
-- history: marts.telemetry_files_history (every retained run).
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
comment on column marts.telemetry_files.source_kind is 'prometheus, vllm_log, csv, parquet, sidecar, ignored or unknown.';
comment on column marts.telemetry_files.size_bytes is 'File size in bytes.';
comment on column marts.telemetry_files.sha256 is 'sha256 of the file''s bytes.';
comment on column marts.telemetry_files.encoding is 'Text encoding read (utf-8, utf-8-sig, utf-16...), parquet, or null.';
comment on column marts.telemetry_files.deployment_id is 'Deployment id of the file, when one applies to all of it.';
comment on column marts.telemetry_files.lines_total is 'Lines in the file.';
comment on column marts.telemetry_files.lines_ignored is 'Comments, blank lines and lines capplan does not read.';
comment on column marts.telemetry_files.rows_in is 'Rows capplan read (see the telemetry README: Accounting).';
comment on column marts.telemetry_files.accepted is 'Rows accepted (became a sample, fed an observation, or a valid sidecar).';
comment on column marts.telemetry_files.rejected is 'Rows rejected (one marts.telemetry_rejects row each).';
comment on column marts.telemetry_files.observations is 'Observations built from the file.';
comment on column marts.telemetry_files.samples is 'Samples read from the file.';
comment on column marts.telemetry_files.notes is 'Notes (ignored CSV columns, documentation files).';
comment on column marts.telemetry_files.telemetry_source is 'sample (the shipped SAMPLE fleet), drop_folder (CAPPLAN_TELEMETRY_DIR / var/telemetry) or prometheus (CAPPLAN_PROMETHEUS_URL: one file per query).';
comment on column marts.telemetry_files.drop_dir is 'The folder the run ingested, or the Prometheus URL (credentials redacted).';
comment on column marts.telemetry_files.reconciles is 'True when rows_in = accepted + rejected (every row read is accounted for).';
