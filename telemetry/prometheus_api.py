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
= accepted + rejected, checked by the same `check_reconciliation`. A series without a
`deployment` / `deployment_id` label (add one with relabelling) rejects its points
(`missing_field`).

Failures are rows, never exceptions: an HTTP error, a refused connection, a timeout, a body above
`max_response_bytes` or JSON that is not a Prometheus answer rejects that query as one row with a
one-line reason naming the redacted URL (`unreadable`, `too_large`, `malformed`); after a
connection-level failure the remaining queries are not sent (each rejected, saying why), so a
dead server costs one timeout, not eight.

Why plain `urllib.request` and not a client library: no new dependency (`prometheus-api-client`
is not installed and pulls pandas/matplotlib), every read bounded (a size cap checked while
reading, a timeout per socket operation and a deadline on the whole body, no compressed
responses asked for), and credentials handled here: basic auth written in the URL
(`https://user:pass@prom/`) is sent as an `Authorization` header that is not forwarded on
redirects, and only the redacted URL (`redact.redact`) is ever shown or stored. Proxies follow
the usual `http_proxy` / `no_proxy` variables.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import json
import math
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from http.client import HTTPConnection, HTTPException, HTTPResponse, HTTPSConnection
from typing import Any

import polars as pl

from capacity.spec import GpuSku
from models_registry.planning import Catalog
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
    DEPLOYMENT_LABELS,
    ENGINE_METRICS,
    HISTOGRAM_PARTS,
    Dedupe,
    parse_prometheus,
)
from telemetry.redact import redact
from telemetry.schema import FILE_SCHEMA, OBSERVATION_SCHEMA, REJECT_SCHEMA, SAMPLE_SCHEMA, frame

URL_ENV = "CAPPLAN_PROMETHEUS_URL"
PROMETHEUS = "prometheus"  # the telemetry_source of what the API gave
DEFAULT_LOOKBACK_S = 86_400  # the nightly reads the day since the last one
DEFAULT_STEP_S = 300
DEFAULT_TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 64 << 20
MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses range queries with more points per series
_CHUNK_BYTES = 1 << 16
_ERROR_BODY_BYTES = 1 << 14
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
        """RowError('unreadable') for a URL that is not http(s)://host[:port][/path]."""
        shown = redact(one_line(url, 300))
        try:
            parts = urllib.parse.urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise RowError("unreadable", f"{URL_ENV} {shown!r} is not a URL ({one_line(exc, 80)})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RowError("unreadable", f"{URL_ENV} {shown!r} is not an http(s)://host[:port] URL")
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        netloc = f"{host}:{port}" if port else host
        base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        authorization = None
        if parts.username is not None or parts.password is not None:
            pair = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
            authorization = "Basic " + base64.b64encode(pair.encode()).decode()
        return cls(base, redact(base), authorization, timeout_s, max_response_bytes)

    def get(self, endpoint: str, params: dict[str, str]) -> bytes:
        """The body of GET <base>/api/v1/<endpoint>?params, at most `max_response_bytes`, within
        `timeout_s`; RowError with a one-line reason (`_Unreachable` when no answer came at all)."""
        url = f"{self.base_url}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
        where = f"{self.display_url}/api/v1/{endpoint}"
        request = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "capplan"})
        if self.authorization:
            request.add_unredirected_header("Authorization", self.authorization)
        deadline = time.monotonic() + self.timeout_s
        opener = urllib.request.build_opener(_DeadlineHTTPHandler(deadline), _DeadlineHTTPSHandler(deadline))
        try:
            with opener.open(request, timeout=self.timeout_s) as response:
                return self._read(response, where, deadline)
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            exc.close()
            raise RowError("unreadable", f"HTTP {exc.code} from {where}{': ' + detail if detail else ''}") from None
        except RowError:
            raise
        except TimeoutError:
            raise _Unreachable("unreadable", f"no answer from {where} within {self.timeout_s:g} s") from None
        except urllib.error.URLError as exc:
            reason = exc.reason if not isinstance(exc.reason, TimeoutError) else f"timed out ({self.timeout_s:g} s)"
            raise _Unreachable("unreadable", f"cannot reach {where}: {_safe(reason)}") from None
        except (HTTPException, OSError, ValueError) as exc:
            raise _Unreachable("unreadable", f"{where}: {type(exc).__name__}: {_safe(exc)}") from None

    def _read(self, response: HTTPResponse, where: str, deadline: float) -> bytes:
        limit = self.max_response_bytes
        length = response.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > limit:
            raise RowError("too_large", f"{where} answered {int(length):,} bytes, above the {limit:,}-byte limit")
        chunks: list[bytes] = []
        size = 0
        while True:
            if time.monotonic() > deadline:
                raise _Unreachable("unreadable", f"{where} took longer than {self.timeout_s:g} s to answer")
            chunk = response.read1(_CHUNK_BYTES)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                raise RowError("too_large", f"{where} answered more than the {limit:,}-byte limit")
            chunks.append(chunk)


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


