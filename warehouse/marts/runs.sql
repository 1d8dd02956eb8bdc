-- marts.runs: every published nightly run, with its provenance. Never trimmed.
-- grain: one row per published run.
-- columns: run_id, run_date, started_at, finished_at, duration_s, status, capplan_version, git_sha,
--   git_dirty, formula_version, engine_profiles_sha256, engine_profiles, input_hashes,
--   catalog_dir, registry_url, models, gpus, capacity_grid_rows, context_limits_rows,
--   ingest_errors, row_counts, python_version, duckdb_version, polars_version, dagster_version
-- history: this table is the history; every other mart keeps marts.<table>_history with the
--   rows of the last runs (CAPPLAN_HISTORY_RUNS, default 7), keyed by run_id and run_date.
-- column comments: runs.yaml beside this file; the columns the marts share, capacity/columns.py.
create table if not exists marts.runs (
    run_id varchar primary key,
    run_date date not null,
    started_at timestamptz not null,
    finished_at timestamptz not null,
    duration_s double not null,
    status varchar not null,
    capplan_version varchar,
    git_sha varchar,
    git_dirty boolean,
    formula_version varchar,
    engine_profiles_sha256 varchar,
    engine_profiles json,
    input_hashes json,
    catalog_dir varchar,
    registry_url varchar,
    models bigint,
    gpus bigint,
    capacity_grid_rows bigint,
    context_limits_rows bigint,
    ingest_errors bigint,
    row_counts json,
    python_version varchar,
    duckdb_version varchar,
    polars_version varchar,
    dagster_version varchar
);

comment on table marts.runs is 'Every published nightly run with its provenance (newest: order by started_at desc).';
