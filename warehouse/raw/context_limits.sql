-- raw.context_limits: the largest context per deployment at each target concurrency, as computed.
-- grain: one row per part_id x deployment_id x concurrency (1, 8, 32, 128, 512).
-- columns: part_id (raw.grid_partitions), deployment_id (raw.deployments), concurrency, max_context.
-- history: kept in place, each row once. Rows are keyed by part_id, the content key of the grid
--   partition (model family) they belong to; raw.grid_partitions maps every retained run
--   (CAPPLAN_HISTORY_RUNS) to the part_ids it published, so a partition unchanged from one run to
--   the next adds no rows. Publishing drops the rows no retained run refers to; staging joins the
--   map back (run_id, run_date on every row), marts.*_history shows every retained run.
-- written by: the `capacity_grid` asset (warehouse.capacity_grid.refresh_partitions), one
--   partition at a time from its Parquet file in the run's staging area, registered as `incoming`.

-- stored by concurrency first: a query for one concurrency reads a few row groups (zone maps)
append incoming to raw.context_limits keyed by part_id order by concurrency, deployment_id;

comment on table raw.context_limits is 'Max context per deployment (raw.deployments) for target concurrencies 1, 8, 32, 128, 512.';
