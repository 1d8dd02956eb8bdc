"""Prefix caching as capacity (issue 23 item 1): a prefix every sequence shares is held once, in whole blocks.

Oracles: vLLM 0.33's own KVCacheManager / BlockPool run on CPU in .venv-oracle (the `engine_oracle` test), and
hand derivations from the engines' source: vLLM hits whole blocks of at most `num_tokens - 1` prompt tokens
(v1/core/kv_cache_manager.py `get_computed_blocks`) and a cached block is one block whatever its `ref_cnt`
(block_pool.py); SGLang's radix cache matches `page_aligned(page_size)` of at most `input_len - 1` tokens
(mem_cache/radix_cache.py, managers/schedule_batch.py `_compute_max_prefix_len`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from capacity.calibration import fit_calibration
from capacity.engines.command_line import read_command
from capacity.engines.kinds import Engine
from capacity.estimate import estimate
from capacity.features.prefix_cache_engines import prefix_cache_rule
from capacity.features.prefix_caching import PrefixCaching
from capacity.performance import DEFAULT_EFFICIENCY, perf_inputs, prefill_seconds, step_seconds
from capacity.pool import KVGroup, KVPool, PoolUnit, b_max
from capacity.spec import DeploymentSpec, GpuSku, KVKind
from models_registry.planning import bundled_catalog
from pipelines.cli import app
from recommendations.feature_value import FEATURE_VALUE_SCHEMA, feature_value_frame
from recommendations.workloads import parse_workloads
from telemetry.drop_folder import deployments_frame
from telemetry.prefix_cache import model_hit_rates
from telemetry.summary import deployment_summary
from tests.conftest import require_oracle_venv, run_in_oracle_venv
from tests.handmade import dense_spec
from tests.test_telemetry_support import ingest
from warehouse.sql import build_relation, load_frame

runner = CliRunner()
RULES = {engine: prefix_cache_rule(engine) for engine in Engine}
GPU = GpuSku(
    "round", "Round", "nvidia", 100 * 2**30, memory_bandwidth_gbps=1000, bf16_dense_tflops=100, interconnect_gbps=100
)
ON = PrefixCaching(shared_prefix_tokens=1000)


def _pool(capacity_units: int, block_size: int, layers: int = 1, unit: PoolUnit = PoolUnit.BLOCK) -> KVPool:
    return KVPool(unit, capacity_units, block_size, (KVGroup(KVKind.FULL, layers),), 8192, 2 * 2**20)


def test_b_max_with_a_shared_prefix_follows_the_block_pool_rule_by_hand() -> None:
    # 1,000 blocks of 16 tokens, T = 2,000: a sequence takes cdiv(2000, 16) = 125 blocks, so 8 alone.
    # S = 1,000: 62 whole blocks (992 tokens) are cached; the 8 tokens of block 63 are each sequence's own.
    # 62 + B x (125 - 62) <= 1,000 -> B = floor(938 / 63) = 14
    pool = _pool(1000, 16)
    cached = ON.cached_tokens(RULES[Engine.VLLM], 2000, 16)
    assert cached == 992
    assert b_max(pool, 2000) == 8
    assert b_max(pool, 2000, cached_tokens=cached) == 14


def test_the_last_prompt_token_is_never_a_hit() -> None:
    # a prefix as long as the context: at most T - 1 = 1,023 tokens hit -> 63 whole blocks of 16 (1,008)
    assert PrefixCaching(shared_prefix_tokens=1024).cached_tokens(RULES[Engine.VLLM], 1024, 16) == 1008
    # a shorter prefix than a block shares nothing
    assert PrefixCaching(shared_prefix_tokens=15).cached_tokens(RULES[Engine.VLLM], 4096, 16) == 0


def test_off_or_plain_shares_nothing() -> None:
    assert PrefixCaching(enabled=False, shared_prefix_tokens=4096).cached_tokens(RULES[Engine.VLLM], 8192, 16) == 0
    assert PrefixCaching(enabled=False, shared_prefix_tokens=4096).cached_tokens(RULES[Engine.SGLANG], 8192, 1) == 0
    assert ON.cached_tokens(RULES[Engine.PLAIN], 8192, 1) == 0  # transformers' cache is per sequence
    assert (
        ON.on(RULES[Engine.TRTLLM]) and ON.on(RULES[Engine.SGLANG]) and ON.on(RULES[Engine.VLLM])
    )  # the engines' defaults


def test_shared_units_count_every_full_attention_group() -> None:
    # two full-attention groups: each holds the prefix's 62 blocks once; a sequence takes 2 x 125
    # 2 x 62 + B x 2 x 63 <= 1,000 -> B = floor(876 / 126) = 6 (4 without sharing: 1000 // 250)
    pool = KVPool(PoolUnit.BLOCK, 1000, 16, (KVGroup(KVKind.FULL, 1), KVGroup(KVKind.FULL, 1)), 8192, 2 * 2**20)
    assert b_max(pool, 2000) == 4
    assert b_max(pool, 2000, cached_tokens=992) == 6


def test_the_rule_is_one_definition_over_ints_and_polars_columns() -> None:
    pool = _pool(1000, 16)
    terms = pool.terms()
    frame = pl.DataFrame({"t": [2000, 4096, 64], "cached": [992, 992, 48]})
    shared = terms.shared_prefix_units(pl.col("cached"))
    got = frame.select(terms.b_max_memory(pl.col("t"), None, shared).alias("b"))["b"].to_list()
    by_hand = [(1000 - 62) // (125 - 62), (1000 - 62) // (256 - 62), (1000 - 3) // (4 - 3)]
    assert got == by_hand
    assert [b_max(pool, t, cached_tokens=c) for t, c in frame.iter_rows()] == by_hand


def test_sglang_shares_whole_pages_of_its_page_size() -> None:
    # page_size 1 (SGLang's default): every token of the prefix is shared; 64: whole pages of 64
    assert ON.cached_tokens(RULES[Engine.SGLANG], 2000, 1) == 1000
    assert ON.cached_tokens(RULES[Engine.SGLANG], 2000, 64) == 960
    tokens = _pool(100_000, 1, unit=PoolUnit.TOKEN)
    # 1,000 + B x 1,000 <= 100,000 -> 99 (50 without)
    assert b_max(tokens, 2000) == 50 and b_max(tokens, 2000, cached_tokens=1000) == 99


def test_hit_rate_moves_the_prefill_not_the_memory() -> None:
    rate = PrefixCaching(hit_rate=0.5)
    assert rate.cached_tokens(RULES[Engine.VLLM], 2000, 16) == 0  # no shared prefix stated: no memory shared
    # 50 % of a 1,500-token prompt = 750 -> whole blocks of 16: 736; the rest (764) is prefilled
    assert rate.hit_tokens(RULES[Engine.VLLM], 1500, 16) == 736
    assert rate.prefilled_tokens(RULES[Engine.VLLM], 1500, 16) == 764
    assert PrefixCaching(hit_rate=1.0).hit_tokens(RULES[Engine.VLLM], 1500, 1) == 1499  # the last token is computed
    assert PrefixCaching(enabled=False, hit_rate=0.9).hit_tokens(RULES[Engine.SGLANG], 1500, 1) == 0


def test_a_cached_prefix_is_not_prefilled() -> None:
    # one chunk of 2,048 and no running batch: prefilling 1,500 tokens of which 1,000 are cached is one step of
    # the other 500, each attending on average to the 1,000 before it and half the chunk (1,250)
    spec = dense_spec(layers=4, heads=32, kv_heads=8, head_dim=128, hidden=4096, intermediate=11008)
    est = estimate(spec, DeploymentSpec(weights_bytes_per_gpu=2**30), gpu=GPU)
    p = perf_inputs(spec, est, GPU, "bf16")
    assert prefill_seconds(p, 1500, 2048, cached_tokens=1000) == pytest.approx(
        float(step_seconds(p, 500, 1, 1250, DEFAULT_EFFICIENCY))
    )
    assert prefill_seconds(p, 1500, 2048, cached_tokens=1000) < prefill_seconds(p, 1500, 2048)


def _run_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


LLAMA = ("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--max-model-len", "8192", "--context", "4000")


def test_capplan_estimate_holds_the_shared_prefix_once() -> None:
    alone = _run_json(*LLAMA)
    shared = _run_json(*LLAMA, "--shared-prefix-tokens", "3000")
    off = _run_json(*LLAMA, "--shared-prefix-tokens", "3000", "--no-enable-prefix-caching")
    # one block table of 32 layers: cdiv(4000, 16) = 250 blocks a sequence; 3,000 // 16 = 187 whole blocks
    n = shared["num_blocks"]
    assert alone["b_max_memory"] == n // 250 == off["b_max_memory"]
    assert shared["b_max_memory"] == (n - 187) // (250 - 187)
    assert shared["prefix_cache"] == {"cached_tokens": 187 * 16, "b_max_without": n // 250}
    assert off["prefix_cache"]["cached_tokens"] == 0
    assert any("prefix caching off" in note for note in off["notes"])


def test_sglang_estimate_shares_every_prefix_token_at_page_size_one() -> None:
    args = (*LLAMA, "--engine", "sglang", "--shared-prefix-tokens", "3000")
    out = _run_json(*args)
    tokens = out["kv_cache_tokens"]  # SGLang's token pool, page 1
    assert out["b_max_memory"] == (tokens - 3000) // (4000 - 3000)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (("--prefix-hit-rate", "1.5"), "prefix hit rate must be in [0, 1]"),
        (("--shared-prefix-tokens", "-5"), "shared prefix must be >= 0"),
        (("--prefix-hit-rate", "nan"), "prefix hit rate must be in [0, 1]"),
    ],
)
def test_bad_values_are_one_line_usage_errors(flag: tuple[str, str], message: str) -> None:
    result = runner.invoke(app, ["estimate", *LLAMA, *flag])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_pasted_commands_say_whether_the_cache_is_on() -> None:
    vllm = read_command("vllm serve meta-llama/Llama-3.1-8B-Instruct --disable-prefix-caching")  # 0.33
    assert vllm.options["enable_prefix_caching"] is False and not vllm.unsized
    assert read_command("vllm serve m --enable-prefix-caching").options["enable_prefix_caching"] is True
    sglang = read_command("python -m sglang.launch_server --model-path m --disable-radix-cache")
    assert sglang.options["enable_prefix_caching"] is False and not sglang.unsized
    out = _run_json(
        "--from-command",
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 --disable-prefix-caching",
        "--gpu",
        "H100",
        "--context",
        "4000",
        "--shared-prefix-tokens",
        "3000",
    )
    assert out["modelled"] is True and out["prefix_cache"]["cached_tokens"] == 0


ORACLE = Path(__file__).resolve().parents[1] / "tools" / "engine_oracle" / "prefix_cache_oracle.py"


@pytest.mark.engine_oracle
@pytest.mark.parametrize(
    ("num_blocks", "block_size", "shared", "prompt", "context"),
    [
        (1000, 16, 1000, 1500, 2000),
        (1000, 16, 0, 1500, 2000),
        (4000, 16, 4096, 4200, 6000),
        (777, 32, 1000, 1001, 1100),
    ],
)
def test_vllm_block_pool_admits_what_capplan_says(
    num_blocks: int, block_size: int, shared: int, prompt: int, context: int
) -> None:
    require_oracle_venv()
    # vLLM's pool holds one more block than it hands out: block 0 is the null block (BlockPool.__init__)
    ask = {
        "num_blocks": num_blocks + 1,
        "block_size": block_size,
        "shared_prefix_tokens": shared,
        "prompt_tokens": prompt,
        "context_tokens": context,
        "enable_caching": True,
    }
    run = run_in_oracle_venv(ORACLE, ask, timeout_s=300)
    assert run.returncode == 0, run.stderr[-2000:]
    vllm = json.loads(run.stdout.strip().splitlines()[-1])
    cached = PrefixCaching(shared_prefix_tokens=shared).cached_tokens(RULES[Engine.VLLM], prompt, block_size)
    assert cached == vllm["hit_tokens"][-1]
    assert b_max(_pool(num_blocks, block_size), context, cached_tokens=cached) == vllm["admitted"]


# --- measured hit rates (telemetry) -----------------------------------------------------------------------

# vLLM 0.33's exposition of its prefix-cache counters (v1/metrics/loggers.py: Counter "vllm:prefix_cache_queries"
# and "vllm:prefix_cache_hits", labelled model_name and engine; prometheus_client appends `_total`)
LLAMA_LABELS = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'
VLLM_SCRAPES = "\n".join(
    [
        "# scraped_at: 2025-06-02T12:00:00Z",
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{{{LLAMA_LABELS}}} 100000.0",
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f"vllm:prefix_cache_hits_total{{{LLAMA_LABELS}}} 20000.0",
        "# scraped_at: 2025-06-02T12:10:00Z",
        f"vllm:prefix_cache_queries_total{{{LLAMA_LABELS}}} 500000.0",
        f"vllm:prefix_cache_hits_total{{{LLAMA_LABELS}}} 260000.0",
    ]
)
# SGLang 0.5.23: a gauge of the recent hit rate (observability/metrics_collector.py "sglang:cache_hit_rate")
SGLANG_SCRAPES = "\n".join(
    [
        "# scraped_at: 2025-06-02T12:00:00Z",
        'sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.5',
        "# scraped_at: 2025-06-02T12:10:00Z",
        'sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.7',
    ]
)


def test_measured_hit_rate_per_deployment_from_the_engines_metrics(tmp_path: Path) -> None:
    result = ingest(
        tmp_path, {"vllm-dep/metrics.prom": VLLM_SCRAPES + "\n", "sglang-dep/metrics.prom": SGLANG_SCRAPES + "\n"}
    )
    assert result.rejects.is_empty()
    rows = {
        r["deployment_id"]: r
        for r in deployment_summary(result.observations.lazy(), result.samples.lazy()).collect().to_dicts()
    }
    vllm = rows["vllm-dep"]
    # over the window: 400,000 tokens looked up, 240,000 found -> 0.6
    assert (vllm["prefix_cache_queries"], vllm["prefix_cache_hits"]) == (400_000.0, 240_000.0)
    assert vllm["measured_prefix_hit_rate"] == pytest.approx(0.6, rel=1e-12)
    assert vllm["prefix_hit_rate_source"] == "prefix_cache_hits_total"
    sglang = rows["sglang-dep"]
    assert sglang["measured_prefix_hit_rate"] == pytest.approx(0.6, rel=1e-12)  # mean of 0.5 and 0.7
    assert sglang["prefix_hit_rate_source"] == "prefix_cache_hit_rate" and sglang["prefix_cache_queries"] is None


def test_a_hit_rate_above_one_is_rejected(tmp_path: Path) -> None:
    bad = 'sglang:cache_hit_rate{model_name="m"} 60\n'
    result = ingest(tmp_path, {"dep/metrics.prom": bad})
    assert result.samples.is_empty() and result.rejects.height == 1


def test_the_hit_rate_view_shows_each_deployment_that_measured_one(tmp_path: Path) -> None:
    """raw.telemetry_deployments (as the telemetry asset writes it) -> staging -> marts.prefix_cache_hit_rates."""
    result = ingest(
        tmp_path, {"vllm-dep/metrics.prom": VLLM_SCRAPES + "\n", "sglang-dep/metrics.prom": SGLANG_SCRAPES + "\n"}
    )
    deployments = deployments_frame(result.observations, result.samples, "drop_folder")
    con = duckdb.connect()
    for layer in ("raw", "staging", "marts"):
        con.execute(f"create schema {layer}")
    build_relation(con, "raw", "run", {"run_id": "r1", "run_date": "2026-12-05", "started_at": "2026-12-05 00:00"})
    load_frame(con, "raw", "telemetry_deployments", deployments)
    build_relation(con, "staging", "telemetry_deployments")
    build_relation(con, "marts", "prefix_cache_hit_rates")
    got = con.execute(
        "select deployment_id, model, measured_prefix_hit_rate, prefix_hit_rate_source, prefix_cache_hits "
        "from marts.prefix_cache_hit_rates order by deployment_id"
    ).fetchall()
    assert got == [
        ("sglang-dep", "meta-llama/Llama-3.1-8B-Instruct", pytest.approx(0.6), "prefix_cache_hit_rate", None),
        ("vllm-dep", "meta-llama/Llama-3.1-8B-Instruct", pytest.approx(0.6), "prefix_cache_hits_total", 240_000.0),
    ]
    documented = con.execute(
        "select count(*) from duckdb_columns() where table_name = 'prefix_cache_hit_rates' and comment is null"
    ).fetchone()
    assert documented == (0,)


# --- what prefix caching buys (marts.feature_value) ----------------------------------------------------------


def _chat(**prefix: object) -> dict[str, object]:
    return {
        "name": "chat",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "target_concurrency": 600,
        "context_tokens": 4096,
        "max_model_len": 8192,
        "gpus": ["h100-sxm-80gb"],
        "max_gpus_per_replica": 1,
        **prefix,
    }


def test_what_a_shared_prefix_buys_is_the_gpus_it_saves() -> None:
    catalog = bundled_catalog(["meta-llama/Llama-3.1-8B-Instruct"], ["h100-sxm-80gb"])
    workloads = parse_workloads(
        {"workloads": [_chat(shared_prefix_tokens=3072, prefix_hit_rate=0.7), _chat(name="plain")]}
    )
    frame = feature_value_frame(workloads, catalog, fit_calibration([]))
    assert frame.schema == pl.Schema(FEATURE_VALUE_SCHEMA)
    assert frame["workload"].to_list() == ["chat"]  # a workload that states nothing has no row
    row = frame.row(0, named=True)
    # the pool of the layout (bf16, TP 1, max_model_len 8,192) as the estimate sizes it: N blocks of 16 tokens
    spec = catalog.models["meta-llama/Llama-3.1-8B-Instruct"]
    est = estimate(
        spec.spec, DeploymentSpec(max_model_len=8192, weight_dtype="auto"), gpu=catalog.gpus["h100-sxm-80gb"]
    )
    n, cap = est.num_blocks, est.max_num_seqs or 10**9
    # without: cdiv(4096, 16) = 256 blocks a sequence; with: the 3,072-token prefix is 192 whole blocks held once
    b_without, b_with = min(n // 256, cap), min((n - 192) // (256 - 192), cap)
    assert (row["b_max_without"], row["b_max_with"]) == (b_without, b_with)
    # 90 % headroom, 600 sequences, one GPU a replica
    replicas = [-(-600 // (b * 9 // 10)) for b in (b_without, b_with)]
    assert (row["gpus_without"], row["gpus_with"]) == tuple(replicas)
    assert row["gpus_saved"] == replicas[0] - replicas[1] > 0
    price = catalog.gpus["h100-sxm-80gb"].price_usd_per_gpu_hour or 0
    assert row["usd_per_hour_saved"] == pytest.approx(row["gpus_saved"] * price)
    assert (row["feature"], row["rate"], row["rate_source"]) == ("prefix_caching", 0.7, "stated")


def test_a_measured_hit_rate_stands_in_for_a_stated_one() -> None:
    catalog = bundled_catalog(["meta-llama/Llama-3.1-8B-Instruct"], ["h100-sxm-80gb"])
    workloads = parse_workloads({"workloads": [_chat(shared_prefix_tokens=1024), _chat(name="plain")]})
    measured = {"meta-llama/Llama-3.1-8B-Instruct": 0.42}
    frame = feature_value_frame(workloads, catalog, fit_calibration([]), measured)
    assert frame.select("workload", "rate", "rate_source").rows() == [
        ("chat", 0.42, "measured"),
        ("plain", 0.42, "measured"),
    ]
    plain = frame.row(1, named=True)  # a hit rate alone shares no memory: the same GPUs either way
    assert plain["gpus_saved"] == 0 and plain["b_max_with"] == plain["b_max_without"]


def test_the_fleet_hit_rate_per_model_weighs_deployments_by_their_queries() -> None:
    deployments = pl.DataFrame(
        {
            "model_id": ["m", "m", "s"],
            "prefix_cache_queries": [100.0, 300.0, None],
            "prefix_cache_hits": [90.0, 30.0, None],
            "measured_prefix_hit_rate": [0.9, 0.1, 0.5],
        }
    )
    # m: (90 + 30) / (100 + 300) = 0.3, not the mean 0.5 of its two rates; s: its gauge
    assert model_hit_rates(deployments) == {"m": pytest.approx(0.3), "s": 0.5}


def test_workload_prefix_fields_are_checked() -> None:
    bad = parse_workloads({"workloads": [_chat(prefix_hit_rate=1.5), _chat(name="b", shared_prefix_tokens="x")]})
    assert [name for name, _reason in bad.errors] == ["chat", "b"]
    assert "prefix hit rate must be in [0, 1]" in bad.errors[0][1]


def test_b_max_at_another_context_holds_the_prefix_once_too() -> None:
    spec = bundled_catalog(["meta-llama/Llama-3.1-8B-Instruct"], ["h100-sxm-80gb"])
    model = spec.models["meta-llama/Llama-3.1-8B-Instruct"].spec
    gpu = spec.gpus["h100-sxm-80gb"]
    d = DeploymentSpec(max_model_len=8192, prefix_caching=PrefixCaching(shared_prefix_tokens=3000))
    est = estimate(model, d, gpu=gpu, context_tokens=4000)
    n = est.num_blocks
    # at 6,000 tokens: cdiv(6000, 16) = 375 blocks a sequence, the prefix's 187 whole blocks held once
    assert est.b_max_at(6000) == min((n - 187) // (375 - 187), est.max_num_seqs or 10**9)
    assert est.b_max_at(4000) == est.b_max
