"""The DuckDB warehouse: one file (`var/warehouse.duckdb`, or CAPPLAN_WAREHOUSE), schemas raw,
staging and marts, one SQL file per relation (`warehouse/<layer>/<table>.sql`).

- `sql`: running those files with bound parameters, loading frames into raw.
- `publish`: each run builds a private copy and swaps it in atomically; history by run.
- `lock`: one refresh at a time.
- `sources`, `capacity_grid`, `provenance`: what the nightly run reads and computes (no Dagster).
- `queries/`: example queries for platform teams (`capplan sql --file ...`).
"""
