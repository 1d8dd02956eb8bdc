"""Placement and procurement against hand-derived numbers.

The seed model (32 layers, 32 KV heads of 128, bf16: 0.5 MiB per token, so 2 GiB per 4,096-token
sequence) with a 20 GiB checkpoint on the `plain` engine (utilization 1.0, no overhead), so
every B_max below is arithmetic a person can redo:

| GPU, TP | KV per GPU | per sequence per GPU | B_max | planned (90 %) | replicas for 60 | GPUs | $/h |
|---|---|---|---|---|---|---|---|
| small 48 GiB $1.5, TP1 | 28 GiB | 2 GiB | 14 | 12 | 5 | 5 | 7.5 |
| small, TP2 | 38 GiB - norms | 1 GiB | 37 | 33 | 2 | 4 | 6.0 |
| big 80 GiB $4, TP1 | 60 GiB | 2 GiB | 30 | 27 | 3 | 3 | 12.0 |
| big, TP2 | 70 GiB - norms | 1 GiB | 69 | 62 | 1 | 2 | 8.0 |
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capacity.calibration import Correction, ScopeKey
from capacity.placement import (
    PlacementOption,
    PlacementResult,
    place,
    plan_procurement,
    solver_available,
)
from capacity.planning_types import DTYPE_POLICIES, SolverOptions, WorkloadProfile
from capacity.spec import GpuSku, SpecError
from tests.conftest import require_extra
from tests.handmade import dense_spec

GIB = 1 << 30
SEED = dense_spec(layers=32, kv_heads=32, head_dim=128)
SMALL = GpuSku("small", "Small 48GB", "acme", 48 * GIB, price_usd_per_gpu_hour=1.5, gpus_per_node=8)
BIG = GpuSku("big", "Big 80GB", "acme", 80 * GIB, price_usd_per_gpu_hour=4.0, gpus_per_node=8, fp8_support=True)
UNPRICED = GpuSku("free", "No price", "acme", 192 * GIB)


def chat(**overrides: object) -> WorkloadProfile:
    fields: dict[str, object] = {
        "name": "chat",
        "models": ("seed",),
        "target_concurrency": 60,
        "context_tokens": 4096,
        "engine": "plain",
        "max_gpus_per_replica": 2,
    }
    fields.update(overrides)
    return WorkloadProfile(**fields)  # type: ignore[arg-type]


def summary(result: PlacementResult) -> list[tuple[str, int, int, int, int, float]]:
    return [(o.gpu, o.tp, o.b_max, o.planned_per_replica, o.replicas, o.usd_per_hour) for o in result.options]


def test_cheapest_placement_and_ranked_alternatives() -> None:
    result = place(SEED, chat(), [BIG, SMALL, UNPRICED], model_id="seed", checkpoint_bytes=20 * GIB)
    assert summary(result) == [
        ("small", 2, 37, 33, 2, 6.0),
        ("small", 1, 14, 12, 5, 7.5),
        ("big", 2, 69, 62, 1, 8.0),
        ("big", 1, 30, 27, 3, 12.0),
    ]
    best = result.best
    assert best is not None and best.rank == 1 and best.gpus_per_replica == 2 and best.gpus_total == 4
    assert best.usd_per_sequence_hour(60) == pytest.approx(0.1)
    assert best.planned_capacity == 66 >= 60
    assert [o.rank for o in result.options] == [1, 2, 3, 4]
    assert not any(o.calibrated for o in result.options)
    assert all(o.gpu != "free" for o in result.options), "a GPU without a price cannot be ranked by $"


def test_headroom_is_what_the_plan_keeps_free() -> None:
    full = place(SEED, chat(headroom=1.0), [SMALL], model_id="seed", checkpoint_bytes=20 * GIB)
    # at 100 % of B_max: TP2 holds 37 -> 2 replicas, TP1 holds 14 -> 5 replicas (same costs, more room)
    assert [(o.tp, o.planned_per_replica, o.replicas) for o in full.options] == [(2, 37, 2), (1, 14, 5)]


def test_fp8_kv_only_where_the_gpu_supports_it() -> None:
    result = place(
        SEED, chat(dtype_policy=DTYPE_POLICIES["fp8-kv"]), [BIG, SMALL], model_id="seed", checkpoint_bytes=20 * GIB
    )
    assert all(o.kv_dtype == "auto" for o in result.options if o.gpu == "small")
    fp8 = [o for o in result.options if o.kv_dtype == "fp8"]
    # fp8 KV halves the bytes per token: big TP1 60 GiB / 1 GiB = 60 sequences -> 54 planned -> 2 replicas
    assert [(o.gpu, o.tp, o.b_max, o.replicas, o.usd_per_hour) for o in fp8] == [
        ("big", 1, 60, 2, 8.0),
        ("big", 2, 139, 1, 8.0),
    ]
    assert result.best is not None and (result.best.gpu, result.best.tp) == ("small", 2)
    # at equal cost and GPUs the smaller replica ranks first, and full precision before reduced
    big_8 = [(o.tp, o.kv_dtype) for o in result.options if o.usd_per_hour == 8.0]
    assert big_8 == [(1, "fp8"), (2, "auto"), (2, "fp8")]


def test_a_calibration_changes_the_capacity_and_says_so() -> None:
    # telemetry says the small GPU loses 4 GiB more than predicted: TP2 34 GiB -> 33 -> 29 planned -> 3 replicas
    scope = ScopeKey("engine_profile_gpu", "plain", engine_profile="plain", gpu="small")
    correction = Correction(scope, n_observations=5, non_torch_delta_bytes=4 * GIB)

    def correction_for(gpu: GpuSku, engine: str, version: str | None, family: str) -> Correction | None:
        return correction if gpu.id == "small" else None

    result = place(
        SEED, chat(), [BIG, SMALL], model_id="seed", checkpoint_bytes=20 * GIB, correction_for=correction_for
    )
    assert summary(result)[:2] == [("big", 2, 69, 62, 1, 8.0), ("small", 1, 12, 10, 6, 9.0)]
    small = [o for o in result.options if o.gpu == "small"]
    assert {(o.tp, o.b_max, o.b_max_predicted, o.replicas) for o in small} == {(1, 12, 14, 6), (2, 33, 37, 2 + 1)}
    assert all(o.calibrated and o.n_observations == 5 and "gpu=small" in (o.calibration_scope or "") for o in small)


def test_infeasible_everywhere_says_why() -> None:
    long = chat(context_tokens=32768, max_model_len=32768, target_concurrency=4)
    result = place(SEED, long, [SMALL], model_id="seed", checkpoint_bytes=20 * GIB)
    # 16 GiB per sequence: TP1 holds 1 (0 at 90 %), TP2 holds 4 GiB... 37 GiB / 8 GiB = 4 -> 3 planned
    assert [(o.tp, o.b_max, o.planned_per_replica, o.replicas) for o in result.options] == [(2, 4, 3, 2)]
    too_long = place(SEED, chat(context_tokens=65536), [SMALL], model_id="seed", checkpoint_bytes=20 * GIB)
    assert too_long.best is None and "exceeds the model's context limit 32,768" in too_long.reason()
    nothing = place(SEED, chat(context_tokens=32768, max_gpus_per_replica=1), [SMALL], model_id="seed",
                    checkpoint_bytes=20 * GIB)  # fmt: skip
    assert nothing.best is None and "headroom" in nothing.reason()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"target_concurrency": 0}, "target_concurrency"),
        ({"context_tokens": 8192, "max_model_len": 4096}, "below context_tokens"),
        ({"headroom": 1.5}, "headroom"),
        ({"models": ()}, "no model"),
    ],
)
def test_bad_profiles_are_one_line_errors(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        place(SEED, chat(**overrides), [SMALL], model_id="seed")


# --- procurement -----------------------------------------------------------------------------------


def option(workload: str, gpu: str, gpus: int, price: float, per_node: int = 8, rank: int = 1) -> PlacementOption:
    return PlacementOption(
        workload=workload, model="m", gpu=gpu, gpus_per_node=per_node, tp=1, pp=1, weight_dtype="auto",
        kv_dtype="auto", weight_format="bfloat16", kv_cache_dtype="bfloat16", engine="vllm", engine_version=None,
        context_tokens=1024, max_model_len=1024, b_max=10, b_max_predicted=10, planned_per_replica=9,
        replicas=gpus, usd_per_gpu_hour=price, rank=rank,
    )  # fmt: skip


def demand(name: str, *options: PlacementOption) -> PlacementResult:
    ranked = sorted(options, key=PlacementOption.sort_key)
    return PlacementResult(
        WorkloadProfile(name, ("m",), 1, 1024), "m", tuple(PlacementOption(**{**_fields(o), "rank": i + 1})
                                                           for i, o in enumerate(ranked)))  # fmt: skip


def _fields(o: PlacementOption) -> dict[str, object]:
    return {name: getattr(o, name) for name in o.__dataclass_fields__}


# W1 fits 6 GPUs of A ($1.0) or of B ($1.1); W2 fits only B (2 GPUs). Nodes of 8.
# Alone, W1 picks A: 1 node of A + 1 node of B = 8.0 + 8.8 = 16.8 $/h.
# Together on B: 8 GPUs = 1 node = 8.8 $/h, the optimum.
SHARED = [
    demand("w1", option("w1", "a", 6, 1.0), option("w1", "b", 6, 1.1)),
    demand("w2", option("w2", "b", 2, 1.1)),
]


@pytest.mark.parametrize("method", ["enumeration", "greedy", *(["highs"] if solver_available() else [])])
def test_whole_nodes_make_two_workloads_share_one(method: str) -> None:
    plan = plan_procurement(SHARED, SolverOptions(method=method))
    assert plan.usd_per_hour == pytest.approx(8.8)
    assert {d: o.gpu for d, o in plan.assignments.items()} == {("w1", "m"): "b", ("w2", "m"): "b"}
    (purchase,) = plan.purchases
    assert (purchase.gpu, purchase.gpus_used, purchase.gpus_bought, purchase.nodes, purchase.spare_gpus) == (
        "b", 8, 8, 1, 0,
    )  # fmt: skip
    assert purchase.workloads == ("w1:m", "w2:m")
    assert plan.optimal is (method != "greedy")


def test_gpus_one_by_one_each_workload_takes_its_cheapest() -> None:
    plan = plan_procurement(SHARED, SolverOptions(whole_nodes=False, method="enumeration"))
    assert {d[0]: o.gpu for d, o in plan.assignments.items()} == {"w1": "a", "w2": "b"}
    assert plan.usd_per_hour == pytest.approx(6 * 1.0 + 2 * 1.1)
    assert all(p.nodes is None for p in plan.purchases)


@pytest.mark.parametrize("method", ["enumeration", "greedy", *(["highs"] if solver_available() else [])])
def test_a_cap_per_sku_moves_the_overflow(method: str) -> None:
    # three workloads of 4 GPUs, A ($1) capped at 8: two go to A, the third to B ($2): 8 + 16 = 24 $/h
    results = [demand(f"w{i}", option(f"w{i}", "a", 4, 1.0), option(f"w{i}", "b", 4, 2.0)) for i in (1, 2, 3)]
    plan = plan_procurement(results, SolverOptions(gpu_limits={"a": 8}, method=method))
    assert sorted(o.gpu for o in plan.assignments.values()) == ["a", "a", "b"]
    assert plan.usd_per_hour == pytest.approx(24.0)
    impossible = plan_procurement(results, SolverOptions(gpu_limits={"a": 8, "b": 0}, method=method))
    assert impossible.assignments == {} and len(impossible.unserved) == 3


def test_auto_uses_the_solver_when_installed_else_enumerates(monkeypatch: pytest.MonkeyPatch) -> None:
    from capacity import placement

    expected = "highs" if solver_available() else "enumeration"
    assert plan_procurement(SHARED).method == expected
    monkeypatch.setattr(placement, "solver_available", lambda: False)
    plan = plan_procurement(SHARED)
    assert plan.method == "enumeration" and plan.optimal and plan.usd_per_hour == pytest.approx(8.8)
    big = plan_procurement(SHARED, SolverOptions(enumeration_limit=1))
    assert big.method == "greedy" and not big.optimal and "greedy" in big.notes[0]
    with pytest.raises(RuntimeError, match="solver"):
        plan_procurement(SHARED, SolverOptions(method="highs"))


def test_a_demand_without_options_is_unserved_not_dropped() -> None:
    empty = PlacementResult(WorkloadProfile("huge", ("m",), 1, 1024), "m", (), (("x", "does not fit"),))
    plan = plan_procurement([*SHARED, empty], SolverOptions(method="enumeration"))
    assert plan.unserved == (("huge", "m", "no feasible placement among 1 layouts; most common: does not fit (1)"),)
    assert len(plan.assignments) == 2


def test_solver_matches_enumeration_on_random_fleets() -> None:
    import random

    require_extra("solver", "highspy")

    rng = random.Random(7)
    prices = {"a": 1.0, "b": 1.3, "c": 2.1}
    for _ in range(25):
        results = []
        per_node = {"a": 8, "b": 8, "c": rng.choice([4, 8])}
        for w in range(rng.randint(1, 4)):
            opts = [
                option(f"w{w}", gpu, rng.randint(1, 12), price, per_node=per_node[gpu])
                for gpu, price in prices.items()
                if rng.random() < 0.8
            ]
            if opts:
                results.append(demand(f"w{w}", *opts))
        limits = {"a": rng.choice([8, 16, 64])}
        exact = plan_procurement(results, SolverOptions(gpu_limits=limits, method="enumeration"))
        solved = plan_procurement(results, SolverOptions(gpu_limits=limits, method="highs"))
        greedy = plan_procurement(results, SolverOptions(gpu_limits=limits, method="greedy"))
        assert solved.usd_per_hour == pytest.approx(exact.usd_per_hour)
        assert len(greedy.assignments) == len(exact.assignments), "greedy finds a plan where one exists"
        assert greedy.usd_per_hour >= exact.usd_per_hour - 1e-9


# --- properties ------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    concurrency=st.integers(1, 2000),
    context=st.sampled_from([512, 1024, 4096, 8192, 16384, 32768]),
    headroom=st.sampled_from([0.5, 0.8, 0.9, 1.0]),
    checkpoint_gib=st.integers(2, 40),
)
def test_every_option_serves_the_target_with_the_fewest_replicas(
    concurrency: int, context: int, headroom: float, checkpoint_gib: int
) -> None:
    workload = chat(
        target_concurrency=concurrency, context_tokens=context, headroom=headroom, max_gpus_per_replica=None
    )
    result = place(SEED, workload, [BIG, SMALL], model_id="seed", checkpoint_bytes=checkpoint_gib * GIB)
    keys = [o.sort_key() for o in result.options]
    assert keys == sorted(keys) and [o.rank for o in result.options] == list(range(1, len(keys) + 1))
    for o in result.options:
        assert o.planned_per_replica == int(o.b_max * headroom) >= 1
        assert o.planned_capacity >= concurrency > (o.replicas - 1) * o.planned_per_replica
        assert o.usd_per_hour == pytest.approx(o.replicas * o.tp * o.pp * o.usd_per_gpu_hour)
    if result.best is not None:  # the cheapest is no dearer than any other feasible option
        assert all(result.best.usd_per_hour <= o.usd_per_hour + 1e-9 for o in result.options)
