"""The telemetry sample store: metric samples kept as Hive-partitioned Parquet by UTC day.

    store = SampleStore.from_url("var/telemetry-store")          # a local folder
    store = SampleStore.from_url("s3://bucket/capplan/telemetry")  # S3 through fsspec / s3fs (extra `s3`)
    appended = store.append(result.samples, batch="nightly 2026-12-01")
    usage = store.usage(window_days=7)  # per deployment, the columns of summary.sample_usage

Layout: `<url>/samples/day=YYYY-MM-DD/part-<hash>.parquet`, the columns of `SAMPLE_SCHEMA` (the
day is the folder, not a column). Nothing in a folder is ever rewritten: an append writes one new
file per day its samples fall on, written under a hidden temporary name and renamed (local), or put
as one object (S3: an object appears whole or not at all). Readers list `day=*/part-*.parquet`
only, so a crashed writer's temporary file is never read; the next append removes it
(`remove_stale_temporaries`: its writer's process is gone, or it is hours old) and says so in a line.

Idempotent: a sample is its series (`SERIES_COLUMNS`) at a time `ts`. Before writing, the keys
the store already holds for the batch's days and time span are read back (Parquet statistics on
`ts` skip every file outside the span, so appending new scrapes reads only footers) and those
samples are not written again: `already_stored`. Re-ingesting a batch, or a Prometheus range that
overlaps the previous night's, adds nothing.

Hostile input: `append` takes any frame and checks what the store must hold faithfully, row by
row (the parsers check units and ranges before): a value of the wrong type (`bad_value`), no
deployment id, metric, time or value (`missing_field`), a NaN / infinite value (`not_finite`), a
time outside [2000, 2100) (`bad_timestamp`, it would make a nonsense partition), an id longer than
`MAX_ID_CHARS` (`too_large`), the same sample twice in the batch (`duplicate`). Each rejected row
is a `REJECT_SCHEMA` row with its reason; rows in = written + already_stored + rejected. Strings
are cleaned as everywhere (`schema.clean_text`: secrets redacted).

Reading: DuckDB's `read_parquet(..., hive_partitioning = true, union_by_name = true)` over the
listed files: local files natively, S3 through the fsspec filesystem registered with the DuckDB
connection (`register_filesystem`; DuckDB's httpfs extension is not needed, and is not available
offline). `union_by_name`: a column added to `SAMPLE_SCHEMA` later reads as null in older files;
new metrics are values of the `metric` column and need nothing at all. A file that DuckDB cannot
read (truncated, not Parquet) is left out of the read and named in `problems`, never deleted.
Symbolic links that lead out of a local store are not followed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import socket
import stat
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import fsspec
import polars as pl
from fsspec.implementations.local import LocalFileSystem

from models_registry.redact import redact
from telemetry.ingest import IngestResult
from telemetry.normalize import one_line
from telemetry.schema import REJECT_SCHEMA, SAMPLE_SCHEMA, UTC_US, clean_text
from telemetry.summary import sample_usage

STORE_ENV = "CAPPLAN_TELEMETRY_STORE"
SAMPLES_DIR = "samples"
SOURCE_KIND = "sample_store"
MAX_ID_CHARS = 512
DEFAULT_WINDOW_DAYS = 7
# One sample = one series at one time. Labels that are not the deployment's identity (model_id,
# gpu_sku: resolved names; file, line: where it was read) do not make a new series.
SERIES_COLUMNS = (
    "deployment_id",
    "metric",
    "source_metric",
    "model_name_raw",
    "engine_index",
    "gpu_index",
    "gpu_uuid",
    "hostname",
    "pod",
    "series",  # a speed metric's other labels (one histogram or counter series among several)
    "le",  # a histogram bucket's upper bound
)
KEY_COLUMNS = (*SERIES_COLUMNS, "ts")
_REQUIRED = ("deployment_id", "metric", "ts", "value")
_TS_MIN = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
_TS_MAX = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
_DAY_DIR = re.compile(r"^day=(\d{4}-\d{2}-\d{2})$")
_PART_FILE = re.compile(r"^part-[0-9a-f]{8,64}\.parquet$")
_USAGE_SQL = Path(__file__).resolve().parent / "sample_usage.sql"


class StoreError(RuntimeError):
    """The store cannot be opened or listed: one line, the URL redacted."""


@dataclass(frozen=True)
class AppendResult:
    """What one `append` did. rows_in = written + already_stored + rejected (`reconciles`)."""

    rows_in: int
    written: int
    already_stored: int
    rejects: pl.DataFrame  # REJECT_SCHEMA
    files: list[str]  # paths written, relative to the store
    days: list[str]
    cleaned: list[str] = field(default_factory=list)  # stale temporary files removed first, with why

    def cleaned_line(self) -> str | None:
        """One line naming the temporary files a killed writer had left and this append removed."""
        if not self.cleaned:
            return None
        shown = "; ".join(self.cleaned[:3]) + (f"; and {len(self.cleaned) - 3} more" if len(self.cleaned) > 3 else "")
        return one_line(f"removed {len(self.cleaned)} stale temporary file(s) left by a killed writer: {shown}", 400)

    @property
    def rejected(self) -> int:
        return self.rejects.height

    @property
    def accepted(self) -> int:
        """Samples the store now holds from this batch: written now, or already there."""
        return self.written + self.already_stored

    @property
    def reconciles(self) -> bool:
        return self.rows_in == self.written + self.already_stored + self.rejected

    def summary(self) -> dict[str, int]:
        return {
            "store_rows_in": self.rows_in,
            "store_written": self.written,
            "store_already_stored": self.already_stored,
            "store_rejected": self.rejected,
            "store_files_written": len(self.files),
            "store_temporaries_removed": len(self.cleaned),
        }


@dataclass
class SampleStore:
    """A sample store at a URL: a local folder, or any fsspec URL (`s3://bucket/prefix`)."""

    url: str
    fs: fsspec.AbstractFileSystem
    root: str  # the store's path inside `fs` (no protocol)
    problems: list[str] = field(default_factory=list)  # files left out of the last read, with why

    @classmethod
    def from_url(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> SampleStore:
        """A store at `url`; `storage_options` go to fsspec (for S3: `client_kwargs.endpoint_url`,
        else s3fs reads the usual AWS variables). Credentials never appear in `url` as shown."""
        text = url.strip()
        if not text:
            raise StoreError(f"{STORE_ENV} is empty")
        try:
            # a fresh filesystem per store: fsspec's instance cache would hand back one built from an
            # earlier environment (a rotated credential, another endpoint) for the same arguments
            fs, root = fsspec.core.url_to_fs(text, skip_instance_cache=True, **dict(storage_options or {}))
        except (ImportError, ValueError) as exc:
            hint = " (install the extra: pip install -e '.[s3]')" if isinstance(exc, ImportError) else ""
            raise StoreError(f"telemetry store {redact(one_line(text, 200))!r}: {one_line(exc, 160)}{hint}") from None
        return cls(text, fs, str(root).rstrip("/"))

    # --- paths -------------------------------------------------------------------------------

    @property
    def local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def display_url(self) -> str:
        return redact(one_line(self.url, 200))

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _uri(self, path: str) -> str:
        """A path DuckDB opens: local as is, else with the filesystem's protocol (registered)."""
        if self.local:
            return path
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        return f"{protocol}://{path}"

    def days(self) -> list[str]:
        """The days the store holds (`day=YYYY-MM-DD` folders), oldest first; anything else ignored."""
        base = self._path(SAMPLES_DIR)
        try:
            if not self.fs.exists(base):
                return []
            entries = self.fs.ls(base, detail=False)
        except OSError as exc:
            raise StoreError(f"telemetry store {self.display_url()}: cannot list: {one_line(exc, 160)}") from None
        days = []
        for entry in entries:
            match = _DAY_DIR.match(str(entry).rstrip("/").rsplit("/", 1)[-1])
            if match and _valid_day(match.group(1)):
                days.append(match.group(1))
        return sorted(set(days))

    def files(self, days: list[str] | None = None) -> list[str]:
        """Parquet files of the given days (default all), as fsspec paths, sorted."""
        found: list[str] = []
        for day in self.days() if days is None else days:
            folder = self._path(SAMPLES_DIR, f"day={day}")
            try:
                entries = self.fs.ls(folder, detail=False) if self.fs.exists(folder) else []
            except OSError as exc:
                raise StoreError(
                    f"telemetry store {self.display_url()}: cannot list {day}: {one_line(exc, 120)}"
                ) from None
            for entry in entries:
                path = str(entry).rstrip("/")
                if _PART_FILE.match(path.rsplit("/", 1)[-1]) and self._inside(path):
                    found.append(path)
        return sorted(found)

    def _inside(self, path: str) -> bool:
        """Local stores: a link whose target is outside the store is not read (a problem instead)."""
        if not self.local:
            return True
        target = Path(path)
        try:
            resolved = target.resolve(strict=True)
            inside = resolved.is_relative_to(Path(self.root).resolve()) and resolved.is_file()
        except OSError:
            inside = False
        if not inside:
            self.problems.append(f"{self._rel(path)}: a link out of the store, or not a file: not read")
        return inside

    def _rel(self, path: str) -> str:
        return path[len(self.root) + 1 :] if path.startswith(self.root + "/") else path

    # --- reading -----------------------------------------------------------------------------

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection that can read the store's files."""
        con = duckdb.connect()
        con.execute("set enable_progress_bar = false")  # no bar in logs and step output
        if not self.local:
            con.register_filesystem(self.fs)
        return con

    def relation(
        self, con: duckdb.DuckDBPyConnection, days: list[str] | None = None, name: str = "samples"
    ) -> duckdb.DuckDBPyRelation:
        """The samples of `days` (default all) as the temporary view `name` with SAMPLE_SCHEMA's
        columns (zero rows when there are none). Unreadable files are left out, each named in
        `problems`. A view written in SQL, not a registered Python relation: DuckDB then streams
        the Parquet files through the query (a registered relation held every row: 2.6 GiB at 10M)."""
        files = self._readable(con, self.files(days))
        columns = ", ".join(_ident(c) for c in SAMPLE_SCHEMA)
        if files:  # a view cannot bind parameters: the paths as escaped literals
            listed = ", ".join(_literal(self._uri(f)) for f in files)
            source = f"read_parquet([{listed}], hive_partitioning = true, union_by_name = true)"
        else:
            source = f"{_empty_values()} where false"
        con.execute(f"create or replace temporary view {_ident(name)} as select {columns} from {source}")
        return con.table(name)

    def _readable(self, con: duckdb.DuckDBPyConnection, files: list[str]) -> list[str]:
        if not files:
            return []
        try:
            con.execute("select count(*) from parquet_metadata($files)", {"files": [self._uri(f) for f in files]})
            return files
        except duckdb.Error:
            pass  # find which: one footer each (only on this unhappy path)
        good = []
        for path in files:
            try:
                con.execute("select count(*) from parquet_schema($f)", {"f": self._uri(path)})
                good.append(path)
            except duckdb.Error as exc:
                self.problems.append(f"{self._rel(path)}: not readable as Parquet ({one_line(exc, 120)}): not read")
        return good

    def window(self, window_days: int) -> list[str]:
        """The last `window_days` days the store holds, counted back from its newest day."""
        days = self.days()
        if not days or window_days < 1:
            return []
        newest = dt.date.fromisoformat(days[-1])
        first = (newest - dt.timedelta(days=window_days - 1)).isoformat()
        return [d for d in days if d >= first]

    def usage(self, window_days: int = DEFAULT_WINDOW_DAYS) -> pl.DataFrame:
        """Per deployment over the window: the columns `summary.sample_usage` computes from a
        frame, computed by DuckDB over the Parquet files (`sample_usage.sql`), never loading the
        samples into Python."""
        con = self.connect()
        try:
            self.relation(con, self.window(window_days), "samples")
            usage = con.sql(_USAGE_SQL.read_text(encoding="utf-8")).pl()
        finally:
            con.close()
        schema = sample_usage(pl.LazyFrame(schema=SAMPLE_SCHEMA)).collect_schema()
        return usage.select([pl.col(name).cast(dtype) for name, dtype in schema.items()])

    # --- writing -----------------------------------------------------------------------------

    def append(self, samples: pl.DataFrame, batch: str = "batch") -> AppendResult:
        """Write the samples the store does not hold yet; see the module docstring."""
        cleaned = self.remove_stale_temporaries()
        checked, rejects = check_samples(samples, batch)
        unique, duplicates = _first_of_each(checked, batch)
        rejects = pl.concat([rejects, duplicates], how="vertical") if duplicates.height else rejects
        fresh = unique.height
        files: list[str] = []
        days: list[str] = []
        already = 0
        if unique.height:
            with_day = unique.with_columns(pl.col("ts").dt.date().cast(pl.String).alias("_day"))
            for (day,), part in with_day.partition_by("_day", as_dict=True, maintain_order=True).items():
                part = part.drop("_day")
                new = self._not_stored(part, str(day))
                already += part.height - new.height
                if new.height:
                    files.append(self._write(new, str(day)))
                    days.append(str(day))
        written = fresh - already
        return AppendResult(
            rows_in=samples.height,
            written=written,
            already_stored=already,
            rejects=rejects,
            files=files,
            days=days,
            cleaned=cleaned,
        )

    def _not_stored(self, part: pl.DataFrame, day: str) -> pl.DataFrame:
        """`part` less the samples the store holds already (keys read for this day and time span)."""
        if day not in self.days():
            return part
        con = self.connect()
        try:
            files = self._readable(con, self.files([day]))
            if not files:
                return part
            keys = ", ".join(_ident(c) for c in KEY_COLUMNS)
            existing = con.execute(  # Parquet statistics on ts skip every file outside [lo, hi]
                f"select {keys} from read_parquet($files, hive_partitioning = true, union_by_name = true) "
                "where ts between $lo and $hi",
                {"files": [self._uri(f) for f in files], "lo": part["ts"].min(), "hi": part["ts"].max()},
            ).pl()
        finally:
            con.close()
        if not existing.height:
            return part
        existing = existing.select([pl.col(c).cast(SAMPLE_SCHEMA[c]) for c in KEY_COLUMNS])
        return part.join(existing, on=list(KEY_COLUMNS), how="anti", nulls_equal=True)

    def remove_stale_temporaries(self, now: float | None = None) -> list[str]:
        """Remove the `.part-*.tmp` files a killed writer left in the day folders (local stores;
        an S3 put leaves nothing behind); returns one "path (why)" per file removed.

        No lock guards the store, so staleness is decided from the name and the age: a temporary
        is named `.part-<host>-<pid>-<id>.tmp`; on this host it is stale when that process is gone
        (`os.kill(pid, 0)`), and it is kept while the process lives, up to STALE_TEMPORARY_SECONDS
        untouched (a writer writes one file in seconds; older, the pid belongs to another program).
        A name from another host, or without a pid (written before this rule), is stale once
        untouched for STALE_TEMPORARY_SECONDS. Links and anything that is not a regular file are
        left alone."""
        if not self.local:
            return []
        removed: list[str] = []
        clock = time.time() if now is None else now
        for day in self.days():
            folder = self._path(SAMPLES_DIR, f"day={day}")
            try:
                with os.scandir(folder) as entries:
                    names = [e.name for e in entries if _TEMPORARY.match(e.name)]
            except OSError:
                continue
            for name in names:
                why = _stale(f"{folder}/{name}", name, clock)
                if why is None:
                    continue
                try:
                    os.unlink(f"{folder}/{name}")
                except OSError:
                    continue
                removed.append(f"day={day}/{name} ({why})")
        return removed

    def _write(self, part: pl.DataFrame, day: str) -> str:
        """One new file in the day's folder, named by its content; returns its path in the store."""
        part = part.sort(["deployment_id", "metric", "ts"], nulls_last=True)
        digest = hashlib.sha256(part.select(KEY_COLUMNS).hash_rows(seed=0).to_numpy().tobytes()).hexdigest()[:32]
        folder = self._path(SAMPLES_DIR, f"day={day}")
        final = f"{folder}/part-{digest}.parquet"
        self.fs.makedirs(folder, exist_ok=True)
        if self.local:
            temporary = f"{folder}/.part-{_HOST}-{os.getpid()}-{uuid.uuid4().hex}.tmp"  # see remove_stale_temporaries
            try:
                part.write_parquet(temporary, compression="zstd", statistics=True)
                os.replace(temporary, final)
            finally:
                if os.path.exists(temporary):
                    os.unlink(temporary)
        else:
            with self.fs.open(final, "wb") as out:
                part.write_parquet(out, compression="zstd", statistics=True)
        return self._rel(final)


