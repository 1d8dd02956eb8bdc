"""Issue 25 (second round), the Prometheus API ingest against hostile URLs and answers.

Every server here is an http.server on 127.0.0.1 started by the test; every secret is planted in
the URL the user sets and looked for in every frame, reason, output and file the run leaves.
"""

from __future__ import annotations

import base64
import json
import string
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from models_registry.redact import MARK, redact, redact_url
from telemetry.ingest import ingest_dir
from telemetry.normalize import RowError, one_line
from telemetry.prometheus_api import PrometheusClient, PrometheusSettings, ingest_prometheus
from tests.test_telemetry_prometheus_api import Answering, serve

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
QUERIES = 38  # one per metric read: tests/test_telemetry_prometheus_api.py says which
RESERVED = [*":/?#[]@!$&'()*+,;=%", " ", "ü", "密", "\u202e", "%41", "%zz", "://"]
SEEN: list[tuple[str, str | None]] = []  # (path, Authorization) of every request


def _answer(result_type: str, result: list[Any]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": result_type, "result": result}}).encode()


def _series(query: str, labels: dict[str, str], points: list[Any]) -> dict[str, Any]:
    return {"metric": {"__name__": query, "engine": "0", "model_name": MODEL, **labels}, "values": points}


class Server(Answering):
    """/<mode>/api/v1/...: the answers of the cases below."""

    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        SEEN.append((self.path, self.headers.get("Authorization")))
        mode = self.path.split("/")[1]
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("query", [""])[0]
        if "query_range" not in self.path:
            return self._send(200, _answer("vector", []))
        running = query == "vllm:num_requests_running"
        if mode == "ok":
            result = [_series(query, {"deployment": "d1"}, [[1764547200, "3"], [1764547260, "4"]])] if running else []
        elif mode == "echo":  # a proxy that quotes the request's headers in its error
            error = f"denied: Authorization: {self.headers.get('Authorization')} for {self.path}"
            return self._send(401, json.dumps({"status": "error", "error": error}).encode())
        elif mode == "stamps":  # one good series whose points are good and bad in turn
            points = [[1764547200, "1"], [1e300, "2"], [1764547260, "3"], [-5, "4"], ["NaN", "5"],
                      [1764547320, "6"], [1764547380, "seven"], [1764547440, "1_000"], [4102444800, "9"]]  # fmt: skip
            text = json.dumps([_series(query, {"deployment": "d1"}, points)]).replace('"NaN"', "NaN")
            body = _answer("matrix", []).replace(b"[]", text.encode()) if running else _answer("matrix", [])
            return self._send(200, body)
        elif mode == "claims":
            result = self._claims(query) if running else []
        elif mode == "toftp":
            return self._redirect("ftp://127.0.0.1/x")
        elif mode == "loop":
            return self._redirect(self.path)
        elif mode == "hop":
            return self._redirect(self.path.replace("/hop/", "/ok/", 1))
        elif mode == "big":  # 10 series of 100 points each
            points = [[1764547200 + 60 * i, "1"] for i in range(100)]
            result = [_series(query, {"deployment": f"d{n}"}, points) for n in range(10)] if running else []
        elif mode == "slow":
            time.sleep(2)
            result = []
        else:
            result = []
        self._send(200, _answer("matrix", result))

    def _claims(self, query: str) -> list[dict[str, Any]]:
        point = [[1764547200, "3"]]
        return [
            _series(query, {"deployment": "d1", "deployment_id": "victim"}, point),  # only `deployment` counts
            _series(query, {"deployment_id": "victim"}, point),  # no `deployment`: rejected, not 'victim'
            _series(query, {"deployment": 'd2"} 9 1 vllm:num_requests_running{deployment_id="victim'}, point),
            {"metric": {"__name__": query, "deployment": "d3", 'x="1",deployment_id': "victim"}, "values": point},
            {"metric": {"__name__": "vllm:num_requests_waiting", "deployment": "victim"}, "values": point},
            _series(query, {"deployment": "nul\x00id"}, point),
            _series(query, {"deployment": "rtl\u202eid"}, point),
            _series(query, {"deployment": "zero\u200bwidth"}, point),
            _series(query, {"deployment": "line\u2028sep"}, point),
            _series(query, {"deployment": "x" * 201}, point),
            _series(query, {"deployment": "d4", "app": "a4"}, point),
        ]

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()



@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd, url = serve(Server)
    yield url
    httpd.shutdown()


def _text(result: Any) -> str:
    """Every frame of an ingest as CSV text."""
    return "\n".join(f.write_csv() for f in (result.observations, result.samples, result.rejects, result.files))


def _reconciles(result: Any) -> None:
    assert result.check_reconciliation() == []
    assert all("\n" not in r for r in result.rejects["reason"])


# --- credentials with every reserved character ----------------------------------------------------


# every reserved character in the password; in the user name all but ':', which is where the
# password starts (RFC 3986: a user name writes it %3A)
CREDENTIAL_CASES = [("password", c) for c in RESERVED] + [("user", c) for c in RESERVED if ":" not in c]


@pytest.mark.parametrize(("where", "char"), CREDENTIAL_CASES)
def test_a_reserved_character_in_the_credentials_is_sent_and_never_shown(server: str, char: str, where: str) -> None:
    user = f"usrSEKRa{char}Qz" if where == "user" else "capplan"
    password = f"pwSEKRb{char}Qz" if where == "password" else "pw"
    url = server.replace("http://", f"http://{user}:{password}@") + "/ok"
    SEEN.clear()
    result = ingest_prometheus(url, lookback_s=60, step_s=60)
    _reconciles(result)
    assert result.samples.height == 2 and result.rejects.is_empty()
    sent = {auth for _, auth in SEEN}
    expected = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
    assert sent == {"Basic " + base64.b64encode(expected).decode()}
    text = _text(result) + PrometheusSettings(url).describe()
    assert "SEKR" not in text and base64.b64encode(expected).decode()[:12] not in text
    assert f"{server}/ok/api/v1/query_range" in text  # the URL is still named, without its credentials


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    user=st.text(max_size=20),
    password=st.text(min_size=1, max_size=40),
    before=st.text(max_size=30),
    after=st.text(max_size=30),
    scheme=st.sampled_from(["http", "https", "HTTP", "postgresql+psycopg", "s3", ""]),
)
def test_no_generated_password_survives_redaction(
    user: str, password: str, before: str, after: str, scheme: str
) -> None:
    secret = "Zq9" + password
    assume(secret not in before + after)
    url = f"{scheme}://{user}:{secret}@prom.example:9090/prefix"
    for text in (f"{before}{url}{after}", f"{before} {url} {after}", url):
        redacted = redact(text)
        assert secret not in redacted and MARK in redacted
        assert redact(redacted) == redacted  # idempotent: cleaned again with every frame
        assert secret not in one_line(text, 300)
    assert secret not in redact_url(url) and secret not in redact_url(f"{user}:{secret}@prom:9090")


