"""Recommendations: capplan's predictions next to the fleet's telemetry, and the answers built on them.

Pure functions over Polars frames (the warehouse's `raw` tables as read by a Dagster asset); no
Dagster and no database here except `read_*` helpers that take an open DuckDB connection.

- `predictions`: every observed deployment (warehouse.telemetry.deployment_summary) predicted by
  capacity.memory.estimate for the same settings, and the engine's own numbers derived alongside.
- `calibration`: the fit of capacity.calibration over those pairs, as frames, and back.
- `limits`: effective context limits per deployment and per model x GPU x TP.
- `admission`: the token and sequence budget each deployment should admit.
- `workloads` / `placements`: workload profiles (workloads.yaml), the cheapest placements and the
  procurement plan.
- `report`: the HTML report (extra `report`).
"""