# --- temporaries ---------------------------------------------------------------------------------

STALE_TEMPORARY_SECONDS = 6 * 3600
_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:64] or "host"
_TEMPORARY = re.compile(r"^\.part-(?:(?P<host>[A-Za-z0-9_.]+)-(?P<pid>\d{1,10})-)?[0-9a-f]{32}\.tmp$")


def _stale(path: str, name: str, now: float) -> str | None:
    """Why the temporary file at `path` is stale, or None while a writer may still hold it."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    age = now - info.st_mtime
    match = _TEMPORARY.match(name)
    if match is not None and match.group("host") == _HOST and match.group("pid"):
        pid = int(match.group("pid"))
        alive = _alive(pid)
        if alive is False:
            return f"its writer, process {pid}, is gone"
        if alive and age <= STALE_TEMPORARY_SECONDS:
            return None  # a live writer's
        if alive:  # no writer holds a file for hours: the pid was reused by another program
            return f"untouched for {age / 3600:.0f} h although process {pid} runs: a reused pid, not its writer"
    if age > STALE_TEMPORARY_SECONDS:
        return f"untouched for {age / 3600:.0f} h, no live writer on this host"
    return None


def _alive(pid: int) -> bool | None:
    """Whether process `pid` runs on this host (None: not a pid this host can have; the age decides)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0: nothing is sent, only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    except (OverflowError, ValueError, OSError):
        return None
    return True


