"""`capplan place`, `limits`, `procure` and `estimate --tpot-ms / --ttft-ms`: the JSON contracts scripts rely
on, each against an oracle capplan's commands did not produce:

- `--tpot-ms`: a linear scan of `capacity.performance.performance` over every batch (the command bisects),
  a target set between two batches' TPOT by construction, and a public measured series (vLLM 0.10.1.1,
  Qwen2-7B on one A100, dennislee22's benchmark in evaluation/data/perf_measurements.yaml);
- `place`: brute force over the same candidates (`capacity.placement.layouts` x `size_layout` on every
  priced GPU), ranked by $/hour by the test;
- `limits`: the estimate's own B_max at the reported context, one token either side;
- `procure`: for one workload, the cheapest SKU bought in whole nodes, by brute force over its layouts;
  the warehouse path against a published file the test writes (same inputs: read; a price moved: computed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml
from typer.testing import CliRunner

from capacity.estimate import estimate
from capacity.performance import efficiency_for, perf_inputs
from capacity.placement import layouts, size_layout
from capacity.planning_types import DTYPE_POLICIES, WorkloadProfile
from capacity.serving.closed_loop import closed_loop_speed, wave_share
from capacity.spec import DeploymentSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku, load_gpu_skus
from pipelines.cli import app
from recommendations.fleet_answer import fleet_frames
from recommendations.workloads import load_workloads
from tests.estimating import estimate_model

runner = CliRunner()
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
MEASUREMENTS = Path(__file__).resolve().parents[1] / "evaluation" / "data" / "perf_measurements.yaml"


def run_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # exactly one object: json.loads rejects anything after it


def one_line_error(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("capplan: error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


# --- estimate --tpot-ms / --ttft-ms ---------------------------------------------------------------------


def _llama_on_h100(input_len: int, output_len: int) -> tuple[Any, Any, Any]:
    resolved, gpu = load_model(LLAMA_8B), find_gpu_sku("h100-sxm-80gb")
    est = estimate_model(resolved, DeploymentSpec(), gpu=gpu, context_tokens=input_len + output_len)
    return resolved, gpu, est


def test_tpot_ms_is_the_largest_batch_a_linear_scan_of_the_closed_loop_allows() -> None:
    """`--tpot-ms` bisects B over the closed loop's mean TPOT (`closed_loop_speed`: decode steps and the prefills
    of the prompts that join them): a linear scan of the same function gives the same answer."""
    prompt, out = 2048, 256
    resolved, gpu, est = _llama_on_h100(prompt, out)
    chunk = est.pool.max_num_batched_tokens or prompt
    inputs, eff = perf_inputs(resolved.spec, est, gpu), efficiency_for(est.engine, gpu)

    def tpot(batch: int) -> float:
        return float(closed_loop_speed(inputs, batch, prompt, out, chunk, eff, wave_share(est.engine)).tpot_s) * 1e3

    def targets_at(tpot_ms: str) -> dict[str, Any]:
        """`capplan estimate`'s latency_targets for the same request at `--tpot-ms tpot_ms`."""
        args = ("--gpu", "h100-sxm-80gb", "--tpot-ms", tpot_ms, "--input-len", str(prompt), "--output-len", str(out))
        targets: dict[str, Any] = run_json("estimate", LLAMA_8B, *args)["latency_targets"]
        return targets

    # a target between TPOT(100) and TPOT(101): the answer is 100 by construction
    target = (tpot(100) + tpot(101)) / 2
    assert tpot(100) < target < tpot(101)
    got = targets_at(f"{target!r}")
    assert got["max_batch"] == 100 and got["binding"] == "tpot" and got["method"] == "closed_form"
    # a round target: the scan's answer (every B up to B_max tried), and B + 1 misses
    scanned = max(b for b in range(1, est.b_max + 1) if tpot(b) <= 30.0)
    got = targets_at("30")
    assert got["max_batch"] == scanned < est.b_max
    assert tpot(scanned + 1) > 30.0
    assert got["tpot_ms"] == pytest.approx(tpot(scanned), abs=1e-3)


