"""Telemetry from a real Prometheus server (Debian's `prometheus`), and from hostile ones.

The fixture serves the SAMPLE fleet's snapshots (the latest scrape of each deployment's
`vllm-metrics.prom` and `dcgm.prom`) from an http.server on 127.0.0.1, starts Prometheus on a
free port with a temp storage dir scraping them every second (each target labelled with its
deployment, as relabelling does in a fleet), waits until every target is up and answers (at most
60 s), then ingests through the HTTP API and compares with what the file parser reads from the
very same text. A missing binary fails under CI=true and skips elsewhere.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from telemetry import SAMPLE_DIR, ingest_dir
from telemetry.prometheus_api import ingest_prometheus

READY_TIMEOUT_S = 60  # bounded: ~5 s on a quiet machine, more under a loaded CI
SAMPLE_COLUMNS = ["deployment_id", "metric", "value", "source_metric", "model_id", "model_name_raw",
                  "engine_index", "gpu_index", "gpu_uuid", "gpu_sku", "hostname", "pod"]  # fmt: skip
OBSERVATION_SKIP = ["observation_id", "observed_at", "observed_at_source", "file", "line"]

# one query per metric read: 5 vLLM gauges and counters + 2 DCGM + cache_config_info = 8, and for speed
# 7 token counters / SGLang gauges + 6 latency histograms x (_bucket, _sum, _count) = 25, and for the prefix cache
# vLLM's 4 hit / query counters (own and the connector's) + SGLang's hit-rate gauge = 5 (telemetry/prometheus.py)
QUERIES = 8 + 25 + 5


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def latest_scrape(path: Path) -> str:
    """The lines after the last `# scraped_at:` of a snapshot: what its /metrics showed last."""
    lines = path.read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("# scraped_at:")]
    body = lines[starts[-1] + 1 :] if starts else lines
    return "".join(f"{line}\n" for line in body if line.strip() and not line.startswith("#"))


def sample_exposition() -> dict[str, str]:
    """{'/<deployment>/<vllm|dcgm>': text} for every SAMPLE deployment folder."""
    pages: dict[str, str] = {}
    for folder in sorted(p for p in SAMPLE_DIR.iterdir() if p.is_dir() and p.name != "malformed"):
        for kind, name in (("vllm", "vllm-metrics.prom"), ("dcgm", "dcgm.prom")):
            if (folder / name).exists():
                pages[f"/{folder.name}/{kind}"] = latest_scrape(folder / name)
    return pages


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def serve(handler: type[http.server.BaseHTTPRequestHandler]) -> tuple[_Server, str]:
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.loads(response.read())


_EXPORTER = """
import http.server, json, sys
pages = json.load(open(sys.argv[1], encoding="utf-8"))
class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = pages.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write((body or "").encode())
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Metrics).serve_forever()
"""


def _poll(process: subprocess.Popen[bytes], timeout_s: float, interval_s: float, ready: Callable[[], bool]) -> bool:
    """Ask `ready` every `interval_s` until it says yes (True), or the process exits or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        if ready():
            return True
        time.sleep(interval_s)
    return False