# --- checks --------------------------------------------------------------------------------------


def check_samples(samples: pl.DataFrame, batch: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rows the store can hold, with exactly SAMPLE_SCHEMA; REJECT_SCHEMA rows for the others)."""
    incoming = samples.with_row_index("_capplan_row")
    casts = []
    failed = []
    for name, dtype in SAMPLE_SCHEMA.items():
        if name not in incoming.columns:
            casts.append(pl.lit(None, dtype).alias(name))
            continue
        source = pl.col(name)
        given = incoming.schema[name]
        if dtype == UTC_US and isinstance(given, pl.Datetime):  # naive = UTC, as the parsers read it
            source = source.dt.convert_time_zone("UTC") if given.time_zone else source.dt.replace_time_zone("UTC")
        elif dtype == UTC_US and given == pl.String:
            source = source.str.to_datetime(time_zone="UTC", strict=False)
        cast = source.cast(dtype, strict=False)
        casts.append(cast.alias(name))
        failed.append(pl.when(pl.col(name).is_not_null() & cast.is_null()).then(pl.lit(name)))
    typed = incoming.select(
        "_capplan_row",
        *casts,
        pl.coalesce(failed).alias("_bad_column") if failed else pl.lit(None, pl.String).alias("_bad_column"),
    )
    missing = pl.coalesce([pl.when(pl.col(c).is_null()).then(pl.lit(c)) for c in _REQUIRED])
    too_long = pl.coalesce(
        [pl.when(pl.col(c).str.len_chars() > MAX_ID_CHARS).then(pl.lit(c)) for c in ("deployment_id", "metric")]
    )
    code = (
        pl.when(pl.col("_bad_column").is_not_null())
        .then(pl.lit("bad_value"))
        .when(missing.is_not_null())
        .then(pl.lit("missing_field"))
        .when(~pl.col("value").is_finite())
        .then(pl.lit("not_finite"))
        .when((pl.col("ts") < _TS_MIN) | (pl.col("ts") >= _TS_MAX))
        .then(pl.lit("bad_timestamp"))
        .when(too_long.is_not_null())
        .then(pl.lit("too_large"))
    )
    reason = (
        pl.when(pl.col("_bad_column").is_not_null())
        .then(pl.format("{} is not a {}", pl.col("_bad_column"), pl.lit("value of its type")))
        .when(missing.is_not_null())
        .then(pl.format("no {}", missing))
        .when(~pl.col("value").is_finite())
        .then(pl.format("value {} is not finite", pl.col("value")))
        .when((pl.col("ts") < _TS_MIN) | (pl.col("ts") >= _TS_MAX))
        .then(pl.format("time {} is outside 2000-2100", pl.col("ts")))
        .when(too_long.is_not_null())
        .then(pl.format("{} longer than {} characters", too_long, pl.lit(MAX_ID_CHARS)))
    )
    judged = typed.with_columns(code.alias("_code"))
    kept = judged.filter(pl.col("_code").is_null()).drop("_code", "_bad_column")
    if kept.height == judged.height:  # the common case: nothing to explain
        return _cleaned(kept), pl.DataFrame(schema=REJECT_SCHEMA)
    rejected = judged.filter(pl.col("_code").is_not_null()).with_columns(reason.alias("_reason"))
    excerpts = incoming.join(rejected.select("_capplan_row"), on="_capplan_row", how="semi").select(
        "_capplan_row", _excerpt(incoming)
    )
    rejected = rejected.join(excerpts, on="_capplan_row", how="left")
    return _cleaned(kept), _rejects(rejected, batch)


def _excerpt(incoming: pl.DataFrame) -> pl.Expr:
    """The row as text (its scalar columns), for `raw_excerpt`."""
    scalar = [
        c
        for c, t in incoming.schema.items()
        if c != "_capplan_row" and (t.is_numeric() or t.is_temporal() or t in (pl.String, pl.Boolean))
    ]
    if not scalar:
        return pl.lit("").alias("_excerpt")
    text = [pl.col(c).cast(pl.String).fill_null("") for c in scalar]
    return pl.concat_str(text, separator=" ").str.slice(0, 200).alias("_excerpt")


def _first_of_each(checked: pl.DataFrame, batch: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The first row of each sample key (without `_row`), and `duplicate` rejects for the repeats."""
    if not checked.height:
        return checked.drop("_capplan_row"), pl.DataFrame(schema=REJECT_SCHEMA)
    numbered = checked
    repeat = ~numbered.select(pl.struct(*KEY_COLUMNS).is_first_distinct().alias("_first"))["_first"]
    if not repeat.any():
        return checked.drop("_capplan_row"), pl.DataFrame(schema=REJECT_SCHEMA)
    # rechunked first: Polars 2.1 panics in `format` on the string views of a filtered concatenation
    dupes = (
        numbered.filter(repeat)
        .rechunk()
        .with_columns(
            pl.lit("duplicate").alias("_code"),
            pl.format("duplicate sample: {} at {} earlier in the batch", pl.col("metric"), pl.col("ts")).alias(
                "_reason"
            ),
            pl.format("{} {} {}", pl.col("deployment_id"), pl.col("metric"), pl.col("value"))
            .str.slice(0, 200)
            .alias("_excerpt"),
        )
    )
    return numbered.filter(~repeat).drop("_capplan_row"), _rejects(dupes, batch)


