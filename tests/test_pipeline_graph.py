"""The asset graph as a reviewable snapshot: keys, groups, dependencies, checks, jobs, schedules.

A change to the graph fails this test until the snapshot is rewritten on purpose:
    CAPPLAN_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/test_pipeline_graph.py
and the diff of tests/snapshots/asset_graph.json goes into review with the change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from pipelines.definitions import DEFAULT_CRON, build_definitions
from warehouse.sql import sql_path

defs = build_definitions()
SNAPSHOT = Path(__file__).parent / "snapshots" / "asset_graph.json"
UPDATE_ENV = "CAPPLAN_UPDATE_SNAPSHOTS"


def asset_graph(definitions: dg.Definitions) -> dict[str, Any]:
    graph = definitions.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.path):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "deps": sorted(parent.to_user_string() for parent in node.parent_keys),
            "kinds": sorted(node.kinds),
        }
    checks = sorted(
        (
            {
                "asset": spec.asset_key.to_user_string(),
                "name": spec.name,
                "blocking": spec.blocking,
                "additional_deps": sorted(dep.asset_key.to_user_string() for dep in spec.additional_deps),
            }
            for checks_def in definitions.asset_checks or []
            for spec in checks_def.check_specs
        ),
        key=lambda c: (c["asset"], c["name"]),
    )
    jobs = sorted(job.name for job in definitions.resolve_all_job_defs() if not job.name.startswith("__"))
    schedules = {
        schedule.name: {
            "job": schedule.job_name,
            "cron": schedule.cron_schedule,
            "timezone": schedule.execution_timezone,
            "default_status": schedule.default_status.value,
        }
        for schedule in definitions.schedules or []
    }
    return {"assets": assets, "checks": checks, "jobs": jobs, "schedules": schedules}


def test_asset_graph_matches_the_snapshot() -> None:
    current = asset_graph(defs)
    rendered = json.dumps(current, indent=2, sort_keys=True) + "\n"
    if os.environ.get(UPDATE_ENV) or not SNAPSHOT.exists():
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(rendered, encoding="utf-8")
    recorded = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert current == recorded, (
        f"the asset graph changed; review the difference, then rewrite {SNAPSHOT} with {UPDATE_ENV}=1"
    )


def test_every_asset_key_is_a_relation_with_its_sql_file() -> None:
    for key in defs.resolve_asset_graph().get_all_asset_keys():
        layer, table = key.path
        assert layer in ("raw", "staging", "marts"), key
        assert sql_path(layer, table).is_file(), f"{key.to_user_string()}: no warehouse/{layer}/{table}.sql"


def test_the_nightly_job_runs_everything_on_a_utc_schedule_one_step_process_at_a_time() -> None:
    from pipelines.executor import DEFAULT_CONFIG, WAREHOUSE_POOL, warehouse_multiprocess_executor

    job = defs.resolve_job_def("nightly_job")
    assert job.executor_def is warehouse_multiprocess_executor and DEFAULT_CONFIG["max_concurrent"] == 1
    assert job.graph.node_named("marts__runs").definition.pool == WAREHOUSE_POOL
    schedule = defs.resolve_schedule_def("nightly_job_schedule")
    assert schedule.execution_timezone == "UTC"
    if not os.environ.get("CAPPLAN_NIGHTLY_CRON"):
        assert schedule.cron_schedule == DEFAULT_CRON == "0 2 * * *"
    everything = defs.resolve_asset_graph().get_all_asset_keys()
    assert set(job.asset_layer.asset_graph.get_all_asset_keys()) == everything


def test_the_cron_and_the_environment_are_read_when_the_definitions_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Importing the definitions writes nothing into os.environ; building them reads it."""
    import subprocess
    import sys

    probe = (  # capplan's own variables (libraries such as polars may tune their allocator's)
        "import os; before = dict(os.environ); import pipelines.definitions, pipelines.resources; "
        "print(sorted(k for k in set(os.environ.items()) ^ set(before.items()) if k[0].startswith('CAPPLAN_')))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAPPLAN_")}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
    monkeypatch.setenv("CAPPLAN_NIGHTLY_CRON", "30 4 * * 1")
    assert build_definitions().resolve_schedule_def("nightly_job_schedule").cron_schedule == "30 4 * * 1"
    monkeypatch.delenv("CAPPLAN_NIGHTLY_CRON")
    assert build_definitions().resolve_schedule_def("nightly_job_schedule").cron_schedule == DEFAULT_CRON
