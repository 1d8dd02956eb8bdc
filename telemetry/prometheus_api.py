"""Telemetry from a Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics).

`ingest_prometheus(url)` asks the API for every metric capplan reads: a range query
(`/api/v1/query_range`, the last `lookback_s` at `step_s`) per vLLM / SGLang / DCGM gauge and counter
and per series of each latency histogram (`_bucket`, `_sum`, `_count`), and
an instant query (`/api/v1/query`) for `vllm:cache_config_info` (the engine's current KV pool: one
observation per deployment, not one per step). `lookback_s = 0` makes every query instant.

Same rows as the files: each query's result is written back as Prometheus text lines carrying
their timestamps (`name{labels} value ts_ms`) and read by the drop folder's own parser
(`prometheus.parse_prometheus`), so one series gives the same samples, observations, rejects and
reasons whether it was scraped into a file or queried here. Each query is one "file" of the
`files` frame (named by the redacted URL and the query), each point of a series one row: rows in
= accepted + rejected, checked by the same `check_reconciliation`. Deployment ids come from the
one label `deployment_label` names (default `deployment`; add it with relabelling): a series
without it rejects its points (`missing_field`). Answers are read series by series into columns
(`prometheus_answer.read_answer`: points checked one by one, ids checked, labels that cannot
change the id) and parsed a batch of series at a time; the whole ingest keeps at most
`max_points` points and takes at most `budget_s` seconds (what was read whole is kept, the rest
is one `too_large` row saying why, the other queries are not sent).

Failures are rows, never exceptions: an HTTP error, a refused connection, a timeout, a body above
`max_response_bytes` or JSON that is not a Prometheus answer rejects that query as one row with a
one-line reason naming the redacted URL (`unreadable`, `too_large`, `malformed`); after a
connection-level failure the remaining queries are not sent (each rejected, saying why), so a
dead server costs one timeout, not eight.

Why plain `urllib.request` and not a client library: no new dependency (`prometheus-api-client`
is not installed and pulls pandas/matplotlib), every read bounded (a size cap checked while
reading, a timeout per socket operation and a deadline on the whole body, no compressed
responses asked for), and credentials handled here: basic auth written in the URL
(`https://user:pass@prom/`, the password anything up to the URL's last `@`) is sent as an
`Authorization` header that is not forwarded on redirects (followed only within http(s), never
down from https, at most MAX_REDIRECTS), and only the redacted URL (`redact.redact`) is ever
shown or stored. Proxies follow the usual `http_proxy` / `no_proxy` variables.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import itertools
import json
import math
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPException, HTTPResponse, HTTPSConnection
from typing import Any

import polars as pl

from capacity.spec import GpuSku
from models_registry.planning import Catalog
from models_registry.redact import redact, redact_url
from telemetry.common import FileContext, FileReport, Sidecar
from telemetry.drop_folder import SAMPLE, DropFolder, ingest_frames
from telemetry.ingest import IngestResult, _concat
from telemetry.normalize import (
    DecodedText,
    GpuResolver,
    ModelResolver,
    RowError,
    catalog_model_ids,
    one_line,
)
from telemetry.prometheus import (
    CACHE_CONFIG_INFO,
    DCGM_METRICS,
    ENGINE_METRICS,
    HISTOGRAM_PARTS,
    Dedupe,
    KnownSeries,
    parse_prometheus,
)
from telemetry.prometheus_answer import Budget, Series, read_answer
from telemetry.schema import FILE_SCHEMA, OBSERVATION_SCHEMA, REJECT_SCHEMA, SAMPLE_SCHEMA, frame

URL_ENV = "CAPPLAN_PROMETHEUS_URL"
PROMETHEUS = "prometheus"  # the telemetry_source of what the API gave
DEFAULT_LOOKBACK_S = 86_400  # the nightly reads the day since the last one
DEFAULT_STEP_S = 300
DEFAULT_TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 64 << 20
DEFAULT_MAX_POINTS = 2_000_000  # points kept by one whole ingest (the memory budget: ~1 KB a point at the peak)
DEFAULT_BUDGET_S = 900.0  # seconds one whole ingest may take, every query included
DEFAULT_DEPLOYMENT_LABEL = "deployment"  # the one label deployment ids are read from
MAX_POINTS_PER_SERIES = 11_000
MAX_REDIRECTS = 5  # Prometheus refuses range queries with more points per series
_CHUNK_BYTES = 1 << 16
_ERROR_BODY_BYTES = 1 << 14
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*", re.ASCII)
SAMPLE_QUERIES = (*ENGINE_METRICS, *HISTOGRAM_PARTS, *DCGM_METRICS)


@dataclass(frozen=True)
class _Query:
    endpoint: str  # query | query_range
    metric: str
    params: dict[str, str]


class _Unreachable(RowError):
    """The server could not be talked to at all: the remaining queries are not sent."""


@dataclass(frozen=True)
class PrometheusClient:
    """Where to ask and how long to wait; `display_url` is the only form of the URL shown."""

    base_url: str  # scheme://host[:port][/prefix], without credentials
    display_url: str
    authorization: str | None
    timeout_s: float
    max_response_bytes: int

    @classmethod
    def from_url(
        cls, url: str, timeout_s: float = DEFAULT_TIMEOUT_S, max_response_bytes: int = MAX_RESPONSE_BYTES
    ) -> PrometheusClient:
        """RowError('unreadable') for a URL that is not http(s)://[user:password@]host[:port][/path].

        The credentials are everything between `://` and the URL's last `@`, split at their first
        `:` and percent-decoded: a password pasted unencoded, holding `/ ? # @ :` or spaces, is
        still read as the password (never as a host, a port or a path), and nothing of it is ever
        quoted in a reason (`redact_url`)."""
        text = url.strip()
        shown = one_line(redact_url(text), 300)
        scheme, sep, rest = text.partition("://")
        if not sep or scheme.lower() not in ("http", "https"):
            raise RowError("unreadable", f"{URL_ENV} {shown!r} is not an http(s)://host[:port] URL")
        at = rest.rfind("@")
        userinfo, hostpart = (rest[:at], rest[at + 1 :]) if at >= 0 else (None, rest)
        try:
            parts = urllib.parse.urlsplit(f"{scheme.lower()}://{hostpart}")
            port = parts.port
        except ValueError as exc:
            raise RowError("unreadable", f"{URL_ENV} {shown!r} is not a URL ({_safe(exc)})") from None
        if not parts.hostname or any(c.isspace() for c in hostpart):
            raise RowError("unreadable", f"{URL_ENV} {shown!r} is not an http(s)://host[:port] URL")
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        netloc = f"{host}:{port}" if port else host
        base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        authorization = None
        if userinfo is not None:
            user, _, password = userinfo.partition(":")
            pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
            authorization = "Basic " + base64.b64encode(pair.encode()).decode()
        return cls(base, redact(base), authorization, timeout_s, max_response_bytes)

    def get(self, endpoint: str, params: dict[str, str], timeout_s: float | None = None) -> bytes:
        """The body of GET <base>/api/v1/<endpoint>?params, at most `max_response_bytes`, within
        `timeout_s` (default the client's); RowError with a one-line reason (`_Unreachable` when
        no answer came at all)."""
        timeout = max(min(timeout_s, self.timeout_s), 0.001) if timeout_s is not None else self.timeout_s
        url = f"{self.base_url}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
        where = f"{self.display_url}/api/v1/{endpoint}"
        request = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "capplan"})
        if self.authorization:
            request.add_unredirected_header("Authorization", self.authorization)
        deadline = time.monotonic() + timeout
        opener = urllib.request.build_opener(
            _DeadlineHTTPHandler(deadline), _DeadlineHTTPSHandler(deadline), _RedirectHandler(where)
        )
        try:
            with opener.open(request, timeout=timeout) as response:
                return self._read(response, where, deadline, timeout)
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            exc.close()
            raise RowError("unreadable", f"HTTP {exc.code} from {where}{': ' + detail if detail else ''}") from None
        except RowError:
            raise
        except TimeoutError:
            raise _Unreachable("unreadable", f"no answer from {where} within {timeout:.3g} s") from None
        except urllib.error.URLError as exc:
            reason = exc.reason if not isinstance(exc.reason, TimeoutError) else f"timed out ({timeout:.3g} s)"
            raise _Unreachable("unreadable", f"cannot reach {where}: {_safe(reason)}") from None
        except (HTTPException, OSError, ValueError) as exc:
            raise _Unreachable("unreadable", f"{where}: {type(exc).__name__}: {_safe(exc)}") from None

    def _read(self, response: HTTPResponse, where: str, deadline: float, timeout: float) -> bytes:
        limit = self.max_response_bytes
        length = response.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > limit:
            raise RowError("too_large", f"{where} answered {int(length):,} bytes, above the {limit:,}-byte limit")
        chunks: list[bytes] = []
        size = 0
        while True:
            if time.monotonic() > deadline:
                raise _Unreachable("unreadable", f"{where} took longer than {timeout:.3g} s to answer")
            chunk = response.read1(_CHUNK_BYTES)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                raise RowError("too_large", f"{where} answered more than the {limit:,}-byte limit")
            chunks.append(chunk)


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    """Redirects within http(s) only: to the same scheme or from http up to https, at most
    MAX_REDIRECTS of them (urllib alone follows http -> ftp:// and up to 10)."""

    max_redirections = MAX_REDIRECTS

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        old = urllib.parse.urlsplit(req.full_url).scheme.lower()
        new = urllib.parse.urlsplit(newurl).scheme.lower()
        if new not in ("http", "https") or (old == "https" and new == "http"):
            raise RowError(
                "unreadable",
                f"{self.where} redirected (HTTP {code}) from {old}:// to {redact_url(one_line(newurl, 120))!r}: "
                "only redirects to http(s) that keep or upgrade to https are followed",
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _DeadlineIO(io.RawIOBase):
    """A socket read under one deadline for the whole answer: each read waits at most what is
    left, so a server that trickles its status line, headers or body a byte at a time is cut off
    at `timeout_s`, not after `timeout_s` per byte."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self.sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline passed")
        self.sock.settimeout(remaining)
        return self.sock.recv_into(buffer)


def _deadline_response(deadline: float) -> type[HTTPResponse]:
    class DeadlineResponse(HTTPResponse):
        def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
            super().__init__(sock, *args, **kwargs)
            self._socket_file = self.fp  # holds the socket open after urllib drops the connection's reference
            self.fp = io.BufferedReader(_DeadlineIO(sock, deadline))

        def close(self) -> None:
            super().close()
            self._socket_file.close()

    return DeadlineResponse


def _deadline_connection(base: type[HTTPConnection], deadline: float) -> type[HTTPConnection]:
    """`base` (HTTPConnection or HTTPSConnection) whose responses stop reading at `deadline`."""
    return type(f"Deadline{base.__name__}", (base,), {"response_class": _deadline_response(deadline)})


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.connection = _deadline_connection(HTTPConnection, deadline)

    def http_open(self, req: urllib.request.Request) -> HTTPResponse:
        return self.do_open(self.connection, req)


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.connection = _deadline_connection(HTTPSConnection, deadline)

    def https_open(self, req: urllib.request.Request) -> HTTPResponse:
        return self.do_open(self.connection, req, context=self._context)  # type: ignore[attr-defined]


def _safe(value: object) -> str:
    return redact(one_line(value, 160))


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """Prometheus's own error message (`{"status":"error","error":...}`), else the body's start."""
    try:
        body = exc.read(_ERROR_BODY_BYTES)
    except Exception:  # the error body is a courtesy: a broken one must not hide the status
        return ""
    try:
        document = json.loads(body)
        if isinstance(document, dict) and isinstance(document.get("error"), str):
            return _safe(document["error"])
    except ValueError:
        pass
    return _safe(body.decode("utf-8", "replace")) if body.strip() else ""


_BATCH_LINES = 1 << 14  # points given to the text parser at a time (then made into frames)


@dataclass
class _Answered:
    """One query's rows: the frames of its batches, and their counts for its `files` row."""

    ctx: FileContext
    size_bytes: int = 0
    sha256: str | None = None
    encoding: str | None = None
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("lines_total", "lines_ignored", "accepted", "rejected", "observations", "samples"), 0
        )
    )
    parts: list[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    frames: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] = field(default=(), init=False)  # type: ignore[assignment]

    def add(self, report: FileReport) -> None:
        report.finish()
        self.parts.append(report.frames)
        counts = {
            "lines_total": report.lines_total,
            "lines_ignored": report.lines_ignored,
            "accepted": report.accepted,
            "rejected": report.rejected,
            "observations": report.frames[0].height,
            "samples": report.frames[1].height,
        }
        for name, value in counts.items():
            self.counts[name] += value

    def reject(self, error: RowError) -> None:
        """A reject of the whole query (no line)."""
        report = FileReport(self.ctx, unread=True)
        report.reject(None, error, None)
        self.add(report)

    def finish(self) -> _Answered:
        schemas = (OBSERVATION_SCHEMA, SAMPLE_SCHEMA, REJECT_SCHEMA)
        self.frames = tuple(_concat([p[i] for p in self.parts], schemas[i]) for i in range(3))  # type: ignore[assignment]
        self.parts.clear()
        return self

    def manifest(self) -> dict[str, Any]:
        rows_in = self.counts["accepted"] + self.counts["rejected"]
        ctx = self.ctx
        where = {"file": ctx.rel, "source_kind": ctx.kind, "size_bytes": self.size_bytes, "sha256": self.sha256}
        return {
            **where,
            "encoding": self.encoding,
            "deployment_id": ctx.deployment_id,
            **self.counts,
            "rows_in": rows_in,
            "notes": "; ".join(self.notes) or None,
        }


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Batch:
    """Text lines of a run of series, for the text parser, with the points rejected before it."""

    def __init__(self, first_line: int) -> None:
        self.first_line = first_line
        self.lines: list[str] = []
        self.early: list[tuple[int, RowError, str | None, str | None]] = []  # line, error, excerpt, deployment
        self.known: KnownSeries = {}  # the label sets written, so the text parser need not parse them again

    @property
    def next_line(self) -> int:
        return self.first_line + len(self.lines)

    def rejected(self, error: RowError, excerpt: str | None, deployment: str | None = None) -> None:
        self.early.append((self.next_line, error, excerpt, deployment))
        self.lines.append("")

    def series(self, series: Series, good: range, bad: range) -> None:
        """The points `good` (positions in its columns) and `bad` (in its rejected points) of `series`."""
        labels = dict(series.labels)
        if series.deployment is not None:
            labels["deployment_id"] = series.deployment
        ordered = sorted(labels.items())
        text = "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in ordered) + "}"
        head = series.name + text
        if series.problem is None and good:
            self.known[(series.name, text)] = (series.name, tuple(ordered))
        for index in bad:
            _, error, excerpt = series.bad[index]
            self.rejected(error, f"{head} {excerpt}"[:200], series.deployment)
        stamps, values = series.stamps, series.values
        for index in good:
            stamp, value = stamps[index], values[index]
            if series.problem is not None:
                self.rejected(series.problem, f"{series.name}{series.labels} [{stamp:g}, {value!r}]"[:200])
            else:
                self.lines.append(f"{head} {value!r} {round(stamp * 1000)}")