def _rejects(rows: pl.DataFrame, batch: str) -> pl.DataFrame:
    if not rows.height:
        return pl.DataFrame(schema=REJECT_SCHEMA)
    file = pl.col("file").fill_null(pl.lit(batch)) if "file" in rows.columns else pl.lit(batch)
    line = pl.col("line").cast(pl.Int64, strict=False) if "line" in rows.columns else pl.lit(None, pl.Int64)
    line = pl.coalesce(line, pl.col("_capplan_row").cast(pl.Int64) + 1)  # no line: the row in the batch, 1-based
    deployment = (
        pl.col("deployment_id").cast(pl.String, strict=False) if "deployment_id" in rows.columns else pl.lit(None)
    )
    out = rows.select(
        file.cast(pl.String, strict=False).alias("file"),
        line.alias("line"),
        pl.lit(SOURCE_KIND).alias("source_kind"),
        deployment.alias("deployment_id"),
        pl.col("_code").alias("reason_code"),
        pl.col("_reason").alias("reason"),
        pl.col("_excerpt").alias("raw_excerpt"),
    ).cast(REJECT_SCHEMA)  # type: ignore[arg-type]
    return _cleaned(out)


def _cleaned(frame: pl.DataFrame) -> pl.DataFrame:
    """Every String column through `clean_text` (secrets redacted), once per distinct value."""
    exprs = []
    for name, dtype in frame.schema.items():
        if dtype != pl.String:
            continue
        values = frame[name].drop_nulls().unique().to_list()
        mapping = {v: clean_text(v) for v in values}
        if any(k != v for k, v in mapping.items()):
            exprs.append(pl.col(name).replace_strict(mapping, default=None, return_dtype=pl.String))
    return frame.with_columns(exprs) if exprs else frame


