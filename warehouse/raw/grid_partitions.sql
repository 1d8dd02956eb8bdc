-- raw.grid_partitions: which version of each grid partition every retained run published.
-- grain: one row per run_id x partition (a model family).
-- columns: run_id, run_date, partition, part_key, part_id, computed_by_run_id, computed, models,
--   deployments, grid_rows, context_limit_rows, errors_json
-- meaning: partition is the model family, as a file name; part_key the sha256 of what the
--   partition's rows follow from (its models' registry rows, every GPU, the grid options, the
--   code: capacity, the registry's config parsing); part_id its first 60 bits, the key of the rows in raw.deployments,
--   raw.capacity_grid and raw.context_limits; computed_by_run_id the run that computed them;
--   computed whether this run did (false: reused); errors_json the partition's grid errors (as
--   raw.grid_errors rows).
-- history: kept in place, keyed by run_id (CAPPLAN_HISTORY_RUNS); publishing trims the oldest runs
--   and then the grid rows of part_ids no retained run refers to.
-- written by: the `capacity_grid` asset (warehouse.capacity_grid.refresh_partitions), from the
--   frame registered as `incoming`.
append incoming to raw.grid_partitions keyed by run_id;

comment on table raw.grid_partitions is 'The grid partition versions (part_id) each retained run published; computed or reused.';
