"""Mélange-style procurement: request-size buckets split across GPU types, solved by HiGHS.

The hand case (two SKUs, two buckets, one workload), derived on paper:

- SKU a: $1/GPU-hour, 1 GPU per node, a replica serves 10 short or 0.5 long requests/s;
- SKU b: $3/GPU-hour, 1 GPU per node, a replica serves 12 short or 4 long requests/s;
- load: 10 short requests/s (share 5/6 of 12/s) and 2 long ones (1/6).

Only a: short needs 10/10 = 1 replica, long 2/0.5 = 4: 5 GPUs, $5/h.
Only b: 10/12 + 2/4 = 1.33 replicas -> 2 GPUs, $6/h.
Mixed: R_a >= 10 x / 10 + 2 y / 0.5 and R_b >= 10 (1 - x) / 12 + 2 (1 - y) / 4, cost R_a + 3 R_b.
R_b = 0 forces x = y = 1 and R_a = 5 ($5); R_b = 1 with R_a = 0 needs 1.33 <= 1 (no); R_b = 1, R_a = 1
is feasible, e.g. y = 0 (long all on b: 0.5) and x = 1: $4/h, the optimum (R_b >= 2 already costs $6).
So 1 a + 1 b; the split is any (x, y) with x + 4 y <= 1 and (1 - x) 10/12 + (1 - y) / 2 <= 1.
"""

from __future__ import annotations

import polars as pl
import pytest

from capacity.planning_types import BucketDemand, Candidate, RequestBucket, SolverOptions
from capacity.procurement import plan_buckets, request_buckets
from capacity.spec import SpecError
from tests.conftest import require_extra

HIGHS = SolverOptions(method="highs")
CHEAPEST = SolverOptions(method="cheapest-per-request")
GREEDY = SolverOptions(method="greedy")
SHORT = RequestBucket("short", 500, 100, 10 / 12)
LONG = RequestBucket("long", 8000, 500, 2 / 12)


def _candidate(gpu: str, price: float, short: float, long: float) -> Candidate:
    return Candidate(
        key=f"{gpu} tp=1 pp=1 auto/auto", gpu=gpu, gpus_per_replica=1, gpus_per_node=1, usd_per_gpu_hour=price,
        requests_per_second={"short": short, "long": long},
        binding={"short": "latency", "long": "memory"}, batch={"short": 32, "long": 4},
        tpot_ms={"short": 20.0, "long": 30.0}, ttft_ms={"short": 50.0, "long": 900.0},
    )  # fmt: skip


A = _candidate("a", 1.0, 10.0, 0.5)
B = _candidate("b", 3.0, 12.0, 4.0)


def _demand(*candidates: Candidate) -> BucketDemand:
    return BucketDemand("chat", "m", 12.0, (SHORT, LONG), candidates)


def test_two_skus_two_buckets_by_hand() -> None:
    require_extra("solver", "highspy")
    plan = plan_buckets([_demand(A, B)], HIGHS)
    assert plan.method == "highs" and plan.optimal
    assert plan.gpus_bought == {"a": 1, "b": 1} and plan.usd_per_hour == pytest.approx(4.0)
    share = {(c.bucket.label, c.candidate.gpu): c.share for c in plan.choices}
    x, y = share.get(("short", "a"), 0.0), share.get(("long", "a"), 0.0)
    assert share.get(("short", "b"), 0.0) == pytest.approx(1 - x) and share.get(("long", "b"), 0.0) == pytest.approx(1 - y)
    assert x + 4 * y <= 1 + 1e-9 and (1 - x) * 10 / 12 + (1 - y) / 2 <= 1 + 1e-9
    long = [c for c in plan.choices if c.bucket.label == "long" and c.candidate.gpu == "b"]
    for c in plan.choices:  # every bucket's load is served in full, within the replicas bought
        assert c.replica_load <= plan.replicas[(c.workload, c.model, c.candidate.key)] + 1e-9
    assert {c.binding for c in long} == {"memory"}
    # $ per million output tokens: $4/h over (10 x 100 + 2 x 500) tokens/s x 3600
    assert plan.usd_per_million_output_tokens == pytest.approx(4.0 / (2000 * 3600) * 1e6)
    # a long request on b, replica fully used: $3/h over 4 x 500 tokens/s
    assert long[0].usd_per_million_output_tokens == pytest.approx(3.0 / (4 * 500 * 3600) * 1e6)