def _wait_for(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    def answers() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except OSError:
            return False

    if not _poll(process, timeout_s, 0.1, answers):
        pytest.fail(f"the metrics endpoint {url} did not answer within {timeout_s:g} s")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    binary = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    if binary is None:
        message = "the prometheus binary is not installed (apt-get install -y prometheus; see .ci/run)"
        if _in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    pages = sample_exposition()
    root = tmp_path_factory.mktemp("prometheus")
    # the scrape target runs in a process of its own: served from a thread of the test process, a
    # scrape could miss its 1 s timeout while a Dagster run holds the GIL, and Prometheus then marks
    # the series stale (an instant query finds nothing)
    (root / "pages.json").write_text(json.dumps(pages), encoding="utf-8")
    exporter_port = _free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-c", _EXPORTER, str(root / "pages.json"), str(exporter_port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    exporter_url = f"http://127.0.0.1:{exporter_port}"
    _wait_for(f"{exporter_url}{next(iter(pages))}", exporter)
    groups: dict[str, list[dict[str, Any]]] = {"vllm": [], "dcgm": []}
    for path in pages:
        _, deployment, kind = path.split("/")
        groups[kind].append(
            {"targets": [exporter_url.removeprefix("http://")],
             "labels": {"deployment": deployment, "__metrics_path__": path}}
        )  # fmt: skip
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": kind, "static_configs": g} for kind, g in groups.items()],
    }
    (root / "prometheus.yml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    port = _free_port()
    log = (root / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [binary, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def scraped_every_page() -> bool:
        try:
            targets = _get_json(f"{url}/api/v1/targets?state=active")["data"]["activeTargets"]
            answered = _get_json(f"{url}/api/v1/query?query=count(vllm:cache_config_info)")["data"]["result"]
            # every page that exposes cache_config_info scraped at least once (a loaded CI machine
            # can take a while for the last target)
            expected = sum(1 for body in pages.values() if "vllm:cache_config_info" in body)
            scraped = int(float(answered[0]["value"][1])) if answered else 0
            return len(targets) == len(pages) and all(t["health"] == "up" for t in targets) and scraped >= expected
        except (OSError, ValueError, KeyError):
            return False

    try:
        if not _poll(process, READY_TIMEOUT_S, 0.25, scraped_every_page):
            pytest.fail(f"prometheus was not ready within {READY_TIMEOUT_S} s (log: {root / 'prometheus.log'})")
        time.sleep(3)  # a few scrapes, so a range query has several points per series
        yield {"url": url, "pages": pages, "root": root}
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()
        exporter.terminate()
        exporter.wait(timeout=10)


@pytest.fixture(scope="module")
def from_files(prometheus: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The same text, as a drop folder the file parser reads (one folder per deployment)."""
    drop = tmp_path_factory.mktemp("drop")
    for path, text in prometheus["pages"].items():
        _, deployment, kind = path.split("/")
        (drop / deployment).mkdir(exist_ok=True)
        (drop / deployment / f"{kind}.prom").write_text(text, encoding="utf-8")
    return ingest_dir(drop)


def _sorted(frame: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    return frame.select(columns).sort(columns, nulls_last=True)


def test_instant_queries_give_the_rows_the_files_give(prometheus: dict[str, Any], from_files: Any) -> None:
    result = ingest_prometheus(prometheus["url"], lookback_s=0, step_s=1)
    assert result.check_reconciliation() == []
    summary = result.summary()
    assert summary["rows_in"] == summary["accepted"] + summary["rejected"] > 0
    # every sample: deployment identity, model, GPU, values (DCGM MiB -> bytes), one per series
    assert_frame_equal(_sorted(result.samples, SAMPLE_COLUMNS), _sorted(from_files.samples, SAMPLE_COLUMNS))
    assert set(result.samples["ts_source"]) == {"sample"}
    # every cache_config_info observation: num_gpu_blocks, block size, dtype, prefix caching, model
    columns = [c for c in from_files.observations.columns if c not in OBSERVATION_SKIP]
    assert_frame_equal(_sorted(result.observations, columns), _sorted(from_files.observations, columns))
    # one per deployment, but the two whose served name is an alias (their sidecar maps it; here none)
    assert result.observations.height == len([p for p in prometheus["pages"] if p.endswith("/vllm")]) - 2
    llama = result.observations.filter(pl.col("deployment_id") == "chat-llama8b-h100").row(0, named=True)
    assert (llama["model_id"], llama["num_gpu_blocks"], llama["block_size"]) == (
        "meta-llama/Llama-3.1-8B-Instruct", 26366, 16)  # fmt: skip
    # the same rejects, for the same reasons: served aliases no sidecar maps to a registry model
    reject_columns = ["deployment_id", "reason_code", "reason"]
    assert_frame_equal(_sorted(result.rejects, reject_columns), _sorted(from_files.rejects, reject_columns))
    assert set(result.rejects["reason_code"]) == {"unknown_model"}
    assert set(result.rejects["deployment_id"]) == {"chat-llama8b-fp8-l40s", "qwen3-next-h200-tp4"}
    assert set(result.files["encoding"]) == {"json"} and result.files.height == QUERIES


def test_range_queries_read_every_step_and_a_rerun_is_the_same(prometheus: dict[str, Any], from_files: Any) -> None:
    at = dt.datetime.now(dt.UTC)
    first = ingest_prometheus(prometheus["url"], lookback_s=4, step_s=1, at=at)
    second = ingest_prometheus(prometheus["url"], lookback_s=4, step_s=1, at=at)
    assert first.check_reconciliation() == []
    for a, b in zip(
        (first.observations, first.samples, first.rejects, first.files),
        (second.observations, second.samples, second.rejects, second.files),
        strict=True,
    ):
        assert_frame_equal(a, b)  # the same points, ids and line numbers: a re-run replaces
    per_series = first.samples.group_by(SAMPLE_COLUMNS).len()
    assert per_series.filter(pl.col("len") < 2).is_empty()  # several steps of each series
    assert_frame_equal(per_series.drop("len").sort(SAMPLE_COLUMNS, nulls_last=True),
                       _sorted(from_files.samples, SAMPLE_COLUMNS))  # fmt: skip
    assert first.samples.select("deployment_id", "metric", "source_metric", "engine_index", "gpu_index", "ts")\
        .is_duplicated().sum() == 0  # fmt: skip
    assert "query_range" in first.files["file"][0] and first.observations.height == from_files.observations.height


# --- hostile servers -------------------------------------------------------------------------------

GOOD_SERIES = {"__name__": "vllm:num_requests_running", "deployment": "d1", "engine": "0",
               "model_name": "meta-llama/Llama-3.1-8B-Instruct"}  # fmt: skip
SEEN_AUTH: list[str | None] = []


def _answer(result_type: str, result: list[Any]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": result_type, "result": result}}).encode()


class Answering(http.server.BaseHTTPRequestHandler):
    """A test server's handler: `_send` one whole answer; no request log on stderr."""

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class Hostile(Answering):
    """/<mode>/api/v1/...: how a broken server or proxy answers."""

    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        mode = self.path.split("/")[1]
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
        good = {**GOOD_SERIES, "__name__": query}
        SEEN_AUTH.append(self.headers.get("Authorization"))
        range_query = "query_range" in self.path
        kind, key = ("matrix", "values") if range_query else ("vector", "value")
        point: Any = [[1764547200, "3"], [1764547260, "4"]] if range_query else [1764547200, "3"]
        if mode == "garbage":
            self._send(200, b"<html>not json{")
        elif mode == "wrongshape":
            self._send(200, b'{"status": "success", "data": [1, 2]}')
        elif mode == "error":
            self._send(500, b'{"status":"error","errorType":"internal","error":"boom password=hunter2"}')
        elif mode == "huge":
            self.send_response(200)
            self.end_headers()  # no Content-Length: the size is only known while reading
            try:
                for _ in range(64):
                    self.wfile.write(b" " * (1 << 16))
            except OSError:  # the client stopped reading at its limit
                pass
        elif mode == "slow":
            time.sleep(2)
            self._send(200, _answer(kind, []))
        elif mode == "trickle":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(40):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass
        elif mode == "trickleheaders":  # the status line and headers a byte at a time
            try:
                for byte in b"HTTP/1.0 200 OK\r\nX-Padding: " + b"x" * 60:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass
        elif mode == "histograms":  # d1 has a good ITL histogram over two steps, d2 buckets that decrease
            base = {k: v for k, v in good.items() if k != "__name__"}
            result = []
            if query == "vllm:inter_token_latency_seconds_bucket":
                for deployment, counts in (("d1", ((0, 0, 0), (20, 40, 40))), ("d2", ((5, 3, 6), (5, 3, 6)))):
                    for i, le in enumerate(("0.02", "0.05", "+Inf")):
                        values = [[1764547200, str(counts[0][i])], [1764547260, str(counts[1][i])]]
                        result.append({"metric": {**base, "__name__": query, "deployment": deployment, "le": le},
                                       "values": values})  # fmt: skip
            elif query == "vllm:generation_tokens_total":
                result.append({"metric": {**base, "__name__": query}, "values": [[1764547200, "100"], [1764547260, "6100"]]})
            self._send(200, _answer(kind, result if range_query else []))
        elif mode == "badseries":
            bad_points = [[1764547200, "NaN"], ["soon", "1"], [1764547200], [1764547260, "1e400"], [1764547320, "-2"]]
            result = [
                {"metric": good, key: point},
                {"metric": "not a dict", key: point},
                {"metric": {**good, "engine": 7}, key: point},
                {"metric": {k: v for k, v in good.items() if k != "deployment"}, key: point},
                {"metric": {**good, "deployment": "d2", "model_name": "acme/unknown"}, key: point},
                {"metric": {**good, "deployment": "d3"}, key: bad_points if range_query else bad_points[0]},
                {"metric": {**good, "bad label": "x"}, key: point},
            ]
            self._send(200, _answer(kind, result))
        else:
            self._send(200, _answer(kind, [{"metric": good, key: point}] if query == "vllm:num_requests_running" else []))



@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    server, url = serve(Hostile)
    yield url
    server.shutdown()


def _one_line_rejects(result: Any) -> list[str]:
    assert result.check_reconciliation() == []
    s = result.summary()
    assert s["rows_in"] == s["accepted"] + s["rejected"]
    reasons = [str(r) for r in result.rejects["reason"]]
    assert all("\n" not in r and "Traceback" not in r for r in reasons)
    return reasons


@pytest.mark.parametrize(
    ("mode", "code", "says"),
    [
        ("garbage", "malformed", "not JSON"),
        ("wrongshape", "malformed", "no data.result"),
        ("error", "unreadable", "HTTP 500"),
        ("huge", "too_large", "byte limit"),
    ],
)
def test_a_broken_answer_is_one_reject_per_query(hostile: str, mode: str, code: str, says: str) -> None:
    result = ingest_prometheus(f"{hostile}/{mode}", lookback_s=60, step_s=60, timeout_s=5,
                               max_response_bytes=1 << 20)  # fmt: skip
    reasons = _one_line_rejects(result)
    assert result.rejects.height == result.files.height == QUERIES
    assert set(result.rejects["reason_code"]) == {code} and all(says in r for r in reasons)
    assert all(f"{hostile}/{mode}/api/v1/" in r for r in reasons)  # names the URL
    assert not any("hunter2" in r for r in reasons)
    if mode == "error":  # Prometheus's own message, redacted once however often it is cleaned
        assert reasons[0].endswith(": boom password=[REDACTED]")


@pytest.mark.parametrize("mode", ["slow", "trickle", "trickleheaders"])
def test_a_slow_server_costs_one_timeout(hostile: str, mode: str) -> None:
    started = time.monotonic()
    result = ingest_prometheus(f"{hostile}/{mode}", lookback_s=60, step_s=60, timeout_s=0.5)
    assert time.monotonic() - started < 1.8  # one timeout, then the other queries are not sent
    reasons = _one_line_rejects(result)
    assert set(result.rejects["reason_code"]) == {"unreadable"} and result.rejects.height == QUERIES
    assert "0.5 s" in reasons[0] and sum("not queried" in r for r in reasons) == QUERIES - 1


def test_a_dead_server_and_a_bad_url() -> None:
    port = _free_port()
    result = ingest_prometheus(f"http://127.0.0.1:{port}", timeout_s=1)
    reasons = _one_line_rejects(result)
    assert "cannot reach" in reasons[0] and result.rejects.height == QUERIES
    for url in ("ftp://prom", "not a url", "http://[::1"):
        bad = ingest_prometheus(url)
        assert _one_line_rejects(bad) and bad.files.height == 1 and set(bad.rejects["reason_code"]) == {"unreadable"}
    bad = ingest_prometheus(f"http://127.0.0.1:{port}", step_s=0)
    assert _one_line_rejects(bad) and set(bad.rejects["reason_code"]) == {"bad_value"}


def test_bad_series_and_points_are_rows_rejected_with_a_reason(hostile: str) -> None:
    result = ingest_prometheus(f"{hostile}/badseries", lookback_s=60, step_s=60)
    _one_line_rejects(result)
    running = result.files.filter(pl.col("file").str.contains("num_requests_running")).row(0, named=True)
    rejects = result.rejects.filter(pl.col("file") == running["file"])
    codes = dict(rejects["reason_code"].value_counts().iter_rows())
    assert codes == {
        "malformed": 2 + 2 + 2,  # two entries that are not series, two bad points, a label name Prometheus refuses
        "missing_field": 2,  # each point of the series without a deployment label
        "not_finite": 2,  # NaN, and 1e400 (inf)
        "negative": 1,
        "unknown_model": 2,
    }
    assert rejects["line"].is_null().sum() == 0 and rejects["line"].n_unique() == rejects.height
    assert running["accepted"] == 2 and running["rows_in"] == running["accepted"] + running["rejected"]
    assert set(result.samples.filter(pl.col("file") == running["file"])["deployment_id"]) == {"d1"}


def test_basic_auth_is_sent_and_never_shown(hostile: str) -> None:
    SEEN_AUTH.clear()
    url = hostile.replace("http://", "http://capplan:s3cr%40t@") + "/ok"
    result = ingest_prometheus(url, lookback_s=60, step_s=60)
    assert result.samples.height == 2 and result.rejects.is_empty()
    assert set(SEEN_AUTH) == {"Basic Y2FwcGxhbjpzM2NyQHQ="}  # capplan:s3cr@t
    for frame in (result.files, result.samples, result.observations):
        text = frame.write_csv()
        assert "s3cr" not in text and "Y2FwcGxh" not in text


# --- the Dagster asset -----------------------------------------------------------------------------


@pytest.mark.slow  # two whole pipeline runs of its own (the slow group holds those)
def test_the_nightly_assets_read_both_sources_twice(prometheus: dict[str, Any], tmp_path: Path) -> None:
    """Real Dagster runs (registry + telemetry groups) with a drop folder and the Prometheus URL
    (with credentials that must show up nowhere): both sources land in raw.telemetry_*, the
    reconciliation check passes, a second run replaces the rows."""
    import dagster as dg
    import duckdb

    from pipelines.definitions import build_definitions
    from pipelines.resources import PlanningResource, RegistryResource, WarehouseResource
    from tests.test_telemetry_pipeline import Env

    env = Env(tmp_path)
    url = prometheus["url"].replace("http://", "http://capplan:n0t-shown@")
    resources = {
        "registry": RegistryResource(url=env.registry_url, catalog_dir=str(env.catalog)),
        "warehouse": WarehouseResource(path=str(env.warehouse)),
        # a 30 s look-back: a scrape delayed by a loaded machine still leaves every series a point in the window
        "planning": PlanningResource(telemetry_dir=str(env.drop), prometheus_url=url, prometheus_lookback_s=30,
                                     prometheus_step_s=1, prometheus_timeout_s=10),
    }  # fmt: skip
    defs = build_definitions()
    selection = dg.AssetSelection.groups("registry", "gpu_catalog", "telemetry") | dg.AssetSelection.assets(
        dg.AssetKey(["marts", "runs"])
    )
    counts: list[tuple[Any, ...]] = []
    for _ in range(2):
        result = dg.materialize(
            [*(defs.assets or []), *(defs.asset_checks or [])],  # type: ignore[list-item]
            selection=selection,
            resources=resources,
            raise_on_error=False,
        )
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        checks = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        assert {c.check_name: c.passed for c in checks}.get("telemetry_reconciles") is True  # type: ignore[union-attr]
        assert "n0t-shown" not in str([e.event_specific_data for e in result.all_events])
        con = duckdb.connect(str(env.warehouse), read_only=True)
        try:
            sources = dict(con.execute(
                "select telemetry_source, count(*) from raw.telemetry_files group by all").fetchall())  # fmt: skip
            assert set(sources) == {"drop_folder", "prometheus"} and sources["prometheus"] == QUERIES
            assert all(
                "n0t-shown" not in str(row) for row in con.execute("select * from raw.telemetry_files").fetchall()
            )
            counts.append(*con.execute(
                "select (select count(*) from raw.telemetry_observations where file like 'http%'), "
                "(select count(*) from raw.telemetry_samples where deployment_id = 'chat-llama8b-h100'), "
                "(select count(*) from (select distinct deployment_id, metric, source_metric, engine_index, "
                "gpu_index, ts from raw.telemetry_samples)) = (select count(*) from raw.telemetry_samples)"
            ).fetchall())  # fmt: skip
        finally:
            con.close()
    # the registry knows Llama-3.1-8B: its deployments' cache_config_info are observations, every run once
    assert counts[0][0] == counts[1][0] == 2
    assert all(c[1] > 0 and c[2] for c in counts)


def test_histograms_through_the_api_give_the_rows_the_files_give(hostile: str) -> None:
    """Each bucket series of a range query is one row per point; one time's buckets are checked
    together as in a file: d2's decreasing buckets are rejected whole, d1's give the quantiles."""
    from telemetry.summary import deployment_summary

    result = ingest_prometheus(f"{hostile}/histograms", lookback_s=60, step_s=60)
    _one_line_rejects(result)
    assert set(result.rejects["reason_code"]) == {"bad_histogram"} and result.rejects.height == 6  # 3 le x 2 points
    assert set(result.rejects["deployment_id"]) == {"d2"}
    got = {r["deployment_id"]: r for r in deployment_summary(result.observations.lazy(), result.samples.lazy())
           .collect().iter_rows(named=True)}  # fmt: skip
    # d1: increases le 0.02: 20, 0.05: 40, +Inf: 40; p50 = rank 20 = the top of (0, 0.02]
    assert got["d1"]["measured_tpot_p50_ms"] == pytest.approx(20.0, rel=1e-12)
    assert got["d1"]["measured_tpot_p99_ms"] == pytest.approx(20 + 30 * 19.6 / 20, rel=1e-12)
    assert got["d1"]["measured_output_tokens_per_second"] == pytest.approx(100.0, rel=1e-12)  # 6,000 in 60 s
