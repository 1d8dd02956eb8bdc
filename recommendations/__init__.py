"""Recommendations: capplan's predictions next to the fleet's telemetry, and the answers built on them.

Pure functions over Polars frames (the warehouse's `raw` tables as read by a Dagster asset); no
Dagster and no database here except `read_*` helpers that take an open DuckDB connection.

The telemetry side (the drop folder, every observed deployment predicted, the calibration fit as
frames) lives in `telemetry` (`drop_folder`, `predictions`, `calibration_frames`); the
run's registry as engine objects is `models_registry.planning`.

- `limits`: effective context limits per deployment and per model x GPU x TP.
- `admission`: the token and sequence budget each deployment should admit.
- `workloads` / `placements`: workload profiles (workloads.yaml), the cheapest placements and the
  procurement plan.
- `report`: the HTML report (extra `report`).
"""