def test_tpot_ms_against_a_public_measured_series() -> None:
    """vLLM 0.10.1.1, Qwen2-7B-Instruct on one A100-SXM 80GB, 1,024 in + 1,024 out, a closed loop at
    concurrency c (vllm bench serve --max-concurrency): measured mean TPOT by c. At the TPOT measured at
    c = 50 (18.46 ms; c = 75 measured 24.02 ms), a real engine ran 50 at once. capplan's closed-loop form
    (decode steps and the prompts that join them) answers within a factor of two of it."""
    rows = yaml.safe_load(MEASUREMENTS.read_text())["measurements"]
    series = {
        m["concurrency"]: m["mean_tpot_ms"]
        for m in rows
        if m["id"].startswith("dennislee-vllm-test4-qwen2-7b-instruct-a100-tp1-n") and m["input_len"] == 1024
    }
    assert series[50] < series[75]
    got = run_json(
        "estimate",
        "Qwen/Qwen2-7B-Instruct",
        "--gpu",
        "a100-sxm-80gb",
        "--engine-version",
        "0.10.1.1",
        "--tpot-ms",
        str(series[50]),
        "--input-len",
        "1024",
        "--output-len",
        "1024",
    )["latency_targets"]
    assert 50 / 2 <= got["max_batch"] <= 50 * 2


def test_simulated_targets_say_so_and_ttft_alone_binds() -> None:
    got = run_json(
        "estimate",
        LLAMA_8B,
        "--gpu",
        "h100-sxm-80gb",
        "--ttft-ms",
        "1000",
        "--input-len",
        "2048",
        "--output-len",
        "128",
        "--simulate",
    )["latency_targets"]
    assert got["method"] == "simulated_p99" and got["tpot_ms_target"] is None
    assert got["binding"] in ("ttft", "memory", "max_num_seqs") and got["ttft_ms"] <= 1000


@pytest.mark.parametrize(
    "args",
    [
        ("--tpot-ms", "-5"),
        ("--tpot-ms", "20", "--gpu-memory-gib", "80"),  # no catalog GPU: no bandwidth to check a target with
    ],
)
def test_estimate_targets_refused_in_one_line(args: tuple[str, ...]) -> None:
    gpu = () if "--gpu-memory-gib" in args else ("--gpu", "h100-sxm-80gb")
    one_line_error("estimate", LLAMA_8B, *gpu, *args)


# --- place -----------------------------------------------------------------------------------------------

PLAN_KEYS = {
    "model",
    "hf_repo",
    "engine",
    "engine_version",
    "gpu",
    "tp",
    "pp",
    "gpus_per_replica",
    "replicas",
    "weight_dtype",
    "quantization",
    "kv_cache_dtype",
    "max_model_len",
    "max_num_seqs",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
}
OPTION_KEYS = {
    "rank",
    "gpu",
    "tp",
    "pp",
    "weight_dtype",
    "kv_cache_dtype",
    "replicas",
    "gpus_total",
    "usd_per_hour",
    "usd_per_million_output_tokens",
    "batch_per_replica",
    "binding",
    "steady_state",
    "simulated",
    "plan",
}


def _place_query(
    *, concurrency: int, context_tokens: int, tpot_ms: float, dtype_policy: str, ttft_ms: float | None = None
) -> WorkloadProfile:
    """The workload `capplan place LLAMA_8B ... --output-len 256` asks about, written from its flags by hand."""
    return WorkloadProfile(
        name="q",
        models=(LLAMA_8B,),
        target_concurrency=concurrency,
        context_tokens=context_tokens,
        output_tokens=256,
        tpot_ms_target=tpot_ms,
        ttft_ms_target=ttft_ms,
        dtype_policy=DTYPE_POLICIES[dtype_policy],
    )


