"""Read a telemetry drop folder into four frames: observations, samples, rejects, files.

Every file found is listed in `files`; every input row is accepted (it became a sample, or fed
an observation) or rejected (one row in `rejects` with file, line, reason code, reason and an
excerpt). Per file, `rows_in = accepted + rejected`; `check_reconciliation` proves it from the
frames themselves.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from capacity.spec import GpuSku
from warehouse.telemetry.common import FileContext, FileReport, Sidecar, read_sidecar
from warehouse.telemetry.normalize import (
    GpuResolver,
    ModelResolver,
    RowError,
    catalog_model_ids,
    decode_text,
    one_line,
)
from warehouse.telemetry.prometheus import Dedupe, looks_like_prometheus, parse_prometheus
from warehouse.telemetry.schema import FILE_SCHEMA, OBSERVATION_SCHEMA, REJECT_SCHEMA, SAMPLE_SCHEMA, frame
from warehouse.telemetry.tabular import parse_csv, parse_parquet
from warehouse.telemetry.vllm_log import looks_like_vllm_log, parse_vllm_log

ENV_VAR = "CAPPLAN_TELEMETRY_DIR"
DEFAULT_DIR = Path("var/telemetry")
SAMPLE_DIR = Path(__file__).resolve().parent / "sample"

_BY_SUFFIX = {
    ".prom": "prometheus",
    ".metrics": "prometheus",
    ".om": "prometheus",
    ".log": "vllm_log",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_SNIFF_SUFFIXES = frozenset({"", ".txt", ".out", ".text"})
_DIR_SIDECARS = ("deployment.yaml", "deployment.yml", "deployment.json")
_FILE_SIDECAR_SUFFIXES = (".meta.yaml", ".meta.yml", ".meta.json")


def default_drop_dir() -> Path:
    """`CAPPLAN_TELEMETRY_DIR` when set, else `var/telemetry`."""
    value = os.environ.get(ENV_VAR)
    return Path(value) if value else DEFAULT_DIR


@dataclass(frozen=True)
class IngestResult:
    observations: pl.DataFrame
    samples: pl.DataFrame
    rejects: pl.DataFrame
    files: pl.DataFrame

    def summary(self) -> dict[str, int]:
        return {
            "files": self.files.height,
            "rows_in": int(self.files["rows_in"].sum()),
            "accepted": int(self.files["accepted"].sum()),
            "rejected": int(self.files["rejected"].sum()),
            "observations": self.observations.height,
            "samples": self.samples.height,
        }

    def check_reconciliation(self) -> list[str]:
        """Problems found when the frames are checked against each other (empty = reconciles)."""
        return check_reconciliation(self)


def check_reconciliation(result: IngestResult) -> list[str]:
    problems: list[str] = []
    files = result.files
    bad = files.filter(pl.col("rows_in") != pl.col("accepted") + pl.col("rejected"))
    problems += [f"{f}: rows_in != accepted + rejected" for f in bad["file"]]
    rejects = result.rejects.group_by("file").agg(
        pl.len().alias("n"), pl.col("line").is_null().sum().alias("file_level")
    )
    lines = files.join(rejects, on="file", how="left").filter(
        pl.col("source_kind").is_in(["prometheus", "vllm_log", "csv"])
        & (pl.col("lines_total") < pl.col("lines_ignored") + pl.col("rows_in") - pl.col("file_level").fill_null(0))
    )
    problems += [f"{f}: more rows and ignored lines than lines" for f in lines["file"]]
    obs = result.observations.group_by("file").agg(pl.len().alias("obs"), pl.col("input_rows").sum().alias("obs_rows"))
    smp = result.samples.group_by("file").len(name="smp")
    joined = (
        files.join(rejects, on="file", how="left")
        .join(obs, on="file", how="left")
        .join(smp, on="file", how="left")
        .with_columns(pl.col("n", "file_level", "obs", "obs_rows", "smp").fill_null(0))
    )
    for row in joined.iter_rows(named=True):
        if row["n"] != row["rejected"]:
            problems.append(f"{row['file']}: {row['rejected']} rejected but {row['n']} reject rows")
        if row["obs"] != row["observations"] or row["smp"] != row["samples"]:
            problems.append(f"{row['file']}: output counts differ from the file manifest")
        used = row["obs_rows"] + row["smp"] + (1 if row["source_kind"] == "sidecar" else 0)
        if row["source_kind"] != "sidecar" and used != row["accepted"]:
            problems.append(f"{row['file']}: {row['accepted']} accepted rows but outputs account for {used}")
    return problems


def ingest_dir(
    root: Path | str | None = None,
    *,
    model_ids: Iterable[str] | None = None,
    gpu_skus: Sequence[GpuSku] | None = None,
) -> IngestResult:
    """Parse every file under `root` (default: `default_drop_dir()`); a missing folder is empty.

    `model_ids`: the registry ids model names resolve to (default: the bundled catalog);
    `gpu_skus`: the GPU catalog (default: the bundled one).
    """
    base = Path(root) if root is not None else default_drop_dir()
    models = ModelResolver.from_ids(model_ids if model_ids is not None else catalog_model_ids())
    gpus = GpuResolver(tuple(gpu_skus)) if gpu_skus is not None else GpuResolver.from_catalog()
    paths = sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
    reports = _Ingest(base, models, gpus).run(paths)
    return IngestResult(
        observations=frame([o for r in reports for o in r.observations], OBSERVATION_SCHEMA),
        samples=frame([s for r in reports for s in r.samples], SAMPLE_SCHEMA),
        rejects=frame([x for r in reports for x in r.rejects], REJECT_SCHEMA),
        files=frame([r.manifest() for r in reports], FILE_SCHEMA),
    )


def _kind(path: Path) -> str:
    name = path.name.lower()
    if name in _DIR_SIDECARS or name.endswith(_FILE_SIDECAR_SUFFIXES):
        return "sidecar"
    if name.startswith(".") or name.startswith("readme") or path.suffix.lower() in (".md", ".rst"):
        return "ignored"
    return _BY_SUFFIX.get(path.suffix.lower(), "sniff" if path.suffix.lower() in _SNIFF_SUFFIXES else "unknown")


class _Ingest:
    def __init__(self, root: Path, models: ModelResolver, gpus: GpuResolver) -> None:
        self.root = root
        self.models = models
        self.gpus = gpus
        self.dedupe = Dedupe()
        self.dir_sidecars: dict[Path, Sidecar] = {}
        self.file_sidecars: dict[Path, Sidecar] = {}
        self.seen_files: dict[str, str] = {}

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def context(self, path: Path, kind: str, raw: bytes, sidecar: Sidecar | None = None) -> FileContext:
        parent = path.parent
        default = parent.name if parent != self.root else path.name.split(".")[0]
        return FileContext(
            rel=self.rel(path),
            kind=kind,
            raw=raw,
            mtime=dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.UTC),
            default_deployment_id=default,
            sidecar=sidecar or Sidecar(),
            models=self.models,
            gpus=self.gpus,
        )

    def run(self, paths: list[Path]) -> list[FileReport]:
        reports: list[FileReport] = []
        kinds = {p: _kind(p) for p in paths}
        for path in paths:  # sidecars first: they give defaults to the files next to them
            if kinds[path] == "sidecar":
                reports.append(self.sidecar(path))
        for path in paths:
            if kinds[path] != "sidecar":
                reports.append(self.data_file(path, kinds[path]))
        order = {self.rel(p): i for i, p in enumerate(paths)}
        for report in reports:
            report.rejects.sort(key=lambda x: -1 if x["line"] is None else x["line"])
        return sorted(reports, key=lambda r: order[r.ctx.rel])

    def sidecar(self, path: Path) -> FileReport:
        raw = path.read_bytes()
        report = FileReport(self.context(path, "sidecar", raw))
        report.lines_total = raw.count(b"\n") + (0 if raw.endswith(b"\n") or not raw else 1)
        report.lines_ignored = report.lines_total
        try:
            text = raw.decode("utf-8-sig")
            document = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
            sidecar = read_sidecar(document, report.ctx.rel, self.models, self.gpus)
        except RowError as exc:
            report.reject(None, exc, raw.decode("utf-8", "replace"))
            return report
        except (UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
            report.reject(None, RowError("bad_sidecar", f"not valid YAML/JSON: {one_line(exc, 200)}"), None)
            return report
        name = path.name.lower()
        if name in _DIR_SIDECARS:
            self.dir_sidecars[path.parent] = sidecar
        else:
            stem = path.name[: -len(next(s for s in _FILE_SIDECAR_SUFFIXES if name.endswith(s)))]
            self.file_sidecars[path.parent / stem] = sidecar
        report.accepted = 1
        return report

    def sidecar_for(self, path: Path) -> Sidecar:
        sidecar = self.file_sidecars.get(path, Sidecar())
        for folder in [path.parent, *path.parent.parents]:
            if folder in self.dir_sidecars:
                sidecar = sidecar.over(self.dir_sidecars[folder])
            if folder == self.root:
                break
        return sidecar

    def data_file(self, path: Path, kind: str) -> FileReport:
        raw = path.read_bytes()
        ctx = self.context(path, kind, raw, self.sidecar_for(path))
        report = FileReport(ctx)
        if kind == "ignored":
            report.notes.append("not telemetry (README, hidden or documentation file)")
            return report
        digest = hashlib.sha256(raw).hexdigest()
        if not raw.strip():
            report.reject(None, RowError("empty", "empty file"), None)
            return report
        if digest in self.seen_files:
            report.reject(None, RowError("duplicate", f"same bytes as {self.seen_files[digest]}"), None)
            return report
        self.seen_files[digest] = ctx.rel
        if kind == "unknown":
            report.reject(None, RowError("unknown_file_type", f"unknown file type {path.suffix!r}"), None)
            return report
        if kind == "parquet":
            report.encoding = "parquet"
            parse_parquet(ctx, report, self.dedupe)
            return report
        try:
            text = decode_text(raw)
        except RowError as exc:
            report.reject(None, exc, None)
            return report
        report.encoding = text.encoding
        if kind == "sniff":
            if looks_like_prometheus(text.lines):
                kind = "prometheus"
            elif looks_like_vllm_log(text.lines):
                kind = "vllm_log"
            else:
                report.reject(
                    None,
                    RowError("unknown_file_type", "neither a Prometheus snapshot nor a vLLM log"),
                    "\n".join(text.lines[:3]),
                )
                return report
            ctx.kind = kind
        if not any(line.strip() for line in text.lines):
            report.reject(None, RowError("empty", "no text in the file"), None)
            return report
        parser: Any = {"prometheus": parse_prometheus, "vllm_log": parse_vllm_log, "csv": parse_csv}[kind]
        parser(ctx, text, report, self.dedupe)
        if report.rows_in == 0:
            reason = f"nothing capplan reads in {report.lines_total} line(s) of this {kind} file"
            report.reject(None, RowError("no_data", reason), "\n".join(text.lines[:3]))
        return report
