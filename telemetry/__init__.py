"""Telemetry ingest: a drop folder of vLLM / DCGM metrics, vLLM startup logs and CSV/Parquet
exports -> Polars frames of deployment observations, metric samples, rejects and files.

    from telemetry import ingest_dir
    result = ingest_dir("var/telemetry")
    result.observations, result.samples, result.rejects, result.files

No Dagster and no warehouse here: the frames are what `raw.telemetry_*` tables hold (README.md); DuckDB
only reads the sample store's Parquet (`store`). Imports `capacity` and `models_registry`, nothing above.
"""

from telemetry.ingest import (
    ENV_VAR,
    SAMPLE_DIR,
    IngestResult,
    check_reconciliation,
    default_drop_dir,
    ingest_dir,
)
from telemetry.schema import (
    FILE_SCHEMA,
    OBSERVATION_SCHEMA,
    REASON_CODES,
    REJECT_SCHEMA,
    SAMPLE_SCHEMA,
)
from telemetry.summary import deployment_summary, sample_usage

__all__ = [
    "ENV_VAR",
    "FILE_SCHEMA",
    "OBSERVATION_SCHEMA",
    "REASON_CODES",
    "REJECT_SCHEMA",
    "SAMPLE_DIR",
    "SAMPLE_SCHEMA",
    "IngestResult",
    "check_reconciliation",
    "default_drop_dir",
    "deployment_summary",
    "ingest_dir",
    "sample_usage",
]
