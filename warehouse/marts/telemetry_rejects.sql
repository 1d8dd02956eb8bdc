-- marts.telemetry_rejects: every telemetry input row that was rejected, with a reason code and reason (latest run).
-- grain: one rejected row (a line, a CSV/Parquet row, or a whole file).
-- columns: run_id, run_date, file, line, source_kind, deployment_id, reason_code, reason,
--   raw_excerpt
-- reconciliation: per file, rows_in = accepted + rejected (marts.telemetry_files.reconciles).
-- history: marts.telemetry_rejects_history (every retained run).
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
comment on column marts.telemetry_rejects.line is '1-based line (CSV line, Parquet row); null = the whole file.';
comment on column marts.telemetry_rejects.source_kind is 'The file''s kind: prometheus, vllm_log, csv, parquet, sidecar, unknown.';
comment on column marts.telemetry_rejects.deployment_id is 'Deployment id, when known.';
comment on column marts.telemetry_rejects.reason_code is 'malformed, bad_value, negative, not_finite, wrong_unit, out_of_range, unknown_model, unknown_gpu, missing_field, bad_timestamp, duplicate, encoding, empty, no_data, unknown_file_type, bad_sidecar, too_large, not_a_file, outside_folder, unreadable, parse_error (telemetry/README.md).';
comment on column marts.telemetry_rejects.reason is 'Why, one line.';
comment on column marts.telemetry_rejects.raw_excerpt is 'The start of the rejected line (200 characters).';
