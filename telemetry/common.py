"""What every parser shares: the file being read, its sidecar defaults, and the tally of rows."""

from __future__ import annotations

import datetime as dt
import hashlib
import unicodedata
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from telemetry.normalize import (
    EARLIEST,
    LATEST,
    MAX_LINE_CHARS,
    DecodedText,
    GpuResolver,
    ModelResolver,
    RowError,
    excerpt,
    line_too_long,
    null_text,
    one_line,
    parse_int,
    parse_timestamp,
)
from telemetry.observation import PLAUSIBLE_MAX
from telemetry.schema import OBSERVATION_SCHEMA, REJECT_SCHEMA, SAMPLE_SCHEMA, frame

MAX_SIDECAR_DEPTH = 16  # a sidecar is a flat mapping; 16 levels is already nonsense

SIDECAR_KEYS = frozenset(
    {"deployment_id", "model", "gpu", "tp", "pp", "engine", "engine_version", "observed_at", "scraped_at", "notes"}
)


MAX_DEPLOYMENT_ID_CHARS = 200
# Control, format (bidi overrides and marks, zero-width), private-use, unassigned, line and
# paragraph separators: an id holding one would not read as what it is. A lone surrogate (a file
# name that is not UTF-8) is kept: `schema.clean_text` shows it as a visible `\udcXX` escape.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn", "Zl", "Zp"})


def deployment_problem(value: str) -> str | None:
    """Why `value` cannot be a deployment id (None when it can): longer than
    MAX_DEPLOYMENT_ID_CHARS, or holding a control / format / separator character."""
    if len(value) > MAX_DEPLOYMENT_ID_CHARS:
        return f"a deployment id of {len(value):,} characters, more than {MAX_DEPLOYMENT_ID_CHARS}"
    hidden = next((c for c in value if unicodedata.category(c) in _HIDDEN_CATEGORIES), None)
    if hidden is not None:
        name = unicodedata.name(hidden, f"U+{ord(hidden):04X}")
        return f"a deployment id holding a control or invisible character ({name}, U+{ord(hidden):04X})"
    return None


def checked_deployment_id(value: str | None) -> str | None:
    """`value` when it can be a deployment id (or is None); RowError('bad_value') saying why not.
    Every way an id comes in (a sidecar, a folder name, a CSV column, a log directive, a label)
    passes this one check."""
    problem = None if value is None else deployment_problem(value)
    if problem is not None:
        raise RowError("bad_value", problem)
    return value

@dataclass(frozen=True, slots=True)
class Sidecar:
    """Defaults a person wrote next to telemetry: `deployment.yaml` (a folder) or `<file>.meta.yaml`."""

    path: str | None = None
    deployment_id: str | None = None
    model_id: str | None = None
    model_raw: str | None = None
    gpu_sku: str | None = None
    gpu_raw: str | None = None
    tp: int | None = None
    pp: int | None = None
    engine: str | None = None
    engine_version: str | None = None
    observed_at: dt.datetime | None = None

    def over(self, base: Sidecar) -> Sidecar:
        """This sidecar's values, falling back to `base` where unset."""
        values = {
            name: getattr(self, name) if getattr(self, name) is not None else getattr(base, name)
            for name in self.__slots__
        }
        return Sidecar(**values)


def read_sidecar(document: object, path: str, models: ModelResolver, gpus: GpuResolver) -> Sidecar:
    """A parsed YAML/JSON document -> a Sidecar; RowError (bad_sidecar, unknown_model, unknown_gpu)."""
    if not isinstance(document, dict):
        raise RowError("bad_sidecar", f"sidecar must be a mapping, got {type(document).__name__}")
    unknown = sorted(str(k) for k in document if k not in SIDECAR_KEYS)
    if unknown:
        raise RowError(
            "bad_sidecar", f"unknown sidecar key(s) {', '.join(unknown)}; known: {', '.join(sorted(SIDECAR_KEYS))}"
        )
    model_raw = null_text(document.get("model"))
    gpu_raw = null_text(document.get("gpu"))
    when = document.get("observed_at", document.get("scraped_at"))
    tp = document.get("tp")
    pp = document.get("pp")
    for name, value in (("tp", tp), ("pp", pp)):
        if value is not None and not isinstance(value, int | float | str):
            raise RowError("bad_sidecar", f"sidecar {name} must be a number, got {type(value).__name__}")
    sidecar = Sidecar(
        path=path,
        deployment_id=checked_deployment_id(null_text(document.get("deployment_id"))),
        model_id=models.resolve(model_raw) if model_raw else None,
        model_raw=model_raw,
        gpu_sku=gpus.resolve(gpu_raw).id if gpu_raw else None,
        gpu_raw=gpu_raw,
        tp=parse_int(str(tp), "tp") if tp is not None else None,
        pp=parse_int(str(pp), "pp") if pp is not None else None,
        engine=null_text(document.get("engine")),
        engine_version=null_text(document.get("engine_version")),
        observed_at=parse_timestamp(when, "observed_at") if when is not None else None,
    )
    for name, value in (("tp", sidecar.tp), ("pp", sidecar.pp)):
        if value is not None and not 1 <= value <= PLAUSIBLE_MAX[name]:
            raise RowError("out_of_range", f"sidecar {name} must be in 1..{PLAUSIBLE_MAX[name]}, got {value:,}")
    return sidecar


