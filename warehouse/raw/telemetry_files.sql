-- raw.telemetry_files: every file found in the telemetry drop folder and how its rows were accounted for.
-- grain: one file.
-- columns: file, source_kind, size_bytes, sha256, encoding, deployment_id, lines_total,
--   lines_ignored, rows_in, accepted, rejected, observations, samples, notes, telemetry_source,
--   drop_dir
-- written by: the `telemetry_ingest` asset, from the frame registered as `incoming`.
create or replace table raw.telemetry_files as
select * from incoming;

comment on table raw.telemetry_files is 'Every file found in the telemetry drop folder and how its rows were accounted for.';