@settings(max_examples=300, deadline=None)
@given(user=st.text(max_size=20), password=st.text(min_size=1, max_size=40), tail=st.text(max_size=20))
def test_no_generated_password_reaches_a_reason_or_a_display(user: str, password: str, tail: str) -> None:
    """Whatever the URL holds, `from_url` reads it or refuses it in one line, and neither its
    display nor its reason holds the password."""
    secret = "Zq9" + password
    for url in (f"http://{user}:{secret}@prom:9090{tail}", f"{user}:{secret}@prom{tail}", f"https://{user}:{secret}@"):
        assume(secret not in tail)
        try:
            client = PrometheusClient.from_url(url)
        except RowError as exc:
            assert secret not in exc.reason and "\n" not in exc.reason
        else:
            assert secret not in client.display_url and secret not in client.base_url
        settings_ = PrometheusSettings(url)
        assert secret not in settings_.describe()


@settings(max_examples=200, deadline=None)
@given(
    key=st.sampled_from(["token", "password", "apikey", "api_key", "access_token", "X-Amz-Signature", "auth"]),
    value=st.text(min_size=1, max_size=40),
    bearer=st.text(alphabet=string.ascii_letters + string.digits + "-._~+/", min_size=8, max_size=40),
)
def test_query_parameters_and_headers_are_redacted(key: str, value: str, bearer: str) -> None:
    secret = urllib.parse.quote("Zq9" + value, safe="")
    for text in (f"GET https://prom/api/v1/query?query=up&{key}={secret}&x=1", f"{key}: {secret}"):
        assert secret not in redact(text)
    for text in (f"Authorization: Bearer Zq9{bearer}", f"curl -H 'authorization: basic Zq9{bearer}'"):
        assert f"Zq9{bearer}" not in redact(text)