@dataclass(frozen=True)
class _Series:
    name: str
    labels: dict[str, str]
    points: list[Any]


def _result(body: bytes, result_type: str) -> list[Any]:
    """The `data.result` list of a successful answer; RowError('malformed') for anything else."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deep" if isinstance(exc, RecursionError) else one_line(exc, 120)
        raise RowError("malformed", f"the answer is not JSON ({reason})") from None
    if not isinstance(document, dict):
        raise RowError("malformed", f"the answer is a JSON {type(document).__name__}, not a Prometheus response")
    if document.get("status") != "success":
        error = document.get("error")
        detail = f": {_safe(error)}" if isinstance(error, str) else ""
        raise RowError("malformed", f"status {_safe(document.get('status'))!r}, not 'success'{detail}")
    data = document.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise RowError("malformed", "no data.result list in the answer")
    if data.get("resultType") != result_type:
        raise RowError("malformed", f"resultType {_safe(data.get('resultType'))!r}, expected {result_type!r}")
    return data["result"]


def _series(item: object, metric: str, points_key: str) -> _Series:
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        raise RowError("malformed", "a result entry without a metric label set")
    labels = item["metric"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise RowError("malformed", "a label name or value that is not a string")
    points = item.get(points_key)
    if points_key == "value":
        points = [points]
    if not isinstance(points, list):
        raise RowError("malformed", f"a series without its {points_key!r}")
    name = labels.get("__name__") or metric
    return _Series(name, {k: v for k, v in labels.items() if k != "__name__"}, points)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _line(series: _Series, point: object) -> str:
    """One point as a Prometheus text line with its millisecond timestamp; RowError when the
    point is not `[unix seconds, "value"]`."""
    if not isinstance(point, list) or len(point) != 2:
        raise RowError("malformed", "a point that is not [timestamp, value]")
    stamp, value = point
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
        raise RowError("malformed", f"a point timestamp that is not a number ({_safe(stamp)})")
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise RowError("malformed", f"a point value that is not a number string ({_safe(value)})")
    labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(series.labels.items()))
    return f"{series.name}{{{labels}}} {value} {round(stamp * 1000)}"


def _deployment(labels: dict[str, str]) -> str | None:
    return next((labels[k] for k in DEPLOYMENT_LABELS if labels.get(k)), None)


class _QueryReader:
    """One query's answer into one FileReport, through the text parser."""

    def __init__(self, client: PrometheusClient, models: ModelResolver, gpus: GpuResolver, dedupe: Dedupe) -> None:
        self.client = client
        self.models = models
        self.gpus = gpus
        self.dedupe = dedupe
        self.served: dict[tuple[str, str], set[str]] = {}
        self.down: RowError | None = None

    def report(self, query: _Query, raw: bytes = b"") -> FileReport:
        rel = f"{self.client.display_url}/api/v1/{query.endpoint}?query={query.metric}"
        ctx = FileContext(
            rel=rel,
            kind="prometheus",
            raw=raw,
            mtime=None,
            default_deployment_id="",
            sidecar=Sidecar(),
            models=self.models,
            gpus=self.gpus,
        )
        return FileReport(ctx, unread=not raw)

    def read(self, query: _Query) -> FileReport:
        if self.down is not None:
            report = self.report(query)
            report.reject(None, RowError("unreadable", f"not queried: {self.down.reason}"), None)
            return report.finish()
        try:
            body = self.client.get(query.endpoint, query.params)
        except RowError as exc:
            if isinstance(exc, _Unreachable):
                self.down = exc
            report = self.report(query)
            report.reject(None, exc, None)
            return report.finish()
        report = self.report(query, body)
        report.encoding = "json"
        try:
            self.parse(query, body, report)
        except RowError as exc:
            error = RowError(exc.code, f"{self.client.display_url}/api/v1/{query.endpoint}: {exc.reason}")
        except Exception as exc:  # a parser bug costs this query, never the run
            error = RowError("parse_error", f"reading failed: {type(exc).__name__}: {one_line(exc, 160)}")
        else:
            return report.finish()
        report.reset()
        report.lines_total = 0
        report.reject(None, error, None)
        return report.finish()

    def parse(self, query: _Query, body: bytes, report: FileReport) -> None:
        points_key = "values" if query.endpoint == "query_range" else "value"
        result = _result(body, "matrix" if points_key == "values" else "vector")
        lines: list[str] = []
        early: list[tuple[int, RowError, str | None]] = []  # rows rejected before the text parser
        series_list: list[_Series] = []
        for item in result:
            try:
                series_list.append(_series(item, query.metric, points_key))
            except RowError as exc:
                lines.append("")
                early.append((len(lines), exc, _safe(json.dumps(item)[:200])))
        series_list.sort(key=lambda s: (s.name, sorted(s.labels.items())))
        for series in series_list:
            deployment = _deployment(series.labels)
            if deployment and series.name in ENGINE_METRICS and series.labels.get("model_name"):
                key = (deployment, series.labels.get("engine", ""))
                self.served.setdefault(key, set()).add(series.labels["model_name"])
            for point in series.points:
                try:
                    line = _line(series, point)
                    if deployment is None:
                        raise RowError(
                            "missing_field",
                            "no deployment or deployment_id label on the series (add one with relabel_configs)",
                        )
                    lines.append(line)
                except RowError as exc:
                    lines.append("")
                    early.append((len(lines), exc, _safe(f"{series.name}{series.labels} {point}")[:200]))
        served = self.served if query.metric == CACHE_CONFIG_INFO else None
        parse_prometheus(report.ctx, DecodedText(lines, "json"), report, self.dedupe, served)
        report.lines_ignored -= len(early)  # their placeholder lines were counted as blank
        for number, error, excerpt in early:
            report.reject(number, error, excerpt, None)


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
    at: dt.datetime | None = None,
    model_ids: Iterable[str] | None = None,
    gpu_skus: Sequence[GpuSku] | None = None,
) -> IngestResult:
    """Query the API at `url` (its root, e.g. `http://prometheus:9090`) for the last `lookback_s`
    before `at` (default now), every `step_s`; the four frames of `ingest_dir`, one file per query.

    The end time is rounded down to a multiple of `step_s`, so two runs within one step read the
    same points (a re-run replaces, it does not add). Never raises for what the server does.
    """
    if step_s < 1 or lookback_s < 0 or not timeout_s > 0:
        reason = f"step_s >= 1, lookback_s >= 0 and timeout_s > 0 are needed (got {step_s}, {lookback_s}, {timeout_s})"
        return _not_queried(RowError("bad_value", f"CAPPLAN_PROMETHEUS_* settings: {reason}"))
    models = ModelResolver.from_ids(model_ids if model_ids is not None else catalog_model_ids())
    gpus = GpuResolver(tuple(gpu_skus)) if gpu_skus is not None else GpuResolver.from_catalog()
    end = (at or dt.datetime.now(dt.UTC)).timestamp()
    end_s = int(end // step_s * step_s)
    queries, notes = plan(end_s, lookback_s, step_s)
    try:
        client = PrometheusClient.from_url(url, timeout_s, max_response_bytes)
    except RowError as exc:
        return _not_queried(exc)
    reader = _QueryReader(client, models, gpus, Dedupe())
    reports = [reader.read(query) for query in queries]
    for report in reports:
        report.notes.extend(notes)
    return IngestResult(
        observations=_concat([r.frames[0] for r in reports], OBSERVATION_SCHEMA),
        samples=_concat([r.frames[1] for r in reports], SAMPLE_SCHEMA),
        rejects=_concat([r.frames[2] for r in reports], REJECT_SCHEMA),
        files=frame([r.manifest() for r in reports], FILE_SCHEMA),
    )


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

    def display_url(self) -> str:
        """The URL as shown and stored: credentials redacted."""
        try:
            return PrometheusClient.from_url(self.url).display_url
        except RowError:
            return redact(one_line(self.url, 200))

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
