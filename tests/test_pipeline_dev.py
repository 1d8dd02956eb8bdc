"""`dg dev` from the repository root: the UI answers and serves our asset graph (slow).

Started from Python's subprocess on 127.0.0.1 and a free port, with SIGINT restored to its default
in the child (Dagster maps SIGTERM to the SIGINT handler; a shell's background job inherits SIGINT
ignored, stack-notes G6), and DAGSTER_HOME unset: the root dagster.yaml puts the instance storage
under var/dagster. `dg` finds the project through [tool.dg] in pyproject.toml.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DG = Path(sys.executable).with_name("dg")
STARTUP_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env |= {
        "CAPPLAN_WAREHOUSE": str(tmp_path / "warehouse.duckdb"),
        "CAPPLAN_REGISTRY_URL": f"sqlite:///{tmp_path / 'registry.db'}",
        "PYTHONUNBUFFERED": "1",
    }
    return env


def _get(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"} if body else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read()


@pytest.mark.slow
def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_dg_dev_starts_from_the_repository_root_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    log = (tmp_path / "dagster-dev.log").open("w")
    process = subprocess.Popen(
        [str(DG), "dev", "--host", "127.0.0.1", "--port", str(port)],
        cwd=PROJECT_ROOT,
        env=_env(tmp_path),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_sigint_default,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        status = None
        while time.monotonic() < deadline and process.poll() is None:
            try:
                status, _ = _get(base + "/server_info")
                if status == 200:
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(1)
        assert status == 200, f"dagster dev did not answer: {(tmp_path / 'dagster-dev.log').read_text()[-3000:]}"
        status, _ = _get(base + "/")
        assert status == 200

        query = json.dumps({"query": "{ assetNodes { assetKey { path } } }"}).encode()
        keys: set[str] = set()
        while time.monotonic() < deadline and "marts/runs" not in keys:  # the code server may still be loading
            _, body = _get(base + "/graphql", query)
            nodes = json.loads(body).get("data", {}).get("assetNodes") or []
            keys = {"/".join(node["assetKey"]["path"]) for node in nodes}
            time.sleep(0.5)
        assert {"raw/capacity_grid", "marts/capacity_grid", "marts/runs"} <= keys
        assert (PROJECT_ROOT / "var" / "dagster" / "storage").is_dir(), "the root dagster.yaml put storage under var/"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            pytest.fail("dg dev ignored SIGTERM")
        finally:
            log.close()
    assert process.returncode is not None


@pytest.mark.slow
def test_dg_check_defs(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(DG), "check", "defs"],
        cwd=PROJECT_ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