def test_the_mix_beats_the_best_single_sku_where_it_should() -> None:
    require_extra("solver", "highspy")
    mixed = plan_buckets([_demand(A, B)], HIGHS).usd_per_hour
    only_a = plan_buckets([_demand(A)], HIGHS).usd_per_hour
    only_b = plan_buckets([_demand(B)], HIGHS).usd_per_hour
    assert (only_a, only_b, mixed) == (pytest.approx(5.0), pytest.approx(6.0), pytest.approx(4.0))
    # where one SKU is cheaper per request for every bucket, the mix is that SKU alone
    cheap = _candidate("c", 1.0, 20.0, 5.0)
    plan = plan_buckets([_demand(A, B, cheap)], HIGHS)
    assert plan.gpus_bought == {"c": 1} and plan.usd_per_hour == pytest.approx(1.0)  # 10/20 + 2/5 = 0.9


def test_caps_and_whole_nodes() -> None:
    require_extra("solver", "highspy")
    capped = plan_buckets([_demand(A, B)], SolverOptions(method="highs", gpu_limits={"b": 0}))
    assert capped.gpus_bought == {"a": 5}
    eight = Candidate(**{**{f: getattr(B, f) for f in B.__dataclass_fields__}, "gpus_per_node": 8})
    nodes = plan_buckets([_demand(A, eight)], HIGHS)
    assert nodes.gpus_bought == {"a": 5}  # a node of 8 b GPUs costs $24/h: a alone is cheaper
    loose = plan_buckets([_demand(A, eight)], SolverOptions(method="highs", whole_nodes=False))
    assert loose.usd_per_hour == pytest.approx(4.0)


def test_without_a_solver_each_bucket_on_its_cheapest_layout() -> None:
    plan = plan_buckets([_demand(A, B)], CHEAPEST)
    # $/request: short a 1/10 < b 3/12; long a 1/0.5 = 2 > b 3/4: the same split, here optimal by chance
    assert plan.gpus_bought == {"a": 1, "b": 1} and not plan.optimal and plan.notes


def test_a_bucket_no_layout_serves_is_unserved() -> None:
    short_only = Candidate(**{**{f: getattr(A, f) for f in A.__dataclass_fields__},
                              "requests_per_second": {"short": 10.0}})  # fmt: skip
    plan = plan_buckets([_demand(short_only)], CHEAPEST)
    assert plan.unserved == (("chat", "m", "no layout serves bucket long (8,000 in + 500 out)"),)


def test_request_buckets_from_percentiles() -> None:
    # inputs p50 = 1,000 and p95 = 6,000; outputs p50 = 200, p90 = 800: intervals (0, p50] with half of
    # the requests and (p50, max] with the other half (the tail above p95 sized at p95), outputs 0.5 / 0.5
    buckets = request_buckets([(0.5, 1000), (0.95, 6000)], [(0.5, 200), (0.9, 800)], max_model_len=6500)
    got = [(b.label, b.input_tokens, b.output_tokens, b.share) for b in buckets]
    assert got == [
        ("in<=p50/out<=p50", 1000, 200, 0.25),
        ("in<=p50/out<=p90", 1000, 800, 0.25),
        ("in<=p95/out<=p50", 6000, 200, 0.25),
        ("in<=p95/out<=p90", 5700, 800, 0.25),  # 6,000 + 800 > 6,500: the prompt clipped to fit
    ]
    assert sum(b.share for b in buckets) == 1.0
    with pytest.raises(SpecError, match="leaves no prompt"):
        request_buckets([(0.5, 10)], [(0.5, 7000)], max_model_len=6500)
    many = [(q / 100, q) for q in range(1, 10)]
    with pytest.raises(SpecError, match="9 input x 9 output percentiles make more than 64 request buckets"):
        request_buckets(many, many, max_model_len=6500)


