"""raw.workloads -> staging -> marts.workloads carry the serving features a profile declares (issue 23 item 8):
adapters (count, rank, GPU slots), speculative decoding (method, draft, tokens), acceptance rate, shared prefix and
prefix hit rate, each the value written in workloads.yaml (the oracle: the file itself), null where not declared."""

from __future__ import annotations

from pathlib import Path

import duckdb

from recommendations.workloads import load_workloads
from warehouse.sql import build_relation, execute_sql, load_frame, read_sql

WORKLOADS = """\
schema_version: 1
workloads:
  - name: assistant
    model: meta-llama/Llama-3.1-8B-Instruct
    target_concurrency: 64
    context_tokens: 8192
    shared_prefix_tokens: 1500
    prefix_hit_rate: 0.6
    speculative: {method: eagle3, model: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, num_speculative_tokens: 3}
    acceptance_rate: 0.7
    adapters: {count: 40, rank: 64, slots: 8}
  - name: plain
    model: meta-llama/Llama-3.1-8B-Instruct
    target_concurrency: 16
    context_tokens: 4096
"""
COLUMNS = (
    "adapters, adapter_rank, adapter_slots, speculative_method, speculative_draft, num_speculative_tokens, "
    "acceptance_rate, shared_prefix_tokens, prefix_hit_rate"
)


def test_the_marts_carry_each_declared_feature(tmp_path: Path) -> None:
    path = tmp_path / "workloads.yaml"
    path.write_text(WORKLOADS, encoding="utf-8")
    parsed = load_workloads(path)
    assert parsed.errors == ()
    con = duckdb.connect()
    for layer in ("raw", "staging", "marts"):
        con.execute(f"create schema {layer}")
    params = {"run_id": "r1", "run_date": "2026-12-05", "started_at": "2026-12-05 00:00:00+00"}
    execute_sql(con, read_sql("raw", "run"), params)
    load_frame(con, "raw", "workloads", parsed.frame())
    build_relation(con, "staging", "workloads")
    build_relation(con, "marts", "workloads")
    rows = dict(
        (name, rest) for name, *rest in con.execute(f"select workload, {COLUMNS} from marts.workloads").fetchall()
    )
    assert rows["assistant"] == [40, 64, 8, "eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", 3, 0.7, 1500, 0.6]
    assert rows["plain"] == [None] * 9
    # every new column is documented (warehouse/marts/workloads.yaml)
    comments = dict(
        con.execute(
            "select column_name, comment from duckdb_columns() where schema_name = 'marts' and table_name = 'workloads'"
        ).fetchall()
    )
    assert all(comments[name.strip()] for name in COLUMNS.split(","))