def test_a_server_quoting_the_credentials_back_is_redacted(server: str) -> None:
    url = server.replace("http://", "http://capplan:pw%2FSEKR%23x@") + "/echo"
    result = ingest_prometheus(url, lookback_s=60, step_s=60)
    _reconciles(result)
    assert set(result.rejects["reason_code"]) == {"unreadable"} and "HTTP 401" in result.rejects["reason"][0]
    secret = base64.b64encode(b"capplan:pw/SEKR#x").decode()
    assert secret not in _text(result) and "SEKR" not in _text(result)


# --- per-point checks, deployment ids ---------------------------------------------------------------


def test_a_bad_timestamp_or_value_rejects_its_point_only(server: str) -> None:
    result = ingest_prometheus(f"{server}/stamps", lookback_s=60, step_s=60)
    _reconciles(result)
    running = result.samples.filter(pl.col("source_metric") == "vllm:num_requests_running")
    assert sorted(running["value"]) == [1.0, 3.0, 6.0]
    codes = dict(result.rejects["reason_code"].value_counts().iter_rows())
    assert codes == {"bad_timestamp": 4, "malformed": 2}  # 1e300, -5, NaN, 2100-01-01; 'seven', '1_000'
    assert result.rejects["line"].null_count() == 0


def test_deployment_ids_come_from_the_named_label_only_and_are_checked(server: str) -> None:
    result = ingest_prometheus(f"{server}/claims", lookback_s=60, step_s=60)
    _reconciles(result)
    assert "victim" not in set(result.samples["deployment_id"])
    assert set(result.samples["deployment_id"]) == {
        "d1",
        'd2"} 9 1 vllm:num_requests_running{deployment_id="victim',
        "d4",
    }
    rejects = result.rejects
    assert dict(rejects["reason_code"].value_counts().iter_rows()) == {
        "missing_field": 1,  # deployment_id alone
        "malformed": 2,  # a label name the text format cannot carry, another metric's name
        "bad_value": 5,  # NUL, RLO, zero-width space, line separator, 201 characters
    }
    assert all("deployment id" in r for r in rejects.filter(pl.col("reason_code") == "bad_value")["reason"])
    by_app = ingest_prometheus(f"{server}/claims", lookback_s=60, step_s=60, deployment_label="app")
    assert set(by_app.samples["deployment_id"]) == {"a4"}
    bad = ingest_prometheus(f"{server}/claims", deployment_label='x"} 1')
    assert set(bad.rejects["reason_code"]) == {"bad_value"} and bad.files.height == 1


def test_deployment_ids_with_hidden_characters_are_refused_in_files_too(tmp_path: Path) -> None:
    lines = [
        f'vllm:num_requests_running{{deployment="{dep}",model_name="{MODEL}"}} 3 1764547200000'
        for dep in ("good", "rtl\u202eid", "bell\x07", "x" * 300)
    ]
    (tmp_path / "fleet.prom").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = ingest_dir(tmp_path)
    _reconciles(result)
    assert set(result.samples["deployment_id"]) == {"good"}
    assert list(result.rejects["reason_code"]) == ["bad_value"] * 3


# --- redirects, budgets ------------------------------------------------------------------------------


