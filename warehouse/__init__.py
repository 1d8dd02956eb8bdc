"""The DuckDB warehouse: one file (`var/warehouse.duckdb`, or CAPPLAN_WAREHOUSE), schemas raw,
staging and marts, one SQL file per relation (`warehouse/<layer>/<table>.sql`).

- `sql`: running those files with bound parameters, loading frames into raw.
- `publish`: each run builds a private copy and swaps it in atomically; history by run.
- `lock`: one refresh at a time.
- `capacity_grid`, `provenance`: the grid's partitions stored by key, and what a run was built from
  (no Dagster). The registry's rows come as frames from `models_registry.frames`.
- `queries/`: example queries for platform teams (`capplan sql --file ...`).
"""
