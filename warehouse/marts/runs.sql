-- marts.runs: every published nightly run, with its provenance. Never trimmed.
-- grain: one row per published run.
-- columns: run_id, run_date, started_at, finished_at, duration_s, status, capplan_version, git_sha,
--   git_dirty, formula_version, engine_profiles_sha256, engine_profiles, input_hashes,
--   catalog_dir, registry_url, models, gpus, capacity_grid_rows, context_limits_rows,
--   ingest_errors, row_counts, python_version, duckdb_version, polars_version, dagster_version
-- history: this table is the history; every other mart keeps marts.<table>_history with the
--   rows of the last runs (CAPPLAN_HISTORY_RUNS, default 7), keyed by run_id and run_date.
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
comment on column marts.runs.run_id is 'Run id (the Dagster run id); the run_id column of every mart.';
comment on column marts.runs.run_date is 'UTC date the run started; history is keyed by it.';
comment on column marts.runs.started_at is 'When the run started building its snapshot (UTC).';
comment on column marts.runs.finished_at is 'When the snapshot was ready to publish (UTC).';
comment on column marts.runs.duration_s is 'finished_at - started_at, in seconds.';
comment on column marts.runs.status is 'published (a run that fails publishes nothing).';
comment on column marts.runs.capplan_version is 'capplan package version.';
comment on column marts.runs.git_sha is 'Git commit of the code, when run from a checkout.';
comment on column marts.runs.git_dirty is 'True when the checkout had uncommitted changes.';
comment on column marts.runs.formula_version is 'sha256 (first 16 hex) of the capacity formula modules (warehouse/provenance.py FORMULA_FILES: the estimate, pool, layer kinds, engine profiles, grid, spec and engine_constants).';
comment on column marts.runs.engine_profiles_sha256 is 'sha256 of engine_profiles.';
comment on column marts.runs.engine_profiles is 'The engine-profile constants of capacity.engine_constants in force (vLLM releases and defaults, SGLang, TRT-LLM).';
comment on column marts.runs.input_hashes is 'sha256 of each input: catalog models.yaml, gpus.yaml, config files; registry models and GPUs as read.';
comment on column marts.runs.catalog_dir is 'Catalog directory the registry was synced from.';
comment on column marts.runs.registry_url is 'Registry database URL (password masked).';
comment on column marts.runs.models is 'Rows of marts.models.';
comment on column marts.runs.gpus is 'Rows of marts.gpus.';
comment on column marts.runs.capacity_grid_rows is 'Rows of marts.capacity_grid.';
comment on column marts.runs.context_limits_rows is 'Rows of marts.context_limits.';
comment on column marts.runs.ingest_errors is 'Rows of marts.ingest_errors.';
comment on column marts.runs.row_counts is 'Rows of every mart, by table name.';
comment on column marts.runs.python_version is 'Python version.';
comment on column marts.runs.duckdb_version is 'DuckDB version that wrote the snapshot.';
comment on column marts.runs.polars_version is 'Polars version.';
comment on column marts.runs.dagster_version is 'Dagster version.';
