"""Read a telemetry drop folder into four frames: observations, samples, rejects, files.

Every file found is listed in `files`; every input row is accepted (it became a sample, or fed
an observation) or rejected (one row in `rejects` with file, line, reason code, reason and an
excerpt). Per file, `rows_in = accepted + rejected`; `check_reconciliation` proves it from the
frames themselves.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import polars as pl
import yaml

from capacity.spec import GpuSku
from telemetry.common import (
    MAX_SIDECAR_DEPTH,
    FileContext,
    FileReport,
    Sidecar,
    checked_deployment_id,
    mtime_of,
    nesting_problem,
    read_sidecar,
)
from telemetry.files import MAX_FILE_BYTES, MAX_SIDECAR_BYTES, FoundFile, read_bounded, walk
from telemetry.log_dialects import looks_like_startup_log, parse_startup_log
from telemetry.normalize import (
    GpuResolver,
    ModelResolver,
    RowError,
    catalog_model_ids,
    decode_text,
    one_line,
)
from telemetry.prometheus import Dedupe, looks_like_prometheus, parse_prometheus
from telemetry.schema import FILE_SCHEMA, OBSERVATION_SCHEMA, REJECT_SCHEMA, SAMPLE_SCHEMA, frame
from telemetry.tabular import parse_csv, parse_parquet

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
    max_file_bytes: int = MAX_FILE_BYTES,
) -> IngestResult:
    """Parse every file under `root` (default: `default_drop_dir()`); a missing folder is empty.

    `model_ids`: the registry ids model names resolve to (default: the bundled catalog);
    `gpu_skus`: the GPU catalog (default: the bundled one); `max_file_bytes`: larger files are
    rejected unread (`too_large`). Whatever goes wrong in one file rejects that file, with the
    reason, and the others are read (`_Ingest.isolated`).
    """
    base = Path(root) if root is not None else default_drop_dir()
    models = ModelResolver.from_ids(model_ids if model_ids is not None else catalog_model_ids())
    gpus = GpuResolver(tuple(gpu_skus)) if gpu_skus is not None else GpuResolver.from_catalog()
    reports = _Ingest(base, models, gpus, max_file_bytes).run(walk(base))
    return IngestResult(
        observations=_concat([r.frames[0] for r in reports], OBSERVATION_SCHEMA),
        samples=_concat([r.frames[1] for r in reports], SAMPLE_SCHEMA),
        rejects=_concat([r.frames[2] for r in reports], REJECT_SCHEMA),
        files=frame([r.manifest() for r in reports], FILE_SCHEMA),
    )


def _concat(frames: list[pl.DataFrame], schema: dict[str, Any]) -> pl.DataFrame:
    present = [f for f in frames if f.height]
    return pl.concat(present, how="vertical") if present else frame([], schema)


def _kind(path: PurePosixPath) -> str:
    name = path.name.lower()
    if name in _DIR_SIDECARS or name.endswith(_FILE_SIDECAR_SUFFIXES):
        return "sidecar"
    if name.startswith(".") or name.startswith("readme") or path.suffix.lower() in (".md", ".rst"):
        return "ignored"
    return _BY_SUFFIX.get(path.suffix.lower(), "sniff" if path.suffix.lower() in _SNIFF_SUFFIXES else "unknown")


class _Ingest:
    def __init__(self, root: Path, models: ModelResolver, gpus: GpuResolver, max_file_bytes: int) -> None:
        self.root = root
        self.models = models
        self.gpus = gpus
        self.max_file_bytes = max_file_bytes
        self.dedupe = Dedupe()
        self.dir_sidecars: dict[PurePosixPath, Sidecar] = {}
        self.file_sidecars: dict[PurePosixPath, Sidecar] = {}
        self.seen_files: dict[str, str] = {}

    def context(
        self, found: FoundFile, kind: str, raw: bytes, mtime: float | None, sidecar: Sidecar | None = None
    ) -> FileContext:
        rel = PurePosixPath(found.rel)
        default = rel.parent.name if rel.parent != PurePosixPath(".") else rel.name.split(".")[0]
        return FileContext(
            rel=found.rel,
            kind=kind,
            raw=raw,
            mtime=mtime_of(mtime) if mtime is not None else None,
            default_deployment_id=default or rel.name,
            sidecar=sidecar or Sidecar(),
            models=self.models,
            gpus=self.gpus,
        )

    def run(self, found: list[FoundFile]) -> list[FileReport]:
        reports: list[FileReport] = []
        kinds = {f.rel: _kind(PurePosixPath(f.rel)) for f in found}
        for entry in found:  # sidecars first: they give defaults to the files next to them
            if kinds[entry.rel] == "sidecar" and entry.problem is None:
                reports.append(self.isolated(entry, "sidecar"))
        for entry in found:
            if kinds[entry.rel] != "sidecar" or entry.problem is not None:
                reports.append(self.isolated(entry, kinds[entry.rel]))
        order = {f.rel: i for i, f in enumerate(found)}
        return sorted(reports, key=lambda r: order[r.ctx.rel])

    def isolated(self, entry: FoundFile, kind: str) -> FileReport:
        """One file read, whatever happens: a file that cannot be read, or whose reading fails in
        any way (a parser bug, a value no column holds, RecursionError, MemoryError...), becomes
        one whole-file reject naming the failure; the run goes on with the next file."""
        limit = MAX_SIDECAR_BYTES if kind == "sidecar" else self.max_file_bytes
        try:
            if entry.problem is not None:
                raise entry.problem
            raw, info = read_bounded(entry.path, limit)
        except RowError as exc:  # not read at all: no bytes, no hash
            report = FileReport(self.context(entry, kind, b"", None), unread=True)
            report.reject(None, exc, None)
            return report.finish()
        report = FileReport(self.context(entry, kind, raw, info.st_mtime))
        try:
            report = self.sidecar(entry, report) if kind == "sidecar" else self.data_file(entry, report)
            return report.finish()
        except RowError as exc:  # a whole-file reason raised from inside a parser
            error = exc
        except Exception as exc:
            error = RowError("parse_error", f"reading failed: {type(exc).__name__}: {one_line(exc, 160)}")
        report.reset()
        report.reject(None, error, None)
        return report.finish()

    def sidecar(self, entry: FoundFile, report: FileReport) -> FileReport:
        raw = report.ctx.raw
        report.lines_total = raw.count(b"\n") + (0 if raw.endswith(b"\n") or not raw else 1)
        report.lines_ignored = report.lines_total
        name = PurePosixPath(entry.rel).name.lower()
        try:
            text = raw.decode("utf-8-sig")
            depth = _bracket_depth(text)
            if depth > MAX_SIDECAR_DEPTH:
                raise RowError("bad_sidecar", f"nested deeper than {MAX_SIDECAR_DEPTH} levels ({depth} brackets)")
            document = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
            problem = nesting_problem(document)
            if problem:
                raise RowError("bad_sidecar", problem)
            sidecar = read_sidecar(document, report.ctx.rel, self.models, self.gpus)
        except RowError as exc:
            report.reject(None, exc, raw.decode("utf-8", "replace"))
            return report
        except (UnicodeDecodeError, ValueError, yaml.YAMLError, RecursionError) as exc:
            reason = "nested too deep" if isinstance(exc, RecursionError) else one_line(exc, 200)
            report.reject(None, RowError("bad_sidecar", f"not valid YAML/JSON: {reason}"), None)
            return report
        rel = PurePosixPath(entry.rel)
        if name in _DIR_SIDECARS:
            self.dir_sidecars[rel.parent] = sidecar
        else:
            stem = rel.name[: -len(next(s for s in _FILE_SIDECAR_SUFFIXES if name.endswith(s)))]
            self.file_sidecars[rel.parent / stem] = sidecar
        report.accepted = 1
        return report

    def sidecar_for(self, rel: PurePosixPath) -> Sidecar:
        sidecar = self.file_sidecars.get(rel, Sidecar())
        for folder in [rel.parent, *rel.parent.parents]:
            if folder in self.dir_sidecars:
                sidecar = sidecar.over(self.dir_sidecars[folder])
        return sidecar

    def data_file(self, entry: FoundFile, report: FileReport) -> FileReport:
        ctx = report.ctx
        ctx.sidecar = self.sidecar_for(PurePosixPath(entry.rel))
        checked_deployment_id(ctx.deployment_id)  # a folder or file name is an id too
        raw = ctx.raw
        kind = ctx.kind
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
            suffix = PurePosixPath(entry.rel).suffix
            report.reject(None, RowError("unknown_file_type", f"unknown file type {suffix!r}"), None)
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
            elif looks_like_startup_log(text.lines):
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
        parser: Any = {"prometheus": parse_prometheus, "vllm_log": parse_startup_log, "csv": parse_csv}[kind]
        parser(ctx, text, report, self.dedupe)
        if report.rows_in == 0:
            reason = f"nothing capplan reads in {report.lines_total} line(s) of this {kind} file"
            report.reject(None, RowError("no_data", reason), "\n".join(text.lines[:3]))
        return report


def _bracket_depth(text: str) -> int:
    """The deepest `[`/`{` nesting of a JSON / flow-YAML text, quoted strings skipped: checked
    before parsing, so a 100,000-deep document is refused without recursing into it."""
    depth = deepest = 0
    quote: str | None = None
    escaped = False
    for char in text:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\" and quote == '"':
                escaped = True
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest
