"""The `model_gpu_tp` effective context limits, per grid partition, stored once per version.

Those rows (`recommendations.limits.grid_limits`: every model x GPU x TP [x PP] of the
registry, each a scalar `estimate`) are most of the effective limits' cost and rows. A partition's
rows follow from its grid partition (`warehouse.capacity_grid.GridPartition`: models, GPUs, capacity
code), the limits code, and the calibration corrections its models look up; their sha256 is the
version's key. A version the warehouse already holds is published again without computing it;
`raw.limit_partitions` maps each run to its versions, `raw.grid_limits` holds each version's rows
once (keyed by `part_id`), staged as Parquet like the grid's.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import polars as pl

from capacity import engine_constants as ec
from capacity.calibration import CalibrationFit
from capacity.grid import TARGET_CONCURRENCIES
from models_registry.planning import Catalog
from recommendations.limits import LIMIT_SCHEMA, grid_limits
from warehouse.capacity_grid import (
    LEGACY_PARTITION,
    PART_ID_HEX,
    PARTITION_KEY_SCHEMA,
    GridPartition,
    StoredVersions,
    adopt_rows_per_run,
    grid_partitions,
    map_run_to_versions,
    stage_parquet,
)
from warehouse.provenance import sha256_file
from warehouse.sql import load_frame, relation_kind, transaction

LIMITS_TABLE = "grid_limits"
MAP_TABLE = "limit_partitions"
LIMITS_CODE = Path(__file__).resolve().parent / "limits.py"
MAP_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {**PARTITION_KEY_SCHEMA, "limit_rows": pl.Int64}


def limits_key(part: GridPartition, catalog: Catalog, fit: CalibrationFit, engine_version: str) -> str:
    """sha256 of what the partition's model_gpu_tp rows follow from: the grid partition's key, the
    limits code, the release, the target concurrencies, and each correction its models look up."""
    families = sorted(
        {str(catalog.models[m].spec.family) for m in part.models.get_column("repo_id").to_list() if m in catalog.models}
    )
    corrections = [
        [gpu, family, repr(fit.lookup("vllm", engine_version, gpu, family))]
        for gpu in sorted(catalog.gpus)
        for family in families
    ]
    text = json.dumps(
        {
            "grid": part.part_key,
            "code": sha256_file(LIMITS_CODE),
            "release": engine_version,
            "concurrencies": list(TARGET_CONCURRENCIES),
            "corrections": corrections,
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class LimitRefresh:
    computed: list[str]
    reused: list[str]
    rows: int
    compute_seconds: float
    files: list[str] = field(default_factory=list)


HISTORY = "effective_context_limits_history"


def adopt_copied_history(con: duckdb.DuckDBPyConnection) -> int:
    """A warehouse written before partitions kept `marts.effective_context_limits_history` as a
    table, a copy of the mart per run: its deployment rows go to raw.effective_context_limits and
    its model_gpu_tp rows become one version per run in raw.grid_limits (mapped in
    raw.limit_partitions), so the history view that replaces the table reads the same runs.
    Returns the runs adopted."""
    if relation_kind(con, "marts", HISTORY) != "table" or relation_kind(con, "raw", LIMITS_TABLE) == "table":
        return 0
    old = f"marts.{HISTORY}"
    con.execute(
        f"insert into raw.effective_context_limits by name select * from {old} "
        "where kind = 'deployment' and run_id <> (select run_id from raw.run)"
    )
    adopted = adopt_rows_per_run(con, [LIMITS_TABLE], source=f"(select * from {old} where kind = 'model_gpu_tp')")
    for run_id, run_date, part_id, part_key in adopted:
        rows = con.execute(f"select count(*), count(distinct model) from raw.{LIMITS_TABLE} where part_id = $p", {"p": part_id}).fetchone()
        row = {
            "partition": LEGACY_PARTITION,
            "part_key": part_key,
            "part_id": part_id,
            "computed_by_run_id": run_id,
            "computed": True,
            "models": int(rows[1]) if rows else 0,
            "limit_rows": int(rows[0]) if rows else 0,
        }
        load_frame(con, "raw", MAP_TABLE, pl.DataFrame([row], schema=MAP_SCHEMA), {"run_id": run_id, "run_date": run_date})
    con.execute(f"drop table {old}")
    return len(adopted)


def refresh_limit_partitions(
    con: duckdb.DuckDBPyConnection,
    models: pl.DataFrame,
    gpus: pl.DataFrame,
    catalog: Catalog,
    fit: CalibrationFit,
    *,
    stage_dir: Path,
    run: dict[str, object],
    backfill: Sequence[str] | None = None,
) -> LimitRefresh:
    """Publish this run's model_gpu_tp limits, computing only the versions the build lacks."""
    with transaction(con):
        adopt_copied_history(con)
    stored = StoredVersions.read(con, MAP_TABLE)
    with transaction(con):  # one commit for every partition
        return _refresh(con, models, gpus, catalog, fit, stored, stage_dir=stage_dir, run=run, backfill=backfill)


def _refresh(
    con: duckdb.DuckDBPyConnection,
    models: pl.DataFrame,
    gpus: pl.DataFrame,
    catalog: Catalog,
    fit: CalibrationFit,
    stored: StoredVersions,
    *,
    stage_dir: Path,
    run: dict[str, object],
    backfill: Sequence[str] | None,
) -> LimitRefresh:
    version = ec.VLLM_DEFAULT_VERSION
    computed: list[str] = []
    reused: list[str] = []
    rows: list[dict[str, object]] = []
    files: list[str] = []
    seconds = 0.0
    for grid_part in grid_partitions(models, gpus):
        key = limits_key(grid_part, catalog, fit, version)
        part = replace(grid_part, part_key=key)
        previous = stored.reusable(part.name, key, backfill)
        if previous is not None:
            reused.append(part.name)
            keep = ("part_key", "part_id", "computed_by_run_id", "models", "limit_rows")
            rows.append({"partition": part.name, "computed": False} | {k: previous[k] for k in keep})
            continue
        start = time.perf_counter()
        ids = set(part.models.get_column("repo_id").to_list())
        sub = Catalog(
            models={m: spec for m, spec in catalog.models.items() if m in ids}, gpus=catalog.gpus, model_errors={}
        )
        frame = grid_limits(sub, fit, engine_version=version) if sub.models else pl.DataFrame(schema=LIMIT_SCHEMA)
        path = stage_parquet(frame, stage_dir, part, LIMITS_TABLE)
        part_id = int(key[:PART_ID_HEX], 16)
        load_frame(con, "raw", LIMITS_TABLE, path, {"part_id": part_id})
        seconds += time.perf_counter() - start
        files.append(path.relative_to(stage_dir).as_posix())
        computed.append(part.name)
        rows.append(
            {
                "partition": part.name,
                "part_key": key,
                "part_id": part_id,
                "computed_by_run_id": run["run_id"],
                "computed": True,
                "models": len(sub.models),
                "limit_rows": frame.height,
            }
        )
    frame = map_run_to_versions(
        con,
        [LIMITS_TABLE],
        lambda: {LIMITS_TABLE: pl.DataFrame(schema=LIMIT_SCHEMA)},
        MAP_TABLE,
        pl.DataFrame(rows, schema=MAP_SCHEMA),
        run,
    )
    return LimitRefresh(
        computed=computed,
        reused=reused,
        rows=int(frame.get_column("limit_rows").sum() or 0),
        compute_seconds=seconds,
        files=files,
    )