def test_workload_request_rates_and_buckets_parse() -> None:
    import yaml

    from recommendations.workloads import parse_workloads

    document = yaml.safe_load(
        """
        workloads:
          - {name: rated, model: m, target_concurrency: 4, context: {p50: 2000, p95: 8000}, max_model_len: 9000,
             request_rate: 3, output_tokens: 500}
          - {name: explicit, model: m, target_concurrency: 4, context_tokens: 4096, request_rate: 1.5,
             input: {p90: 3000}, output: {p50: 100, max: 900}}
          - {name: zero-rate, model: m, target_concurrency: 4, context_tokens: 1024, request_rate: 0}
          - {name: bad-pct, model: m, target_concurrency: 4, context_tokens: 1024, request_rate: 1, input: {q5: 3}}
          - {name: shrinking, model: m, target_concurrency: 4, context_tokens: 1024, request_rate: 1,
             output: {p50: 300, p95: 200}}
          - {name: too-long, model: m, target_concurrency: 4, context_tokens: 1024, request_rate: 1, output: {p50: 2000}}
        """
    )
    parsed = parse_workloads(document)
    from capacity.procurement import workload_buckets

    rated, explicit = parsed.profiles
    # context percentiles less the 500 output tokens: prompts of 1,500 (half) and 7,500 (the other half)
    assert [(b.input_tokens, b.output_tokens, b.share) for b in workload_buckets(rated)] == [
        (1500, 500, 0.5),
        (7500, 500, 0.5),
    ]
    # the one input interval holds every request; the output's max bucket has half of them
    assert [(b.label, b.input_tokens, b.output_tokens, b.share) for b in workload_buckets(explicit)] == [
        ("in<=p90/out<=p50", 3000, 100, 0.5),
        ("in<=p90/out<=p100", 3000, 900, 0.5),
    ]
    reasons = dict(parsed.errors)
    assert "request_rate must be a positive number" in reasons["zero-rate"]
    assert "'q5' is not p1..p100" in reasons["bad-pct"]
    assert "grow with the percentile" in reasons["shrinking"]
    assert "leaves no prompt" in reasons["too-long"]
    frame = parsed.frame().filter(pl.col("valid"))
    assert frame["request_rate_per_s"].to_list() == [3.0, 1.5]
    assert frame["request_buckets"][1].to_list() == [
        "in<=p90/out<=p50: 3000 in + 100 out, 0.5 of requests",
        "in<=p90/out<=p100: 3000 in + 900 out, 0.5 of requests",
    ]


