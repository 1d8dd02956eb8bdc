-- staging.telemetry_rejects: every telemetry input row that was rejected, with the reason, typed and stamped with the run.
-- grain: one rejected row (a line, a CSV/Parquet row, or a whole file).
-- columns: run_id, run_date, file, line, source_kind, deployment_id, reason_code, reason,
--   raw_excerpt
create or replace view staging.telemetry_rejects as
with source as (
    select * from raw.telemetry_rejects
),

typed as (
    select
        run.run_id,
        run.run_date,
        file::varchar as file,
        line::bigint as line,
        source_kind::varchar as source_kind,
        deployment_id::varchar as deployment_id,
        reason_code::varchar as reason_code,
        reason::varchar as reason,
        raw_excerpt::varchar as raw_excerpt
    from source
    cross join raw.run as run
)

select * from typed;
