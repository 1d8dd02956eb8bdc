"""`capplan registry ingest --hub` against a Hub that answers from 127.0.0.1, and one that does not.

The CLI runs as a real process with HF_ENDPOINT pointing at a small HTTP server in this test (the
endpoint is read once, at huggingface_hub's import): a closed port must fail fast with the reason
and the way to go offline, a gated repo must name HF_TOKEN without printing it, and a served repo
lands in the registry with the commit the server reported.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "broken_configs"
CONFIG = (FIXTURES / "valid-llama" / "config.json").read_bytes()
COMMIT = "0123456789abcdef0123456789abcdef01234567"
SECRET = "hf_NotARealTokenButSecret0123456789"
FAIL_FAST_S = 5.0  # the whole CLI process, imports included; hf_hub_download's own backoff alone is ~25 s


class FakeHub(BaseHTTPRequestHandler):
    """`/<org>/<name>/resolve/<rev>/<file>`: acme/served has a config.json, acme/gated is gated."""

    seen_auth: list[str | None] = []  # noqa: RUF012  (one server per test; reset by the fixture)

    def _answer(self, body: bool) -> None:
        FakeHub.seen_auth.append(self.headers.get("Authorization"))
        parts = self.path.split("/")
        repo, filename = "/".join(parts[1:3]), parts[-1]
        if repo == "acme/gated":
            self._send(401, {"X-Error-Code": "GatedRepo", "X-Error-Message": "gated"}, b"")
        elif repo == "acme/served" and filename == "config.json":
            headers = {"X-Repo-Commit": COMMIT, "ETag": '"cfg-etag"', "Content-Length": str(len(CONFIG))}
            self._send(200, headers, CONFIG if body else b"")
        elif repo == "acme/served":
            self._send(404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT}, b"")
        else:
            self._send(404, {"X-Error-Code": "RepoNotFound"}, b"")

    def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def fake_hub() -> Iterator[str]:
    FakeHub.seen_auth = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def closed_port() -> str:
    """An endpoint on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _ingest(tmp_path: Path, endpoint: str, *repos: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {
        "HF_ENDPOINT": endpoint,
        "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
        "HF_TOKEN": SECRET,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "CAPPLAN_REGISTRY_URL": f"sqlite:///{tmp_path / 'registry.db'}",
    }
    args = [arg for repo in repos for arg in ("--hub", repo)]
    code = "from pipelines.cli import main; main()"
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", code, "registry", "ingest", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    return result, time.perf_counter() - start


def test_an_unreachable_hub_fails_fast_with_the_reason(tmp_path: Path, closed_port: str) -> None:
    result, elapsed_s = _ingest(tmp_path, closed_port, "acme/not-cached")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert elapsed_s < FAIL_FAST_S, f"took {elapsed_s:.1f} s"
    assert "cannot reach the Hugging Face Hub" in result.stdout and closed_port in result.stdout
    assert "HF_HUB_OFFLINE=1" in result.stdout and "no config.json" not in result.stdout
    assert result.stderr.count("\n") == 1 and "1 of 1 requested repo(s) not ingested" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bundled_repo_needs_no_hub(tmp_path: Path, closed_port: str) -> None:
    result, _ = _ingest(tmp_path, closed_port, "meta-llama/Llama-2-7b-hf")
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stderr == ""


def test_served_gated_and_missing_repos(tmp_path: Path, fake_hub: str) -> None:
    result, _ = _ingest(tmp_path, fake_hub, "acme/served", "acme/gated", "acme/nope")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "2 of 3 requested repo(s) not ingested" in result.stderr
    assert re.search(r"^models\s+3\s+1\s+0\s+0\s+2$", result.stdout, re.MULTILINE), result.stdout
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if line.startswith("  model ")}
    assert "gated" in lines["acme/gated"] and "HF_TOKEN" in lines["acme/gated"]
    assert "repository not found" in lines["acme/nope"]
    assert SECRET not in result.stdout + result.stderr
    assert f"Bearer {SECRET}" in FakeHub.seen_auth  # HF_TOKEN is sent to the Hub, and only there
    cached = tmp_path / "hf-cache" / "models--acme--served" / "snapshots" / COMMIT / "config.json"
    assert json.loads(cached.read_bytes()) == json.loads(CONFIG)