def test_redirects_stay_on_http_and_are_bounded(server: str) -> None:
    started = time.monotonic()
    to_ftp = ingest_prometheus(f"{server}/toftp", lookback_s=60, step_s=60)
    _reconciles(to_ftp)
    assert set(to_ftp.rejects["reason_code"]) == {"unreadable"} and to_ftp.samples.is_empty()
    assert "only redirects to http(s)" in to_ftp.rejects["reason"][0]
    SEEN.clear()
    loop = ingest_prometheus(f"{server}/loop", lookback_s=60, step_s=60)
    assert "HTTP 302" in loop.rejects["reason"][0]
    first = [p for p, _ in SEEN if "num_requests_running" in p and "query_range" in p]
    assert len(first) <= 6  # the request and at most 5 redirects
    hop = ingest_prometheus(f"{server}/hop", lookback_s=60, step_s=60)
    assert hop.samples.height == 2 and hop.rejects.is_empty()
    assert time.monotonic() - started < 20


def test_the_points_budget_keeps_whole_series_and_says_why(server: str) -> None:
    result = ingest_prometheus(f"{server}/big", lookback_s=6000, step_s=60, max_points=550)
    _reconciles(result)
    per_series = result.samples.group_by("deployment_id").len()
    assert per_series.height == 5 and set(per_series["len"]) == {100}  # whole series only (5 x 101 <= 550)
    budget = result.rejects.filter(pl.col("reason_code") == "too_large")
    assert budget.height >= 1 and "budget of 550 points" in budget["reason"][0]
    assert "the rest of this answer was not read" in budget["reason"][0]
    assert sum("not queried" in r for r in result.rejects["reason"]) >= QUERIES - 5


def test_the_time_budget_bounds_the_whole_ingest(server: str) -> None:
    started = time.monotonic()
    result = ingest_prometheus(f"{server}/slow", lookback_s=60, step_s=60, timeout_s=30, budget_s=0.5)
    assert time.monotonic() - started < 2.0
    _reconciles(result)
    assert result.rejects.height == QUERIES and set(result.rejects["reason_code"]) <= {"unreadable", "too_large"}
    assert "0.5 s" in result.rejects["reason"][0]


# --- the real nightly: stdout, stderr, the sample store, the warehouse, Dagster's storage ------------