def _valid_day(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _literal(text: str) -> str:
    """A SQL string literal (only for file paths the store listed itself)."""
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_DUCK_TYPES = {pl.String: "varchar", pl.Int32: "integer", pl.Int64: "bigint", pl.Float64: "double"}


def _empty_values() -> str:
    """A one-row VALUES list with SAMPLE_SCHEMA's columns and types (filtered to zero rows)."""
    casts = ", ".join(
        f"null::{'timestamptz' if dtype == UTC_US else _DUCK_TYPES[dtype]}" for dtype in SAMPLE_SCHEMA.values()
    )
    names = ", ".join(_ident(name) for name in SAMPLE_SCHEMA)
    return f"(values ({casts})) as t({names})"


def store_from_env(storage_options: Mapping[str, Any] | None = None) -> SampleStore | None:
    """`CAPPLAN_TELEMETRY_STORE` as a store, or None when unset."""
    url = os.environ.get(STORE_ENV, "").strip()
    return SampleStore.from_url(url, storage_options) if url else None


def with_store_rejects(result: IngestResult, appended: AppendResult) -> IngestResult:
    """`result` with the samples the store refused moved to `rejects` (matched by file and line)
    and each file's counts moved with them, so rows in = accepted + rejected still holds.
    The parsers check more than the store does, so this is normally `result` unchanged."""
    refused = appended.rejects
    if not refused.height:
        return result
    keys = refused.select("file", "line").unique()
    samples = result.samples.join(keys, on=["file", "line"], how="anti", nulls_equal=True)
    moved = result.samples.join(keys, on=["file", "line"], how="semi", nulls_equal=True)
    per_file = moved.group_by("file").len("n")
    files = (
        result.files.join(per_file, on="file", how="left")
        .with_columns(pl.col("n").fill_null(0))
        .with_columns(
            (pl.col("accepted") - pl.col("n")).alias("accepted"),
            (pl.col("rejected") + pl.col("n")).alias("rejected"),
            (pl.col("samples") - pl.col("n")).alias("samples"),
        )
        .drop("n")
    )
    rejects = refused.join(moved.select("file", "line"), on=["file", "line"], how="semi", nulls_equal=True)
    return IngestResult(
        observations=result.observations,
        samples=samples,
        rejects=pl.concat([result.rejects, rejects], how="vertical"),
        files=files,
    )