def _brute_force_costs(model_id: str, profile: WorkloadProfile, *, estimated_prices: bool = False) -> list[float]:
    """$/hour of every feasible layout on every GPU with a list price (or any price), each sized on its own."""
    resolved = load_model(model_id)
    costs = []
    for gpu in load_gpu_skus():
        if gpu.price_usd_per_gpu_hour is None or gpu.price_basis is None:
            continue
        if not estimated_prices and gpu.price_basis.value == "estimate":
            continue
        for layout in layouts(resolved.spec, gpu, profile):
            sized = size_layout(
                resolved.spec, layout, profile, model_id=model_id, checkpoint_bytes=resolved.checkpoint_bytes
            )
            if not isinstance(sized, str):
                costs.append(sized.usd_per_hour)
    return sorted(costs)


@pytest.mark.parametrize("estimated_prices", [False, True])
def test_place_by_concurrency_is_the_cheapest_of_brute_force(estimated_prices: bool) -> None:
    opt_in = ["--allow-estimated-prices"] if estimated_prices else []
    out = run_json(
        "place",
        LLAMA_8B,
        "--concurrency",
        "300",
        "--tpot-ms",
        "40",
        "--input-len",
        "1024",
        "--output-len",
        "256",
        "--dtype-policy",
        "native",
        "--top",
        "4",
        *opt_in,
    )
    profile = _place_query(concurrency=300, context_tokens=1280, tpot_ms=40, dtype_policy="native")
    costs = _brute_force_costs(LLAMA_8B, profile, estimated_prices=estimated_prices)
    assert [o["usd_per_hour"] for o in out["options"]] == pytest.approx(costs[:4])
    assert estimated_prices or {o["price_basis"] for o in out["options"]} <= {"list", "contract"}
    assert out["source"] == "computed" and out["simulations"] == 0
    for option in out["options"]:
        assert option.keys() >= OPTION_KEYS and option["plan"].keys() >= PLAN_KEYS
        assert option["steady_state"]["tpot_ms"] <= 40
        assert option["replicas"] == math.ceil(300 / option["batch_per_replica"])


def test_place_at_a_rate_checks_the_percentile_and_orders_by_cost() -> None:
    """The issue's question: the cheapest way to serve a model at p99 TTFT 500 ms and 20 requests/s."""
    out = run_json(
        "place",
        LLAMA_8B,
        "--tpot-ms",
        "50",
        "--ttft-ms",
        "500",
        "--request-rate",
        "20",
        "--input-len",
        "2048",
        "--output-len",
        "256",
        "--top",
        "3",
    )
    assert out["query"]["percentile"] == "p99" and len(out["options"]) == 3
    costs = [o["usd_per_hour"] for o in out["options"]]
    assert costs == sorted(costs)
    profile = _place_query(concurrency=1, context_tokens=2304, tpot_ms=50, ttft_ms=500, dtype_policy="fp8")
    assert costs[0] >= _brute_force_costs(LLAMA_8B, profile)[0]  # never cheaper than one replica of the cheapest
    for option in out["options"]:
        sim = option["simulated"]
        assert sim["ttft"]["p99_ms"] <= 500 and sim["tpot"]["p99_ms"] <= 50
        assert sim["request_rate_per_replica"] == pytest.approx(20 / option["replicas"], abs=1e-4)
        plan = option["plan"]
        assert plan["max_num_seqs"] == option["batch_per_replica"] and plan["replicas"] == option["replicas"]
        assert plan["gpus_per_replica"] == plan["tp"] * plan["pp"]
        # $ per million output tokens = $/hour over the tokens asked for: 20 req/s x 256 tokens x 3,600 s
        assert option["usd_per_million_output_tokens"] == pytest.approx(
            option["usd_per_hour"] / (20 * 256 * 3600) * 1e6, abs=1e-4
        )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--input-len", "4096", "--output-len", "256", "--max-model-len", "2048"), "below"),
        (("--gpu", "no-such-gpu"), "unknown GPU"),
        (("--tpot-ms", "0"), "--tpot-ms"),
        (("--gpu", "rtx-4060-8gb", "--dtype-policy", "native"), "no layout serves"),
        (("--percentile", "p42"), "p42"),
    ],
)
def test_place_refuses_in_one_line(args: tuple[str, ...], says: str) -> None:
    model = "meta-llama/Llama-3.1-70B-Instruct" if "rtx-4060-8gb" in args else LLAMA_8B
    assert says in one_line_error("place", model, *args)