def test_the_fleet_plan_shares_nodes_between_placements_and_buckets() -> None:
    """A concurrency-sized workload takes 4 GPUs of n (nodes of 8 at $1/GPU-hour, its only option);
    the rated one's buckets need 10 x 1/10 + 2 x 1/4 = 1.5 -> 2 one-GPU replicas on n, or the same on
    s ($2/GPU-hour, 1 per node). Together on n: 6 of 8 GPUs, one node, $8/h. Bought apart, the
    buckets alone would take s (2 x $2 < a node of n at $8) beside w1's node of n: $12/h."""
    require_extra("solver", "highspy")
    from capacity.placement import PlacementOption, PlacementResult
    from capacity.procurement import plan_fleet
    from tests.test_placement import demand, option

    fixed: PlacementResult = demand("w1", option("w1", "n", 4, 1.0))
    on_n = Candidate(**{**{f: getattr(A, f) for f in A.__dataclass_fields__}, "key": "n tp=1 pp=1 auto/auto",
                        "gpu": "n", "gpus_per_node": 8, "requests_per_second": {"short": 10.0, "long": 4.0}})  # fmt: skip
    on_s = Candidate(**{**{f: getattr(on_n, f) for f in on_n.__dataclass_fields__}, "key": "s tp=1 pp=1 auto/auto",
                        "gpu": "s", "gpus_per_node": 1, "usd_per_gpu_hour": 2.0})  # fmt: skip
    rated = _demand(on_n, on_s)
    plan = plan_fleet([fixed], [rated], HIGHS)
    assert plan.method == "highs" and plan.optimal and plan.usd_per_hour == pytest.approx(8.0)
    (purchase,) = plan.purchases
    assert (purchase.gpu, purchase.gpus_used, purchase.gpus_bought, purchase.nodes) == ("n", 6, 8, 1)
    assert purchase.workloads == ("chat:m", "w1:m")
    assert isinstance(plan.assignments[("w1", "m")], PlacementOption)
    assert plan.buckets is not None and plan.buckets.replicas == {("chat", "m", "n tp=1 pp=1 auto/auto"): 2}
    from capacity.placement import plan_procurement

    alone = plan_procurement([fixed], GREEDY).usd_per_hour + plan_buckets([rated], HIGHS).usd_per_hour
    assert alone == pytest.approx(12.0)
    # without the MILP: the greedy placements, each bucket on its cheapest layout per request, GPUs added
    # up per SKU before rounding to nodes (here the same node), not proven optimal
    fallback = plan_fleet([fixed], [rated], GREEDY)
    assert fallback.method == "greedy+cheapest-per-request" and not fallback.optimal
    assert fallback.usd_per_hour == pytest.approx(8.0)
    # a workload given both ways is planned by its buckets only
    both = plan_fleet([fixed, demand("chat", option("chat", "n", 8, 1.0))], [rated], HIGHS)
    assert set(both.assignments) == {("w1", "m")} and both.usd_per_hour == pytest.approx(8.0)


def test_the_shipped_workloads_bucket_plan() -> None:
    """workloads.yaml's rated workloads (chat, batch-summarization) in the fleet plan, bundled catalog."""
    require_extra("solver", "highspy")
    from pathlib import Path

    from capacity.calibration import fit_calibration
    from models_registry.planning import bundled_catalog
    from recommendations.buckets import BUCKET_SCHEMA, bucket_demands, bucket_frame
    from recommendations.placements import placement_frames
    from recommendations.workloads import load_workloads

    workloads = load_workloads(Path(__file__).resolve().parent.parent / "workloads.yaml")
    catalog = bundled_catalog([m for p in workloads.profiles for m in p.models])
    fit = fit_calibration([])
    demands, skipped = bucket_demands(workloads, catalog, fit)
    placements, procurement, plan = placement_frames(workloads, catalog, fit, bucket_demands=demands)
    assert plan.method == "highs" and plan.optimal and plan.buckets is not None
    frame = bucket_frame(plan.buckets, skipped)
    assert frame.schema == pl.Schema(BUCKET_SCHEMA)
    assert set(frame["workload"]) == {"chat", "batch-summarization"} and frame["reason"].null_count() == frame.height
    served = frame.group_by("workload", "bucket").agg(pl.col("share").sum(), pl.col("bucket_share").first())
    assert served["share"].to_list() == pytest.approx([1.0] * served.height)  # every bucket served in full
    chat = served.filter(pl.col("workload") == "chat")
    assert chat.height == 6 and chat["bucket_share"].sum() == pytest.approx(1.0)  # 3 input x 2 output intervals
    assert (frame["replica_load"] <= frame["layout_replicas"] + 1e-9).all()
    assert set(frame["binding"]) <= {"memory", "latency", "throughput"}
    assert (frame.filter(pl.col("workload") == "chat")["tpot_ms"] <= 40).all()  # chat's TPOT target holds
    # the rated workloads are bought for in the fleet plan, not as a placement each
    assert not placements.filter(pl.col("workload").is_in(["chat", "batch-summarization"]))["in_fleet_plan"].any()
    bought = {r["gpu"]: r for r in procurement.iter_rows(named=True)}
    for (workload, model, _key), replicas in plan.buckets.replicas.items():
        gpu = next(c.candidate.gpu for c in plan.buckets.choices if c.workload == workload)
        assert f"{workload}:{model}" in bought[gpu]["workloads"] and replicas >= 1
    assert procurement["fleet_usd_per_hour"][0] == pytest.approx(sum(r["usd_per_hour"] for r in bought.values()))
