"""Which telemetry folder a run ingests, what is in it, and the frames it gives.

- `resolve_drop_folder(configured)`: `CAPPLAN_TELEMETRY_DIR` when set; else `var/telemetry` when
  it holds any file; else the shipped SAMPLE fleet (`telemetry/sample`), so a default
  run fills every mart. Every row the run writes says which (`telemetry_source`).
- `fingerprint(folder)`: {relative path: sha256} of every file: the telemetry sensor's cursor.
- `ingest_frames(folder, catalog)`: `telemetry.ingest_dir` resolved against the run's
  registry (model ids and GPU SKUs with their aliases), files labelled with the source.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from models_registry.planning import Catalog
from telemetry import SAMPLE_DIR, IngestResult, deployment_summary, ingest_dir
from telemetry.files import read_bounded, walk
from telemetry.ingest import DEFAULT_DIR
from telemetry.normalize import RowError
from telemetry.schema import clean_text

SAMPLE = "sample"
DROP_FOLDER = "drop_folder"


@dataclass(frozen=True)
class DropFolder:
    path: Path
    source: str  # sample | drop_folder
    configured: bool  # CAPPLAN_TELEMETRY_DIR named it

    def describe(self) -> str:
        """One line for logs and the CLI (paths shown display-safe, secrets redacted)."""
        return clean_text(self._describe()) or ""

    def _describe(self) -> str:
        if self.source == SAMPLE:
            return f"the SAMPLE fleet shipped with capplan ({self.path}): made-up numbers, not a real fleet"
        how = "CAPPLAN_TELEMETRY_DIR" if self.configured else "the default drop folder"
        return f"{how} {self.path}"


def _has_files(folder: Path) -> bool:
    return bool(walk(folder))


def resolve_drop_folder(configured: str | Path | None, default: Path = DEFAULT_DIR) -> DropFolder:
    if configured:
        path = Path(configured)
        same = path.resolve() == SAMPLE_DIR.resolve() if path.exists() else False
        return DropFolder(path, SAMPLE if same else DROP_FOLDER, True)
    if _has_files(default):
        return DropFolder(default, DROP_FOLDER, False)
    return DropFolder(SAMPLE_DIR, SAMPLE, False)


def watched_folder(configured: str | Path | None, default: Path = DEFAULT_DIR) -> Path:
    """The folder the sensor watches: the configured one, else the default drop folder (never the sample)."""
    return Path(configured) if configured else default


def fingerprint(folder: Path) -> dict[str, str]:
    """{path relative to the folder: sha256 of its bytes} for every file (empty for a missing folder).

    Walked and read as the ingest reads (`telemetry.files`): links out of the folder,
    FIFOs and devices are not opened, and stand for their reason code instead of a hash."""
    result: dict[str, str] = {}
    for found in walk(folder):
        name = clean_text(found.rel) or found.rel  # the cursor is stored by Dagster: no secret in it
        try:
            if found.problem is not None:
                raise found.problem
            raw, _ = read_bounded(found.path)
            result[name] = hashlib.sha256(raw).hexdigest()
        except RowError as exc:
            result[name] = clean_text(f"{exc.code}: {exc.reason}") or exc.code
    return result


def fingerprint_key(prints: dict[str, str]) -> str:
    """A short stable key for a fingerprint (the run key of the run it triggers)."""
    return hashlib.sha256(json.dumps(prints, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TelemetryFrames:
    folder: DropFolder
    result: IngestResult
    files: pl.DataFrame  # result.files + telemetry_source, drop_dir


def ingest_frames(folder: DropFolder, catalog: Catalog) -> TelemetryFrames:
    result = ingest_dir(folder.path, model_ids=catalog.model_ids(), gpu_skus=list(catalog.gpus.values()))
    files = result.files.with_columns(
        pl.lit(folder.source, pl.String).alias("telemetry_source"),
        pl.lit(clean_text(str(folder.path)), pl.String).alias("drop_dir"),
    )
    return TelemetryFrames(folder, result, files)


def deployments_frame(
    observations: pl.DataFrame, samples: pl.DataFrame, source: str, usage: pl.DataFrame | None = None
) -> pl.DataFrame:
    """`raw.telemetry_deployments`: deployment_summary, labelled with the telemetry source.
    `usage`: the sample store's (`SampleStore.usage`) instead of one computed from `samples`."""
    lazy_usage = usage.lazy() if usage is not None else None
    summary = deployment_summary(observations.lazy(), samples.lazy(), lazy_usage).collect()
    return summary.with_columns(pl.lit(source, pl.String).alias("telemetry_source"))
