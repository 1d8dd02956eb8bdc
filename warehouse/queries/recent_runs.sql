-- The last runs: when, how long, on which code and inputs, and how many rows each mart got.
select
    run_id,
    run_date,
    duration_s,
    git_sha,
    formula_version,
    models,
    gpus,
    capacity_grid_rows,
    ingest_errors
from marts.runs
order by started_at desc
limit 10;
