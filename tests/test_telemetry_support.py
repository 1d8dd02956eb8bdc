"""Helpers shared by the telemetry tests (no tests here)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from telemetry import IngestResult, ingest_dir
from telemetry.normalize import catalog_model_ids

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
GIB = 1 << 30
MIB = 1 << 20


@cache
def model_ids() -> tuple[str, ...]:
    return tuple(catalog_model_ids())


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def ingest(root: Path, files: dict[str, str | bytes] | None = None) -> IngestResult:
    if files:
        write(root, files)
    result = ingest_dir(root, model_ids=model_ids())
    assert result.check_reconciliation() == []
    return result


def observations(result: IngestResult) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if v is not None} for row in result.observations.iter_rows(named=True)]


def only_observation(result: IngestResult) -> dict[str, Any]:
    rows = observations(result)
    assert len(rows) == 1, (rows, result.rejects.rows())
    return rows[0]


def rejects(result: IngestResult) -> list[tuple[str, int | None, str]]:
    return [(r["file"], r["line"], r["reason_code"]) for r in result.rejects.iter_rows(named=True)]


def gib(x: float) -> int:
    return round(x * GIB)
