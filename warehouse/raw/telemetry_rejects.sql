-- raw.telemetry_rejects: every telemetry input row that was rejected, with the reason.
-- grain: one rejected row (a line, a CSV/Parquet row, or a whole file).
-- columns: file, line, source_kind, deployment_id, reason_code, reason, raw_excerpt
-- written by: the `telemetry_ingest` asset, from the frame registered as `incoming`.
create or replace table raw.telemetry_rejects as
select * from incoming;

comment on table raw.telemetry_rejects is 'Every telemetry input row that was rejected, with the reason.';
