-- raw.grid_inputs: what each run's grid followed from, one fingerprint per input (warehouse.grid_inputs).
-- grain: one row per run_id x input_kind x input_key.
-- columns: run_id, run_date, input_kind (engine_release, config, catalog, price, calibration),
--   input_key (the engine, model, GPU, or speed_model), fingerprint (the release; config_sha256 and
--   checkpoint size; the GPU spec's hash without its price; the price and its source; the fitted
--   factors' hash), price_usd_per_gpu_hour, price_source (price rows only), run_started_at
-- history: kept in place, keyed by run_id (CAPPLAN_HISTORY_RUNS); marts.grid_diff compares two runs'
--   fingerprints to name why a grid row changed.
-- written by: the `capacity_grid` asset, from the frame registered as `incoming`.
append incoming to raw.grid_inputs keyed by run_id;

comment on table raw.grid_inputs is 'Per run, a fingerprint of every input of the grid: what a changed row changed because of.';
