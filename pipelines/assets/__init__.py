"""Dagster assets by domain, each module with its assets and checks side by side: `registry`
(registry sync, GPU catalog), `capacity` (the grid), `marts` (the marts and the publish),
`telemetry` and `recommendations`. `pipelines/definitions.py` gathers them."""