def _windows(members: list[Series], size: int) -> Iterator[list[tuple[Series, range, range]]]:
    """The points of one group of series (the buckets of a histogram, or one series) in windows
    of about `size` points: the same stretch of time from every member, so the buckets of one time
    stay together (points in time order, as Prometheus gives them), then the points rejected on
    their own, `size` at a time. (series, positions in its columns, positions in its rejects)."""
    per = max(1, size // len(members))
    longest = max(members, key=lambda m: len(m.stamps)).stamps
    starts = [0] * len(members)
    for k in range(per, len(longest) + per, per):
        bound = longest[k] if k < len(longest) else math.inf
        window = []
        for j, member in enumerate(members):
            end, stamps = starts[j], member.stamps
            while end < len(stamps) and stamps[end] < bound:
                end += 1
            window.append((member, range(starts[j], end), range(0)))
            starts[j] = end
        yield window
    for member in members:
        for low in range(0, len(member.bad), size):
            yield [(member, range(0), range(low, min(low + size, len(member.bad))))]


@dataclass(eq=False)
class _QueryReader:
    """One query's answer into one `_Answered`, through the text parser, a batch at a time."""

    client: PrometheusClient
    models: ModelResolver
    gpus: GpuResolver
    dedupe: Dedupe
    budget: Budget
    deployment_label: str = DEFAULT_DEPLOYMENT_LABEL
    served: dict[tuple[str, str], set[str]] = field(default_factory=dict, init=False)
    down: RowError | None = field(default=None, init=False)

    def answered(self, query: _Query) -> _Answered:
        rel = f"{self.client.display_url}/api/v1/{query.endpoint}?query={query.metric}"
        ctx = FileContext(
            rel=rel,
            kind="prometheus",
            raw=b"",  # the answer is not kept: its size and hash are
            mtime=None,
            default_deployment_id="",
            sidecar=Sidecar(),
            models=self.models,
            gpus=self.gpus,
        )
        return _Answered(ctx)

    def read(self, query: _Query) -> _Answered:
        answered = self.answered(query)
        if self.down is None and self.budget.left_s() <= 0:
            self.down = RowError("too_large", f"the ingest's time budget ({self.budget.budget_s:g} s) is spent")
        if self.down is None and self.budget.points >= self.budget.max_points:
            self.down = RowError("too_large", f"the ingest's budget of {self.budget.max_points:,} points is spent")
        if self.down is not None:
            answered.reject(RowError(self.down.code, f"not queried: {self.down.reason}"))
            return answered.finish()
        left = self.budget.left_s()
        try:
            body = self.client.get(query.endpoint, query.params, min(self.client.timeout_s, left))
        except RowError as exc:
            if left < self.client.timeout_s and any(w in exc.reason for w in ("within", "longer than", "timed out")):
                exc = _Unreachable(
                    exc.code, f"{exc.reason} (what was left of the ingest's {self.budget.budget_s:g} s budget)"
                )
            if isinstance(exc, _Unreachable):
                self.down = exc
            answered.reject(exc)
            return answered.finish()
        answered.size_bytes, answered.sha256, answered.encoding = len(body), hashlib.sha256(body).hexdigest(), "json"
        where = f"{self.client.display_url}/api/v1/{query.endpoint}"
        points_before = self.budget.points
        try:
            self.parse(query, body, answered)
        except RowError as exc:
            error = RowError(exc.code, f"{where}: {exc.reason}")
        except Exception as exc:  # a parser bug costs this query, never the run
            error = RowError("parse_error", f"reading failed: {type(exc).__name__}: {one_line(exc, 160)}")
        else:
            return answered.finish()
        answered.parts.clear()
        answered.counts = dict.fromkeys(answered.counts, 0)
        self.budget.points = points_before  # nothing of this answer is kept
        answered.reject(error)
        return answered.finish()

    def parse(self, query: _Query, body: bytes, answered: _Answered) -> None:
        result_type = "matrix" if query.endpoint == "query_range" else "vector"
        answer = read_answer(body, result_type, query.metric, self.deployment_label, self.budget)
        del body  # the columns hold what is needed
        for series in answer.series:
            if series.deployment and series.name in ENGINE_METRICS and series.labels.get("model_name"):
                key = (series.deployment, series.labels.get("engine", ""))
                self.served.setdefault(key, set()).add(series.labels["model_name"])
        batch = _Batch(1)
        for error, excerpt in answer.entries:
            batch.rejected(error, excerpt)
        answer.entries.clear()
        batch, stopped = self.windows(query, sorted(answer.series, key=Series.sort_key), batch, answered)
        answer.series.clear()
        self.flush(query, batch, answered)
        if answer.stopped is not None:  # the points budget, or time, while reading: whole series kept
            stopped = answer.stopped
            reason = f"{stopped.reason}: the rest of this answer was not read; the series read whole before it are kept"
        elif stopped is not None:  # time, while parsing: the points parsed so far kept
            reason = f"{stopped.reason}: the rest of this answer was not parsed; the points parsed before it are kept"
        if stopped is not None:
            answered.reject(RowError(stopped.code, reason))
            self.down = stopped  # the budget is spent: the other queries are not sent

    def windows(
        self, query: _Query, series: list[Series], batch: _Batch, answered: _Answered
    ) -> tuple[_Batch, RowError | None]:
        """Every series into batches of at most about _BATCH_LINES lines, each parsed when full;
        the last batch, and why the rest was dropped when the time budget ran out."""
        for _, group in itertools.groupby(series, key=Series.group):
            for window in _windows(list(group), _BATCH_LINES):
                size = sum(len(good) + len(bad) for _, good, bad in window)
                if batch.lines and len(batch.lines) + size > _BATCH_LINES:
                    batch = self.flush(query, batch, answered)
                    if self.budget.left_s() <= 0:
                        spent = f"the ingest's time budget ({self.budget.budget_s:g} s) is spent"
                        return batch, RowError("too_large", spent)
                for member, good, bad in window:
                    batch.series(member, good, bad)
        return batch, None

    def flush(self, query: _Query, batch: _Batch, answered: _Answered) -> _Batch:
        """The batch's lines through the text parser, made into frames now; the next batch."""
        report = FileReport(answered.ctx)
        served = self.served if query.metric == CACHE_CONFIG_INFO else None
        text = DecodedText(batch.lines, "json")
        parse_prometheus(report.ctx, text, report, self.dedupe, served, batch.first_line, batch.known)
        report.lines_ignored -= len(batch.early)  # their placeholder lines were counted as blank
        for number, error, excerpt, deployment in batch.early:
            report.reject(number, error, excerpt, deployment)
        answered.add(report)
        return _Batch(batch.next_line)


def plan(end_s: int, lookback_s: int, step_s: int) -> tuple[list[_Query], list[str]]:
    """The queries of one ingest ending at `end_s`, and notes on settings that were adjusted."""
    notes: list[str] = []
    queries: list[_Query] = []
    if lookback_s > 0 and lookback_s // step_s + 1 > MAX_POINTS_PER_SERIES:
        wider = math.ceil(lookback_s / (MAX_POINTS_PER_SERIES - 1))
        notes.append(
            f"step {step_s} s widened to {wider} s: Prometheus returns at most {MAX_POINTS_PER_SERIES:,} points"
        )
        step_s = wider
    for metric in SAMPLE_QUERIES:
        if lookback_s > 0:
            params = {"query": metric, "start": str(end_s - lookback_s), "end": str(end_s), "step": str(step_s)}
            queries.append(_Query("query_range", metric, params))
        else:
            queries.append(_Query("query", metric, {"query": metric, "time": str(end_s)}))
    queries.append(_Query("query", CACHE_CONFIG_INFO, {"query": CACHE_CONFIG_INFO, "time": str(end_s)}))
    return queries, notes


def ingest_prometheus(
    url: str,
    *,
    lookback_s: int = DEFAULT_LOOKBACK_S,
    step_s: int = DEFAULT_STEP_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    max_points: int = DEFAULT_MAX_POINTS,
    budget_s: float = DEFAULT_BUDGET_S,
    deployment_label: str = DEFAULT_DEPLOYMENT_LABEL,
    at: dt.datetime | None = None,
    model_ids: Iterable[str] | None = None,
    gpu_skus: Sequence[GpuSku] | None = None,
) -> IngestResult:
    """Query the API at `url` (its root, e.g. `http://prometheus:9090`) for the last `lookback_s`
    before `at` (default now), every `step_s`; the four frames of `ingest_dir`, one file per query.

    The end time is rounded down to a multiple of `step_s`, so two runs within one step read the
    same points (a re-run replaces, it does not add). Never raises for what the server does. The
    whole ingest keeps at most `max_points` points and takes at most `budget_s` (each query at most
    `timeout_s` of it); deployment ids come from the `deployment_label` label only.
    """
    problem = _settings_problem(step_s, lookback_s, timeout_s, max_points, budget_s, deployment_label)
    if problem:
        return _not_queried(RowError("bad_value", f"CAPPLAN_PROMETHEUS_* settings: {problem}"))
    models = ModelResolver.from_ids(model_ids if model_ids is not None else catalog_model_ids())
    gpus = GpuResolver(tuple(gpu_skus)) if gpu_skus is not None else GpuResolver.from_catalog()
    end = (at or dt.datetime.now(dt.UTC)).timestamp()
    end_s = int(end // step_s * step_s)
    queries, notes = plan(end_s, lookback_s, step_s)
    try:
        client = PrometheusClient.from_url(url, timeout_s, max_response_bytes)
    except RowError as exc:
        return _not_queried(exc)
    reader = _QueryReader(client, models, gpus, Dedupe(), Budget(max_points, budget_s), deployment_label)
    reports = [reader.read(query) for query in queries]
    for report in reports:
        report.notes.extend(notes)
    return IngestResult(
        observations=_concat([r.frames[0] for r in reports], OBSERVATION_SCHEMA),
        samples=_concat([r.frames[1] for r in reports], SAMPLE_SCHEMA),
        rejects=_concat([r.frames[2] for r in reports], REJECT_SCHEMA),
        files=frame([r.manifest() for r in reports], FILE_SCHEMA),
    )


def _settings_problem(
    step_s: int, lookback_s: int, timeout_s: float, max_points: int, budget_s: float, deployment_label: str
) -> str | None:
    if step_s < 1 or lookback_s < 0 or not timeout_s > 0:
        return f"step_s >= 1, lookback_s >= 0 and timeout_s > 0 are needed (got {step_s}, {lookback_s}, {timeout_s})"
    if max_points < 1 or not budget_s > 0:
        return f"max_points >= 1 and budget_s > 0 are needed (got {max_points}, {budget_s})"
    if not _LABEL_NAME.fullmatch(deployment_label) or deployment_label.startswith("__"):
        return f"the deployment label {one_line(deployment_label, 80)!r} is not a Prometheus label name"
    return None


def _not_queried(error: RowError) -> IngestResult:
    """A URL or settings that cannot be queried: one file, one reject, the run goes on."""
    name = f"{URL_ENV} ({hashlib.sha256(error.reason.encode()).hexdigest()[:8]})"
    reject = {
        "file": name,
        "line": None,
        "source_kind": "prometheus",
        "reason_code": error.code,
        "reason": error.reason,
    }
    manifest = {
        "file": name,
        "source_kind": "prometheus",
        "size_bytes": 0,
        "lines_total": 0,
        "lines_ignored": 0,
        "rows_in": 1,
        "accepted": 0,
        "rejected": 1,
        "observations": 0,
        "samples": 0,
    }
    return IngestResult(
        observations=frame([], OBSERVATION_SCHEMA),
        samples=frame([], SAMPLE_SCHEMA),
        rejects=frame([reject], REJECT_SCHEMA),
        files=frame([manifest], FILE_SCHEMA),
    )


def with_source(result: IngestResult, source: str, where: str) -> pl.DataFrame:
    """`result.files` labelled with the telemetry source and where it came from (the
    `telemetry_source`, `drop_dir` columns of `raw.telemetry_files`)."""
    return result.files.with_columns(
        pl.lit(source, pl.String).alias("telemetry_source"), pl.lit(redact(where), pl.String).alias("drop_dir")
    )


@dataclass(frozen=True)
class PrometheusSettings:
    """`CAPPLAN_PROMETHEUS_URL` and its query settings (see `ingest_prometheus`)."""

    url: str
    lookback_s: int = DEFAULT_LOOKBACK_S
    step_s: int = DEFAULT_STEP_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_points: int = DEFAULT_MAX_POINTS
    budget_s: float = DEFAULT_BUDGET_S
    deployment_label: str = DEFAULT_DEPLOYMENT_LABEL

    def display_url(self) -> str:
        """The URL as shown and stored: credentials redacted."""
        try:
            return PrometheusClient.from_url(self.url).display_url
        except RowError:
            return one_line(redact_url(self.url), 200)

    def describe(self) -> str:
        window = f"last {self.lookback_s:,} s every {self.step_s:,} s" if self.lookback_s else "instant queries"
        return f"the Prometheus API at {self.display_url()} ({window})"


@dataclass(frozen=True)
class SourcedFrames:
    """The frames of every telemetry source of a run, concatenated; `files` carries each file's
    `telemetry_source` (sample | drop_folder | prometheus) and `drop_dir` (folder or redacted URL)."""

    result: IngestResult
    files: pl.DataFrame
    sources: list[str]
    descriptions: list[str]

    @property
    def source(self) -> str:
        return "+".join(self.sources) or "none"


def ingest_sources(folder: DropFolder, prometheus: PrometheusSettings | None, registry: Catalog) -> SourcedFrames:
    """The drop folder and, when configured, the Prometheus API, resolved against `registry`.

    The shipped SAMPLE fleet is only a stand-in for having no telemetry: with a Prometheus URL and
    no drop folder configured or filled, the SAMPLE is not mixed into real measurements.
    """
    parts: list[tuple[IngestResult, pl.DataFrame]] = []
    sources: list[str] = []
    descriptions: list[str] = []
    if prometheus is None or folder.source != SAMPLE or folder.configured:
        frames = ingest_frames(folder, registry)
        parts.append((frames.result, frames.files))
        sources.append(folder.source)
        descriptions.append(folder.describe())
    if prometheus is not None:
        result = ingest_prometheus(
            prometheus.url,
            lookback_s=prometheus.lookback_s,
            step_s=prometheus.step_s,
            timeout_s=prometheus.timeout_s,
            max_points=prometheus.max_points,
            budget_s=prometheus.budget_s,
            deployment_label=prometheus.deployment_label,
            model_ids=registry.model_ids(),
            gpu_skus=list(registry.gpus.values()),
        )
        described = prometheus.describe()
        parts.append((result, with_source(result, PROMETHEUS, prometheus.display_url())))
        sources.append(PROMETHEUS)
        descriptions.append(described)
    merged = IngestResult(
        observations=_concat([r.observations for r, _ in parts], OBSERVATION_SCHEMA),
        samples=_concat([r.samples for r, _ in parts], SAMPLE_SCHEMA),
        rejects=_concat([r.rejects for r, _ in parts], REJECT_SCHEMA),
        files=_concat([r.files for r, _ in parts], FILE_SCHEMA),
    )
    return SourcedFrames(merged, pl.concat([f for _, f in parts], how="vertical"), sources, descriptions)
