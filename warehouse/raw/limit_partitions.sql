-- raw.limit_partitions: which version of each partition's model_gpu_tp limits every retained run published.
-- grain: one row per run_id x partition (a model family, as in raw.grid_partitions).
-- columns: run_id, run_date, partition, part_key, part_id, computed_by_run_id, computed, models, limit_rows
-- meaning: part_key is the sha256 of the grid partition's key, the limits code, the release, the
--   target concurrencies and the calibration corrections its models look up; part_id its first 60
--   bits (the key of raw.grid_limits); computed_by_run_id the run that computed the rows; computed
--   whether this run did (false: reused).
-- history: kept in place, keyed by run_id (CAPPLAN_HISTORY_RUNS).
-- written by: the `effective_context_limits` asset (recommendations.limit_partitions),
--   from the frame registered as `incoming`.
append incoming to raw.limit_partitions keyed by run_id;

comment on table raw.limit_partitions is 'The limits partition versions (part_id) each retained run published; computed or reused.';