@pytest.mark.slow  # a whole nightly of its own (the slow group holds those)
def test_a_nightly_with_such_a_url_leaves_the_credentials_nowhere(server: str, tmp_path: Path) -> None:
    """`capplan nightly` (its own process, a persistent Dagster instance under var/dagster, the
    sample store under var/) with a URL whose user and password hold every reserved character:
    the answers are read (samples in the store, rejects naming the URL in raw.telemetry_rejects),
    the credentials were sent, and no byte of them is in the output or in any file or table."""
    import os
    import subprocess
    import sys

    import duckdb

    from tests.test_warehouse_fixtures import write_catalog

    user, password = "capSEKRu", "pw/SEKR#?[]@!$&'()*+,;=%zz ü密\u202e://x"
    url = server.replace("http://", f"http://{user}:{password}@") + "/claims"
    credentials = base64.b64encode(f"{user}:{password}".encode()).decode()
    catalog = write_catalog(tmp_path / "catalog", (MODEL,), ("h100-sxm-80gb",))
    (tmp_path / "drop").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAPPLAN_", "DAGSTER_HOME"))}
    env |= {
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        "CAPPLAN_REGISTRY_URL": f"sqlite:///{tmp_path / 'var' / 'registry.db'}",
        "CAPPLAN_WAREHOUSE": str(tmp_path / "var" / "warehouse.duckdb"),
        "CAPPLAN_CATALOG_DIR": str(catalog),
        "CAPPLAN_TELEMETRY_DIR": str(tmp_path / "drop"),
        "CAPPLAN_TELEMETRY_STORE": str(tmp_path / "var" / "store"),
        "CAPPLAN_PROMETHEUS_URL": url,
        "CAPPLAN_PROMETHEUS_LOOKBACK_S": "60",
        "CAPPLAN_PROMETHEUS_STEP_S": "60",
        "CAPPLAN_PROMETHEUS_TIMEOUT_S": "10",
    }
    SEEN.clear()
    run = subprocess.run(
        [sys.executable, "-c", "from pipelines.cli import main; main()", "nightly"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert {auth for path, auth in SEEN if "/claims/" in path} == {f"Basic {credentials}"}  # they were sent
    assert f"{server}/claims" in run.stdout  # and the URL is named, without them
    fragments = ("SEKR", credentials[:16])
    for fragment in fragments:
        assert fragment not in run.stdout and fragment not in run.stderr
    files = [p for p in (tmp_path / "var").rglob("*") if p.is_file() and not p.is_symlink()]
    assert any("dagster" in p.parts for p in files) and any(p.suffix == ".parquet" for p in files)
    leaks = [
        (str(p.relative_to(tmp_path)), f)
        for p in files
        for f in fragments
        if f.encode() in p.read_bytes() or f.encode("utf-16-le") in p.read_bytes()
    ]
    stored = [pl.read_parquet(p) for p in files if p.suffix == ".parquet"]  # compressed: read, then searched
    assert sum(frame.height for frame in stored) > 0
    leaks += [("store", f) for frame in stored for f in fragments if f in frame.write_csv()]
    con = duckdb.connect(str(tmp_path / "var" / "warehouse.duckdb"), read_only=True)
    try:
        tables = con.execute(
            "select table_schema, table_name from information_schema.tables where table_type = 'BASE TABLE'"
        ).fetchall()
        for schema, table in tables:
            text = str(con.execute(f'select * from "{schema}"."{table}"').fetchall())
            leaks += [(f"{schema}.{table}", f) for f in fragments if f in text]
        rejects = con.execute("select file, reason_code from raw.telemetry_rejects where file like 'http%'").fetchall()
    finally:
        con.close()
    assert leaks == []
    assert rejects and all(file.startswith(f"{server}/claims/api/v1/") for file, _ in rejects)
    assert {code for _, code in rejects} >= {"bad_value", "malformed", "missing_field"}


@pytest.mark.parametrize("size", [1, 2, 5, 64])
def test_batches_of_any_size_give_the_same_rows(server: str, size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer is parsed a batch of points at a time (a long series split, the buckets of a
    histogram at one time kept together): the rows do not depend on the batch size."""
    from telemetry import prometheus_api
    from tests.test_telemetry_prometheus_api import Hostile

    httpd, hostile = serve(Hostile)
    try:
        cases = [f"{hostile}/histograms", f"{hostile}/badseries", f"{server}/big", f"{server}/stamps"]
        whole = [ingest_prometheus(url, lookback_s=60, step_s=60) for url in cases]
        monkeypatch.setattr(prometheus_api, "_BATCH_LINES", size)
        batched = [ingest_prometheus(url, lookback_s=60, step_s=60) for url in cases]
    finally:
        httpd.shutdown()
    for one, other in zip(whole, batched, strict=True):
        _reconciles(other)
        assert one.summary() == other.summary()
        columns = [c for c in one.samples.columns if c != "line"]
        assert (
            one.samples.select(columns)
            .sort(columns, nulls_last=True)
            .equals(other.samples.select(columns).sort(columns, nulls_last=True))
        )
        codes = ["file", "reason_code", "deployment_id"]
        assert (
            one.rejects.select(codes)
            .sort(codes, nulls_last=True)
            .equals(other.rejects.select(codes).sort(codes, nulls_last=True))
        )
        assert one.observations.height == other.observations.height
    assert set(batched[0].rejects["reason_code"]) == {"bad_histogram"}  # d2's buckets, found across batches too


@pytest.mark.slow
def test_peak_memory_of_big_answers_is_bounded() -> None:
    """benchmarks/prometheus_answers.py in its own process (a test-sized case; the benchmark-sized
    numbers are in its docstring): one series of 300,000 points, then the budget cuts the ingest.
    Before issue 25 the one series alone peaked at about 650 MB (the JSON tree, every line and its
    dicts at once); read into columns and parsed 16,384 points at a time it stays near 330 MB."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, str(root / "benchmarks" / "prometheus_answers.py"), "--shape", "points",
               "--points", "300000", "--queries", "3", "--max-points", "450000", "--kill-mb", "2000"]  # fmt: skip
    run = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    assert measured["samples"] == 300_000  # the first query's series whole, the second's not at all
    assert any("budget of 450,000 points is spent" in r for r in measured["first_reasons"])
    assert measured["peak_rss_mb"] - measured["start_mb"] < 400, measured


@pytest.mark.parametrize("length", [10, 2_000, 20_000, 100_000])
def test_a_cut_inside_a_long_password_leaves_none_of_it(length: int) -> None:
    """Messages and excerpts are cut before they are redacted (a 1 MB line is not redacted whole):
    a cut inside the userinfo must not leave its start behind."""
    from telemetry.normalize import excerpt, short

    secret = ("Zq9/#" * length)[:length]
    text = f"GET http://capplan:{secret}@prom:9090/api failed"
    for cut in (one_line(text, 80), one_line(text), excerpt(text) or "", short(text), redact(text)):
        assert "Zq9" not in cut and MARK in cut


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=st.text(max_size=12).filter(lambda u: ":" not in u), password=st.text(max_size=24))
def test_any_generated_credentials_are_sent_and_never_stored(server: str, user: str, password: str) -> None:
    """The real path, Hypothesis's passwords: an ingest against the local server sends exactly the
    credentials written (percent-decoded), reads the answer, and no frame holds them."""
    secret = "Zq9" + password
    url = server.replace("http://", f"http://{user}:{secret}@") + "/ok"
    SEEN.clear()
    result = ingest_prometheus(url, lookback_s=60, step_s=60)
    assert result.samples.height == 2 and result.rejects.is_empty()
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(secret)}".encode()
    assert {auth for _, auth in SEEN} == {"Basic " + base64.b64encode(pair).decode()}
    text = _text(result)
    assert secret not in text and urllib.parse.unquote(secret) not in text
    assert base64.b64encode(pair).decode() not in text


