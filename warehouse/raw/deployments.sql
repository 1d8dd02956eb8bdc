-- raw.deployments: every deployment of the capacity grid (what does not depend on the context).
-- grain: one row per part_id x model x gpu x engine x engine_version x weight_dtype x kv_dtype x tp x pp x dp x ep.
-- columns: part_id (raw.grid_partitions), deployment_id (the key of the deployment, fixed by its partition) and the grid's deployment columns:
--   keys, dtypes, memory breakdown, KV pool (capacity.grid.GRID_COLUMNS minus the per-context ones).
-- history: kept in place, each row once. Rows are keyed by part_id, the content key of the grid
--   partition (model family) they belong to; raw.grid_partitions maps every retained run
--   (CAPPLAN_HISTORY_RUNS) to the part_ids it published, so a partition unchanged from one run to
--   the next adds no rows. Publishing drops the rows no retained run refers to; staging joins the
--   map back (run_id, run_date on every row), marts.*_history shows every retained run.
-- written by: the `capacity_grid` asset (warehouse.capacity_grid.refresh_partitions), one
--   partition at a time from its Parquet file in the run's staging area, registered as `incoming`.
append incoming to raw.deployments keyed by part_id;

comment on table raw.deployments is 'The capacity grid''s deployments: one row each, with the memory breakdown and KV pool.';
