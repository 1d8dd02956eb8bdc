"""deploy/: what can be checked without a cluster. The workspace file loads the code location (as
`dagster-webserver -w` / `dagster-daemon run -w` would); the Kubernetes files are well-formed YAML
naming the same code location and limits as deploy/dagster.yaml. The Helm chart and the image are
not exercised here (no cluster or container runtime); deploy/dagster.yaml is run for real against
PostgreSQL in tests/test_nightly_postgres.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
DAGSTER = Path(sys.executable).with_name("dagster")


def test_the_workspace_file_loads_the_code_location() -> None:
    result = subprocess.run(
        [str(DAGSTER), "definitions", "validate", "-w", str(DEPLOY / "workspace.yaml")],
        cwd=DEPLOY.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation successful for code location capplan" in result.stdout + result.stderr


def test_the_helm_values_name_the_code_location_and_the_limits_of_the_one_host_instance() -> None:
    values = yaml.safe_load((DEPLOY / "k8s" / "values.yaml").read_text(encoding="utf-8"))
    instance = yaml.safe_load((DEPLOY / "dagster.yaml").read_text(encoding="utf-8"))
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"] == ["-m", "pipelines.definitions"]
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert values["postgresql"]["enabled"] is False and values["generatePostgresqlPasswordSecret"] is False
    assert values["concurrency"]["runs"]["maxConcurrentRuns"] == instance["concurrency"]["runs"]["max_concurrent_runs"]
    assert values["concurrency"]["pools"]["defaultLimit"] == instance["concurrency"]["pools"]["default_limit"] == 1
    claim = yaml.safe_load((DEPLOY / "k8s" / "warehouse-pvc.yaml").read_text(encoding="utf-8"))
    mounted = {
        v["persistentVolumeClaim"]["claimName"] for v in values["runLauncher"]["config"]["k8sRunLauncher"]["volumes"]
    }
    assert mounted == {claim["metadata"]["name"]}
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    assert '"-m", "pipelines.definitions"' in dockerfile and "dagster-k8s==0.29.27" in dockerfile


def test_no_secret_is_written_in_the_deploy_files() -> None:
    instance = yaml.safe_load((DEPLOY / "dagster.yaml").read_text(encoding="utf-8"))
    password = instance["storage"]["postgres"]["postgres_db"]["password"]
    assert password == {"env": "DAGSTER_PG_PASSWORD"}
    values = (DEPLOY / "k8s" / "values.yaml").read_text(encoding="utf-8")
    assert "postgresqlPassword" not in values