# --- limits ----------------------------------------------------------------------------------------------


def test_limits_contract_and_the_memory_limit_is_where_b_max_drops(tmp_path: Path) -> None:
    out = run_json(
        "limits",
        LLAMA_8B,
        "--gpu",
        "h100-sxm-80gb",
        "--concurrency",
        "32",
        "--concurrency",
        "128",
        "--warehouse",
        str(tmp_path / "none.duckdb"),
    )
    assert out["source"] == "computed" and [r["concurrency"] for r in out["limits"]] == [32, 128]
    resolved, gpu = load_model(LLAMA_8B), find_gpu_sku("h100-sxm-80gb")
    est = estimate(resolved.spec, DeploymentSpec(), gpu=gpu, checkpoint_bytes=resolved.checkpoint_bytes)
    assert out["max_model_len"] == est.max_model_len and out["largest_context_that_starts"] > 0
    for row in out["limits"]:
        b, limit = row["concurrency"], row["memory_limit"]
        assert est.b_max_at(limit) >= b > est.b_max_at(limit + 1)  # one more token: fewer than b fit
        assert row["effective_limit"] == min(row["model_limit"], limit)
        assert row["binding"] == ("model" if row["model_limit"] <= limit else "memory")


def test_limits_without_a_gpu_is_a_usage_error() -> None:
    assert "--gpu" in one_line_error("limits", LLAMA_8B)


# --- procure ---------------------------------------------------------------------------------------------

ONE_WORKLOAD = {
    "schema_version": 1,
    "procurement": {"whole_nodes": True},
    "workloads": [
        {
            "name": "chat",
            "models": [LLAMA_8B],
            "target_concurrency": 64,
            "context_tokens": 4096,
            "dtype_policy": "native",
        }
    ],
}


def _publish(path: Path, workloads: Path, price_shift: float = 0.0) -> None:
    """A published warehouse as the nightly leaves it, for the tables `procure` reads."""
    profiles = load_workloads(workloads)
    placements, procurement, buckets = fleet_frames(profiles, _catalog_for(profiles))
    gpus = [
        (g.id, None if g.price_usd_per_gpu_hour is None else g.price_usd_per_gpu_hour + price_shift)
        for g in load_gpu_skus()
    ]
    con = duckdb.connect(str(path))
    con.execute("create schema raw; create schema marts")
    con.execute("create table raw.run as select 'run-1' as run_id")
    for name, frame in (
        ("recommended_placements", placements),
        ("procurement_plan", procurement),
        ("procurement_buckets", buckets),
        ("workloads", profiles.frame()),
    ):
        con.register("frame", frame)
        con.execute(f"create table marts.{name} as select 'run-1' as run_id, * from frame")
        con.unregister("frame")
    con.execute("create table marts.gpus (gpu varchar, price_usd_per_gpu_hour double)")
    con.executemany("insert into marts.gpus values (?, ?)", gpus)
    con.close()


def _catalog_for(profiles: Any) -> Any:
    from pipelines.commands.procure import _catalog

    return _catalog(profiles, load_gpu_skus())


