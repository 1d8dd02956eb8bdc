-- raw.capacity_grid: the per-context columns of the capacity grid, as computed.
-- grain: one row per part_id x deployment_id x context.
-- columns: part_id (raw.grid_partitions), deployment_id (raw.deployments), context, max_concurrency, b_max_memory, b_max, fits,
--   tpot_ms, output_tokens_per_second.
--   Joined to raw.deployments it is exactly capacity.grid.build_capacity_grid.
-- history: kept in place, each row once. Rows are keyed by part_id, the content key of the grid
--   partition (model family) they belong to; raw.grid_partitions maps every retained run
--   (CAPPLAN_HISTORY_RUNS) to the part_ids it published, so a partition unchanged from one run to
--   the next adds no rows. Publishing drops the rows no retained run refers to; staging joins the
--   map back (run_id, run_date on every row), marts.*_history shows every retained run.
-- written by: the `capacity_grid` asset (warehouse.capacity_grid.refresh_partitions), one
--   partition at a time from its Parquet file in the run's staging area, registered as `incoming`.

-- stored by context first: a query for one context reads a few row groups (zone maps)
append incoming to raw.capacity_grid keyed by part_id order by context, deployment_id;

comment on table raw.capacity_grid is 'B_max and concurrency per deployment (raw.deployments) and context.';
