"""`benchmarks/telemetry.py` at smoke size: both paths run, in processes of their own, and the
store's usage (DuckDB over Parquet) equals today's (Polars over the parsed Prometheus text) for
the same synthetic fleet (the benchmark fails otherwise)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import telemetry


def test_the_smoke_run_compares_both_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    telemetry.main(["--samples", "120000", "--baseline-samples", "12000", "--deployments", "100",
                    "--chunk-scrapes", "40", "--dir", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    # 120,000 samples = 100 deployments x 10 series x 120 scrapes of 15 s from 12:00: one day, 3 chunks
    assert "store path: 120,000 samples, 100 deployments x 10 series every 15 s" in out
    assert re.search(r"days 2026-11-30; 3 Parquet files", out)
    assert "re-append of the last chunk (40,000 samples)" in out and ", 0 written" in out
    assert "100 deployments predicted" in out
    assert "== usage from the parsed text (Polars): yes" in out
    assert re.search(r"ingest: append [\d.]+ s = [\d,]+ samples/s", out) and "peak RSS" in out