@pytest.mark.parametrize("bad", ["rtl\u202eid", "bell\x07id", "zero\u200bwidth", "x" * 300])
def test_every_way_an_id_comes_in_passes_the_same_check(tmp_path: Path, bad: str) -> None:
    """A CSV column, a sidecar, a folder name and a log's `# deployment_id:` line: each refuses an id
    with a hidden character or over the length limit (`bad_value`), keeps the good rows beside it,
    and stores the refused id nowhere."""
    log = "INFO 12-01 00:00:00 [gpu_worker.py:1] GPU KV cache size: 1,000 tokens\n"
    (tmp_path / "rows.csv").write_text(
        f"deployment_id,model,kv_cache_memory_gib\ngood,{MODEL},50\n{bad},{MODEL},50\n", encoding="utf-8"
    )
    (tmp_path / "start.log").write_text(f"# deployment_id: {bad}\n{log}", encoding="utf-8")
    sidecar_dir = tmp_path / "sidecar"
    sidecar_dir.mkdir()
    (sidecar_dir / "deployment.json").write_text(json.dumps({"deployment_id": bad}), encoding="utf-8")
    (sidecar_dir / "server.log").write_text(log, encoding="utf-8")
    folder = bad if len(bad) < 200 else "long"  # a file name holds at most 255 bytes
    named = tmp_path / folder
    named.mkdir()
    (named / "server.log").write_text(log, encoding="utf-8")
    result = ingest_dir(tmp_path)
    _reconciles(result)
    refused = result.rejects.filter(pl.col("reason_code") == "bad_value")
    expected = 3 if len(bad) > 200 else 4  # the csv row, the directive, the sidecar (+ the folder's log)
    assert refused.height == expected, result.rejects.to_dicts()
    assert all("deployment id" in reason for reason in refused["reason"])
    assert "good" in set(result.observations["deployment_id"])
    for frame_ in (result.observations, result.samples, result.rejects):
        assert not any(bad in str(v) for v in frame_["deployment_id"].to_list())
