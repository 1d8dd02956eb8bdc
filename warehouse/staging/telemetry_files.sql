-- staging.telemetry_files: every file found in the telemetry drop folder and how its rows were accounted for, typed and stamped with the run.
-- grain: one file.
-- columns: run_id, run_date, file, source_kind, size_bytes, sha256, encoding, deployment_id,
--   lines_total, lines_ignored, rows_in, accepted, rejected, observations, samples, notes,
--   telemetry_source, drop_dir
create or replace view staging.telemetry_files as
with source as (
    select * from raw.telemetry_files
),

typed as (
    select
        run.run_id,
        run.run_date,
        file::varchar as file,
        source_kind::varchar as source_kind,
        size_bytes::bigint as size_bytes,
        sha256::varchar as sha256,
        encoding::varchar as encoding,
        deployment_id::varchar as deployment_id,
        lines_total::bigint as lines_total,
        lines_ignored::bigint as lines_ignored,
        rows_in::bigint as rows_in,
        accepted::bigint as accepted,
        rejected::bigint as rejected,
        observations::bigint as observations,
        samples::bigint as samples,
        notes::varchar as notes,
        telemetry_source::varchar as telemetry_source,
        drop_dir::varchar as drop_dir
    from source
    cross join raw.run as run
)

select * from typed;