def test_procure_buys_the_cheapest_whole_nodes_and_reads_a_published_plan_of_the_same_inputs(
    tmp_path: Path,
) -> None:
    workloads = tmp_path / "workloads.yaml"
    workloads.write_text(yaml.safe_dump(ONE_WORKLOAD))
    computed = run_json("procure", "--workloads", str(workloads), "--warehouse", str(tmp_path / "none.duckdb"))
    assert computed["source"] == "computed" and computed["run_id"] is None
    profile = WorkloadProfile(name="chat", models=(LLAMA_8B,), target_concurrency=64, context_tokens=4096)
    resolved = load_model(LLAMA_8B)
    cheapest = math.inf
    for gpu in load_gpu_skus():
        if gpu.price_usd_per_gpu_hour is None or gpu.price_basis is None or gpu.price_basis.value == "estimate":
            continue  # the default plan buys list and contract prices only
        for layout in layouts(resolved.spec, gpu, profile):
            sized = size_layout(
                resolved.spec, layout, profile, model_id=LLAMA_8B, checkpoint_bytes=resolved.checkpoint_bytes
            )
            if not isinstance(sized, str):
                nodes = -(-sized.gpus_total // gpu.gpus_per_node)
                cheapest = min(cheapest, nodes * gpu.gpus_per_node * gpu.price_usd_per_gpu_hour)
    assert computed["usd_per_hour"] == pytest.approx(cheapest)
    assert computed["usd_per_hour"] == pytest.approx(sum(p["usd_per_hour"] for p in computed["purchases"]))
    (chosen,) = computed["assignments"]
    assert chosen["workload"] == "chat" and chosen["binding"] == "memory"
    assert chosen["usd_per_million_output_tokens"] > 0 and computed["usd_per_million_output_tokens"] > 0

    published = tmp_path / "warehouse.duckdb"
    _publish(published, workloads)
    read = run_json("procure", "--workloads", str(workloads), "--warehouse", str(published))
    assert read["source"] == "warehouse" and read["run_id"] == "run-1"
    assert {k: v for k, v in read.items() if k not in ("source", "run_id", "notes")} == {
        k: v for k, v in computed.items() if k not in ("source", "run_id", "notes")
    }

    moved = tmp_path / "moved.duckdb"
    _publish(moved, workloads, price_shift=0.5)
    again = run_json("procure", "--workloads", str(workloads), "--warehouse", str(moved))
    assert again["source"] == "computed" and any("priced" in n for n in again["notes"])


def test_procure_without_a_workloads_file_is_one_line(tmp_path: Path) -> None:
    assert "no workloads file" in one_line_error("procure", "--workloads", str(tmp_path / "missing.yaml"))


def test_place_takes_a_workload_and_the_command_line_wins(tmp_path: Path) -> None:
    workloads = tmp_path / "workloads.yaml"
    entry = {"name": "long", "models": [LLAMA_8B], "target_concurrency": 64, "context_tokens": 8192}
    workloads.write_text(yaml.safe_dump({"schema_version": 1, "workloads": [entry | {"max_model_len": 16384}]}))
    out = run_json("place", "--workload", "long", "--workloads", str(workloads), "--top", "1", "--gpu", "h100-sxm-80gb")
    # the file's numbers: 8,192 tokens = 8,192 - 256 prompt + 256 generated (min(256, T / 2)); 64 at once
    query = out["query"]
    assert (query["input_len"], query["output_len"]) == (8192 - 256, 256)
    assert (query["concurrency"], query["max_model_len"], query["request_rate"]) == (64, 16384, None)
    assert out["query"]["gpus"] == ["h100-sxm-80gb"] and out["options"][0]["plan"]["max_model_len"] == 16384
    assert "no workload 'nope'" in one_line_error("place", "--workload", "nope", "--workloads", str(workloads))


def test_limits_reads_the_published_rows_of_the_same_deployment(tmp_path: Path) -> None:
    """A published `marts.effective_context_limits` with a calibrated limit: read where its memory limits
    are the ones computed now, not where they differ (another model config or catalog went in)."""
    computed = run_json("limits", LLAMA_8B, "--gpu", "h100-sxm-80gb", "--warehouse", str(tmp_path / "none.duckdb"))

    def publish(path: Path, memory_shift: int) -> None:
        con = duckdb.connect(str(path))
        con.execute("create schema raw; create schema marts; create table raw.run as select 'run-7' as run_id")
        con.execute(
            "create table marts.effective_context_limits (run_id varchar, kind varchar, model varchar, gpu varchar, "
            "engine varchar, engine_version varchar, weight_dtype varchar, kv_dtype varchar, tp int, pp int, "
            "max_model_len bigint, concurrency bigint, model_limit bigint, memory_limit bigint, "
            "calibrated_limit bigint, effective_limit bigint, binding varchar, calibrated boolean, "
            "calibration_scope varchar, n_observations bigint)"
        )
        for row in computed["limits"]:
            calibrated = row["memory_limit"] // 2  # what a calibration might say: half the predicted pool
            con.execute(
                "insert into marts.effective_context_limits values "
                "('run-7', 'model_gpu_tp', ?, 'h100-sxm-80gb', 'vllm', ?, 'bf16', 'auto', 1, 1, ?, ?, ?, ?, ?, ?, "
                "'calibrated', true, 'vllm/h100', 5)",
                [
                    LLAMA_8B,
                    computed["engine_version"],
                    computed["max_model_len"],
                    row["concurrency"],
                    row["model_limit"],
                    row["memory_limit"] + memory_shift,
                    calibrated,
                    calibrated,
                ],
            )
        con.close()

    same, other = tmp_path / "same.duckdb", tmp_path / "other.duckdb"
    publish(same, 0)
    publish(other, 16)
    read = run_json("limits", LLAMA_8B, "--gpu", "h100-sxm-80gb", "--warehouse", str(same))
    assert read["source"] == "warehouse" and read["run_id"] == "run-7"
    assert [r["calibrated_limit"] for r in read["limits"]] == [r["memory_limit"] // 2 for r in computed["limits"]]
    assert all(r["calibrated"] and r["binding"] == "calibrated" for r in read["limits"])
    again = run_json("limits", LLAMA_8B, "--gpu", "h100-sxm-80gb", "--warehouse", str(other))
    assert again["source"] == "computed" and again["limits"] == computed["limits"]
    assert any("other inputs" in note for note in again["notes"])


def test_a_p99_ttft_target_and_not_memory_decides_the_placement() -> None:
    """By hand: a lone 2,048-token prefill of Llama-3.1-8B (8.03B parameters, the model card) costs at least
    2 x 8.03e9 x 2,048 = 3.29e13 FLOP; on one L4 at its fp8 dense peak of 242 TFLOPS (the catalog's datasheet
    figure) that is >= 136 ms, so no single-L4 replica can hold a p99 TTFT of 100 ms however efficient the
    kernels. Memory and price alone place the model on one L4 (the cheapest GPU it fits); with the target
    the answer moves, and every option meets the target in the simulation."""
    l4 = find_gpu_sku("l4-24gb")
    assert l4.fp8_dense_tflops is not None
    lone_prefill_floor_ms = 2 * 8.03e9 * 2048 / (l4.fp8_dense_tflops * 1e12) * 1e3
    assert lone_prefill_floor_ms > 100
    ask = ["place", LLAMA_8B, "--gpu", "l4-24gb", "--gpu", "h100-sxm-80gb", "--request-rate", "1"]
    ask += ["--input-len", "2048", "--output-len", "128", "--top", "3"]
    free = run_json(*ask)["options"][0]
    assert (free["gpu"], free["tp"], free["pp"]) == ("l4-24gb", 1, 1)  # memory fits there: cost decides
    # no target, yet the replicas keep up with the rate (too few, and the queue grows through the whole run:
    # a 400-request run at 1 req/s then shows a median TTFT of minutes)
    assert free["simulated"]["ttft"]["median_ms"] < 10 * lone_prefill_floor_ms
    bound = run_json(*ask, "--ttft-ms", "100")
    for option in bound["options"]:
        assert (option["gpu"], option["tp"] * option["pp"]) != ("l4-24gb", 1)
        assert option["simulated"]["ttft"]["p99_ms"] <= 100
    assert bound["options"][0]["usd_per_hour"] > free["usd_per_hour"]  # the target, not memory, costs more