def nesting_problem(document: object, max_depth: int = MAX_SIDECAR_DEPTH, max_nodes: int = 10_000) -> str | None:
    """Why a parsed sidecar is too deep or too big to use (None when it is not). Iterative, and it
    counts YAML aliases at every use, so a 'billion laughs' document stops at `max_nodes`."""
    stack: list[tuple[object, int]] = [(document, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            return f"more than {max_nodes:,} values"
        if isinstance(node, dict | list | tuple):
            if depth > max_depth:
                return f"nested deeper than {max_depth} levels"
            children = [*node.keys(), *node.values()] if isinstance(node, dict) else list(node)
            stack.extend((child, depth + 1) for child in children)
    return None


@dataclass
class FileContext:
    """One input file: where it is, what it is, and the defaults that apply to its rows."""

    rel: str  # path relative to the drop folder, POSIX separators
    kind: str
    raw: bytes
    mtime: dt.datetime | None  # None: the file's mtime is not a time capplan can hold (see mtime_of)
    default_deployment_id: str
    sidecar: Sidecar
    models: ModelResolver
    gpus: GpuResolver

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def deployment_id(self) -> str:
        return self.sidecar.deployment_id or self.default_deployment_id

    def default_time(self) -> tuple[dt.datetime, str]:
        """The sidecar's time, else the file's mtime; RowError('bad_timestamp') when neither is usable."""
        if self.sidecar.observed_at is not None:
            return self.sidecar.observed_at, "sidecar"
        if self.mtime is None:
            raise RowError(
                "bad_timestamp",
                "the file's modification time is outside 2000-2100 and nothing else gives a time "
                "(add observed_at to a sidecar)",
            )
        return self.mtime, "mtime"


def mtime_of(seconds: float) -> dt.datetime | None:
    """A file's mtime as UTC, or None when it is outside 2000-2100 (touch -d 0001-01-01 ...)."""
    if not EARLIEST.timestamp() <= seconds < LATEST.timestamp():
        return None
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


@dataclass
class FileReport:
    """Everything one file produced, and how its lines were accounted for."""

    ctx: FileContext
    unread: bool = False  # rejected before its bytes were read (a link out, a FIFO, too large)
    encoding: str | None = None
    lines_total: int = 0
    lines_ignored: int = 0
    accepted: int = 0
    observations: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    frames: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] = field(default=(), init=False)  # type: ignore[assignment]

    @property
    def rejected(self) -> int:
        return len(self.rejects)

    @property
    def rows_in(self) -> int:
        return self.accepted + self.rejected

    def reject(
        self,
        line: int | None,
        error: RowError,
        raw: str | None,
        deployment_id: str | None = None,
    ) -> None:
        self.rejects.append(
            {
                "file": self.ctx.rel,
                "line": line,
                "source_kind": self.ctx.kind,
                # an id that cannot be one (a hidden character, too long) is not kept, here either
                "deployment_id": None if deployment_id is None or deployment_problem(deployment_id) else deployment_id,
                "reason_code": error.code,
                "reason": error.reason,
                "raw_excerpt": excerpt(raw),
            }
        )

    def rejects_unreadable(
        self, text: DecodedText, number: int, raw: str, length: int, deployment_id: str | None
    ) -> bool:
        """Reject line `number` where it was not UTF-8 or is longer than MAX_LINE_CHARS (`length`: as its
        format measures it); True when it did, and the reader moves on to the next line."""
        if number in text.bad_lines:
            self.reject(number, RowError("encoding", "line is not UTF-8"), raw, deployment_id)
            return True
        if length > MAX_LINE_CHARS:
            self.reject(number, line_too_long(length), raw, deployment_id)
            return True
        return False

    def reset(self) -> None:
        """Forget every row read so far (the file is about to be rejected as a whole)."""
        self.accepted = 0
        self.lines_ignored = 0
        self.observations.clear()
        self.samples.clear()
        self.rejects.clear()

    def finish(self) -> FileReport:
        """Build this file's frames (observations, samples, rejects) now, so that a value no typed
        column can hold rejects this file (`parse_error`, naming the column) and not the run."""
        self.rejects.sort(key=lambda x: -1 if x["line"] is None else x["line"])
        try:
            self.frames = self._frames()
        except Exception as exc:
            self.reset()
            error = RowError(
                "parse_error", f"a value does not fit its column: {type(exc).__name__}: {one_line(exc, 160)}"
            )
            self.reject(None, error, None)
            self.frames = self._frames()
        return self

    def _frames(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        return (
            frame(self.observations, OBSERVATION_SCHEMA),
            frame(self.samples, SAMPLE_SCHEMA),
            frame(self.rejects, REJECT_SCHEMA),
        )

    def manifest(self) -> dict[str, Any]:
        return {
            "file": self.ctx.rel,
            "source_kind": self.ctx.kind,
            "size_bytes": len(self.ctx.raw),
            "sha256": None if self.unread else self.ctx.sha256,
            "encoding": self.encoding,
            "deployment_id": self.ctx.deployment_id,
            "lines_total": self.lines_total,
            "lines_ignored": self.lines_ignored,
            "rows_in": self.rows_in,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "observations": len(self.observations),
            "samples": len(self.samples),
            "notes": "; ".join(self.notes) or None,
        }


def observation_id(rel: str, line: int | None, extra: str = "") -> str:
    return hashlib.sha1(f"{rel}:{line}:{extra}".encode()).hexdigest()[:16]
