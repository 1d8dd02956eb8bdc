"""Recommendations: capplan's predictions next to the fleet's telemetry, and the answers built on them.

Pure functions over Polars frames (the warehouse's `raw` tables as read by a Dagster asset); no
Dagster, and DuckDB only in `read_*` helpers that take an open connection and in `limit_partitions`
(the limits stored by grid partition). This package sits above `warehouse` and `telemetry`; neither
imports it.

The telemetry side (the drop folder, every observed deployment predicted, the calibration fit as
frames) lives in `telemetry` (`drop_folder`, `predictions`, `calibration_frames`); the
run's registry as engine objects is `models_registry.planning`.

- `limits`: effective context limits per deployment and per model x GPU x TP.
- `admission`: the token and sequence budget each deployment should admit.
- `limit_partitions`: the grid's limits kept per grid partition, recomputed only where it changed.
- `workloads` / `placements` / `buckets`: workload profiles (workloads.yaml), the cheapest placements,
  the procurement plan and its request-size buckets.
- `html_report`: the HTML report (extra `report`).
- `deploy`: a planned layout as the engine command line that realizes its budget and as Kubernetes,
  KServe, llm-d and Dynamo manifests (pure; no I/O).
"""
