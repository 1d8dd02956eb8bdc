"""The queries `capplan nightly` suggests (warehouse/queries) compare GPUs honestly (issue 24): the
ranking shows each row's layout and GPUs in total and ranks per GPU, so an L4 replica of TP 8 x PP 4
(32 GPUs, B_max 77) no longer outranks an A100-80GB one of TP 8 (8 GPUs, B_max 52); rows whose
B_max is only the engine's max_num_seqs cap, or whose context is only the model's limit repeated on
a larger replica, are left out. The oracle: marts built by hand here, the expected rows worked out
by hand (77 / 32 = 2.41 sequences per GPU against 52 / 8 = 6.5)."""

from __future__ import annotations

import duckdb
import pytest

from pipelines.commands.nightly import SUMMARY_QUERIES, one_line_sql
from warehouse.sql import example_queries

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
QWEN_32B = "Qwen/Qwen3-32B"


@pytest.fixture
def marts() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("create schema marts")
    con.execute(
        "create table marts.capacity_grid (model varchar, gpu varchar, engine varchar, weight_dtype varchar, "
        "kv_dtype varchar, tp int, pp int, num_gpus int, context int, fits boolean, b_max int, b_max_memory int, "
        "max_num_seqs int, usd_per_hour double)"
    )
    rows = [  # gpu, engine, tp, pp, b_max, b_max_memory, max_num_seqs
        ("l4-24gb", "vllm", 8, 4, 77, 77, 256),  # the row: 77 on 32 GPUs
        ("a100-sxm-80gb", "vllm", 8, 1, 52, 52, 256),
        ("a100-sxm-80gb", "vllm", 4, 1, 20, 20, 256),  # 5 per GPU: below TP 8's 6.5
        ("h200-sxm-141gb", "vllm", 1, 1, 256, 900, 256),  # the cap, not the GPU: left out
        ("h200-sxm-141gb", "sglang", 8, 1, 800, 800, None),  # no cap: 100 per GPU
        ("b200-180gb", "vllm", 8, 1, 1024, 3000, 1024),  # only a capped row: no B200 row at all
    ]
    con.executemany(
        "insert into marts.capacity_grid values ($m, $g, $e, 'int4', 'fp8', $tp, $pp, $tp * $pp, 32768, true, "
        "$b, $bm, $cap, null)",
        [
            {"m": LLAMA_70B, "g": g, "e": e, "tp": tp, "pp": pp, "b": b, "bm": bm, "cap": cap}
            for g, e, tp, pp, b, bm, cap in rows
        ],
    )
    con.execute("create table marts.models (model varchar, context_limit_tokens int)")
    con.execute("insert into marts.models values ($m, 40960)", {"m": QWEN_32B})
    con.execute(
        "create table marts.context_limits (model varchar, gpu varchar, engine varchar, weight_dtype varchar, "
        "kv_dtype varchar, tp int, pp int, num_gpus int, concurrency int, max_context int)"
    )
    limits = [  # gpu, tp, max_context
        ("b200-180gb", 8, 40960),  # the model's limit on 8, 4 and 2 GPUs: the smallest one is the answer
        ("b200-180gb", 4, 40960),
        ("b200-180gb", 2, 40960),
        ("b200-180gb", 1, 21000),
        ("a100-sxm-40gb", 8, 32608),  # memory-bound: the longest one
        ("a100-sxm-40gb", 4, 12000),
        ("l4-24gb", 2, 0),  # nothing: no row
    ]
    con.executemany(
        "insert into marts.context_limits values ($m, $g, 'vllm', 'bf16', 'fp8', $tp, 1, $tp, 32, $c)",
        [{"m": QWEN_32B, "g": g, "tp": tp, "c": c} for g, tp, c in limits],
    )
    return con


def test_b_max_by_gpu_ranks_per_gpu_shows_the_layout_and_skips_capped_rows(marts: duckdb.DuckDBPyConnection) -> None:
    result = marts.execute(example_queries()["b_max_by_gpu"])
    names = [d[0] for d in result.description]
    rows = [dict(zip(names, row, strict=True)) for row in result.fetchall()]
    assert [(r["gpu"], r["layout"], r["gpus"], r["b_max"], r["b_max_per_gpu"]) for r in rows] == [
        ("h200-sxm-141gb", "TP 8 x PP 1", 8, 800, 100.0),
        ("a100-sxm-80gb", "TP 8 x PP 1", 8, 52, 6.5),
        ("l4-24gb", "TP 8 x PP 4", 32, 77, 2.41),
    ]


def test_max_context_at_concurrency_keeps_the_smallest_replica_at_the_model_limit(
    marts: duckdb.DuckDBPyConnection,
) -> None:
    result = marts.execute(example_queries()["max_context_at_concurrency"])
    names = [d[0] for d in result.description]
    rows = [dict(zip(names, row, strict=True)) for row in result.fetchall()]
    assert [(r["gpu"], r["layout"], r["gpus"], r["max_context"], r["at_model_limit"]) for r in rows] == [
        ("b200-180gb", "TP 2 x PP 1", 2, 40960, True),
        ("a100-sxm-40gb", "TP 8 x PP 1", 8, 32608, False),
    ]


def test_the_cheapest_deployments_show_their_gpus(marts: duckdb.DuckDBPyConnection) -> None:
    result = marts.execute(example_queries()["cheapest_deployment"].replace("limit 10", "limit 0"))
    assert {"tp", "pp", "gpus"} <= {d[0] for d in result.description}


def test_the_nightly_prints_the_same_queries_on_one_line(marts: duckdb.DuckDBPyConnection) -> None:
    for name in ("b_max_by_gpu", "max_context_at_concurrency"):
        assert name in SUMMARY_QUERIES
        sql = example_queries()[name]
        assert marts.execute(one_line_sql(sql)).fetchall() == marts.execute(sql).fetchall()
