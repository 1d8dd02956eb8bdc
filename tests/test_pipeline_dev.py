"""`dg dev` from the repository root: the UI answers and serves our asset graph (slow).

Started from Python's subprocess on 127.0.0.1 and a free port, with SIGINT restored to its default
in the child (Dagster maps SIGTERM to the SIGINT handler; a shell's background job inherits SIGINT
ignored, stack-notes G6), and DAGSTER_HOME unset: the root dagster.yaml puts the instance storage
under var/dagster. `dg` finds the project through [tool.dg] in pyproject.toml. And a run recorded
through `capplan nightly`'s instance is listed by the UI started in the same directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DG = Path(sys.executable).with_name("dg")
DAGSTER = Path(sys.executable).with_name("dagster")
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


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def _serving(command: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> Iterator[str]:
    """Start a Dagster UI on 127.0.0.1, wait for it to answer, yield its base URL; SIGTERM it after."""
    port = _free_port()
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            cwd=cwd,
            env=env,
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
            assert status == 200, f"{command[-2:]} did not answer: {log_path.read_text()[-3000:]}"
            yield base
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                pytest.fail(f"{command[-2:]} ignored SIGTERM")
    assert process.returncode is not None


def _graphql(base: str, query: str, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Ask until the answer satisfies `until` (the code server may still be loading)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    data: dict[str, Any] = {}
    while time.monotonic() < deadline:
        _, body = _get(base + "/graphql", json.dumps({"query": query}).encode())
        data = json.loads(body).get("data") or {}
        if until(data):
            break
        time.sleep(0.5)
    return data


@pytest.mark.slow
def test_dg_dev_starts_from_the_repository_root_and_stops_on_sigterm(tmp_path: Path) -> None:
    with _serving([str(DG), "dev"], PROJECT_ROOT, _env(tmp_path), tmp_path / "dg-dev.log") as base:
        assert _get(base + "/")[0] == 200

        def keys_of(data: dict[str, Any]) -> set[str]:
            return {"/".join(node["assetKey"]["path"]) for node in data.get("assetNodes") or []}

        data = _graphql(base, "{ assetNodes { assetKey { path } } }", lambda d: "marts/runs" in keys_of(d))
        assert {"raw/capacity_grid", "marts/capacity_grid", "marts/runs"} <= keys_of(data)
        assert (PROJECT_ROOT / "var" / "dagster" / "storage").is_dir(), "the root dagster.yaml put storage under var/"


@pytest.mark.slow
def test_a_run_capplan_nightly_records_shows_in_dagster_dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`capplan nightly`'s instance is the one `dagster dev` serves from the same directory: a run
    recorded through it (a one-op job, to keep this fast) is listed by the UI."""
    import dagster as dg

    from pipelines.commands.nightly import dagster_instance

    shutil.copyfile(PROJECT_ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)

    @dg.op
    def probe_op() -> int:
        return 1

    @dg.job
    def probe_job() -> None:
        probe_op()

    with dagster_instance() as (instance, label):
        run_id = probe_job.execute_in_process(instance=instance).run_id
    assert label.startswith("./dagster.yaml")
    command = [str(DAGSTER), "dev", "-m", "pipelines.definitions"]
    with _serving(command, tmp_path, _env(tmp_path), tmp_path / "dagster-dev.log") as base:
        query = "{ runsOrError { ... on Runs { results { runId status } } } }"

        def runs(data: dict[str, Any]) -> dict[str, str]:
            return {r["runId"]: r["status"] for r in (data.get("runsOrError") or {}).get("results") or []}

        data = _graphql(base, query, lambda d: run_id in runs(d))
        assert runs(data).get(run_id) == "SUCCESS"


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
