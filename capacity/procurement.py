"""Mélange-style procurement: request-size buckets x GPU layouts, each bucket's load split across them.

Griggs et al., "Mélange: Cost Efficient Large Language Model Serving by Exploiting GPU Heterogeneity"
(2024): small requests are cheapest on small GPUs, long ones on large GPUs, so a fleet that splits
its traffic by request size across GPU types can cost less than the best single type. Their
formulation, with capplan's memory model (B_max) and performance model (TPOT, TTFT) supplying what
Mélange profiles on hardware:

- a workload with a request rate `lambda` (requests/s) and input / output length distributions is
  cut into buckets b (`request_buckets`: the intervals between the given percentiles, each sized at
  its upper edge; input and output independent, so a bucket's share is the product);
- per bucket and candidate layout c (GPU SKU x TP x PP x dtypes), `capacity.placement.place`
  gives the batch B a replica runs at (the largest meeting memory and the latency targets) and
  its TPOT and TTFT there; a replica then serves `mu_bc = B / (TTFT + O x TPOT)` requests/s (a
  sequence holds its slot from arrival to its last token);
- variables: `x_bc` in [0, 1], the share of bucket b's load sent to c; integer replicas `R_c` per
  workload x model and layout; integer nodes (or GPUs) per SKU;
- constraints: sum_c x_bc = 1 per bucket; sum_b x_bc lambda_b / mu_bc <= R_c (a replica's time is
  shared by the buckets it serves); sum_c R_c x GPUs per replica on SKU s <= GPUs bought of s
  (whole nodes; at most the per-SKU cap);
- minimise $/hour of the GPUs bought (a 1e-6 tie-break toward cheaper replicas). HiGHS solves it
  (`highspy`, the `solver` extra); without it each bucket goes to its cheapest layout per request
  (the LP optimum when replicas may be fractional), rounded up: a plan, not proven optimal.

`plan_fleet` is the fleet's plan: the same MILP with the concurrency-sized workloads of
`capacity.placement.plan_procurement` as binary one-option-each columns, so placements and bucket
replicas share the SKUs' nodes (`marts.procurement_plan`); `plan_buckets` plans buckets alone.

Each choice reports its binding constraint: memory (the KV pool sets B), latency (a TPOT or TTFT
target sets B) or throughput (the engine's max_num_seqs sets B: the replica serves requests as fast
as its steps run, memory and latency have room), and $ per million output tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from capacity.placement import (
    CorrectionFor,
    Demand,
    PlacementOption,
    PlacementResult,
    ProcurementPlan,
    SkuPurchase,
    new_highs,
    place,
    plan_procurement,
    procurement_options,
    solver_available,
)
from capacity.planning_types import (
    DEFAULT_SOLVER,
    BucketChoice,
    BucketDemand,
    BucketPlan,
    Candidate,
    RequestBucket,
    SolverOptions,
    WorkloadProfile,
)
from capacity.spec import GpuSku, ModelSpec, SpecError

TIE_BREAK = 1e-6
MAX_BUCKETS = 64  # input x output intervals of one workload: each is placed on every layout


def _intervals(percentiles: Sequence[tuple[float, int]]) -> list[tuple[str, int, float]]:
    """(label, tokens at the interval's upper edge, share of requests) per given percentile; the
    requests above the largest percentile are counted in its interval (give p99 or p100 to size
    the tail on its own)."""
    ordered = sorted(percentiles)
    out: list[tuple[str, int, float]] = []
    previous = 0.0
    for i, (q, tokens) in enumerate(ordered):
        upper = 1.0 if i == len(ordered) - 1 else q
        out.append((f"p{q * 100:g}", tokens, upper - previous))
        previous = upper
    return out


def request_buckets(
    input_percentiles: Sequence[tuple[float, int]],
    output_percentiles: Sequence[tuple[float, int]],
    max_model_len: int,
) -> tuple[RequestBucket, ...]:
    """The cross product of the input and output intervals; SpecError for lengths that cannot be
    served (an output that leaves no room for a prompt in max_model_len)."""
    if not input_percentiles or not output_percentiles:
        raise SpecError("request buckets need input and output length percentiles")
    if len(input_percentiles) * len(output_percentiles) > MAX_BUCKETS:
        raise SpecError(
            f"{len(input_percentiles)} input x {len(output_percentiles)} output percentiles make more than "
            f"{MAX_BUCKETS} request buckets"
        )
    for q, tokens in (*input_percentiles, *output_percentiles):
        if not 0 < q <= 1 or tokens < 1:
            raise SpecError(f"percentile p{q * 100:g} = {tokens}: percentiles are in (0, 100], lengths >= 1")
    buckets = []
    for in_label, prompt, in_share in _intervals(input_percentiles):
        for out_label, generated, out_share in _intervals(output_percentiles):
            if generated >= max_model_len:
                raise SpecError(f"output {generated:,} tokens leaves no prompt within max_model_len {max_model_len:,}")
            prompt_fit = min(prompt, max_model_len - generated)
            share = in_share * out_share
            if share > 0:
                buckets.append(RequestBucket(f"in<={in_label}/out<={out_label}", prompt_fit, generated, share))
    return tuple(buckets)


def workload_buckets(workload: WorkloadProfile) -> tuple[RequestBucket, ...]:
    """A workload's buckets: its input and output percentiles; without input percentiles, the
    context percentiles less the output (or the planned context alone); without output
    percentiles, the workload's output length."""
    generated = workload.output_percentiles or ((1.0, workload.generated_tokens),)
    typical_out = max(tokens for _q, tokens in generated)
    prompts = workload.input_percentiles or tuple(
        (q, max(1, tokens - typical_out))
        for q, tokens in (workload.context_percentiles or ((1.0, workload.context_tokens),))
    )
    return request_buckets(prompts, generated, workload.model_len)


def binding_of(option: PlacementOption) -> str:
    """memory | latency | throughput: what set the option's batch (see the module docstring)."""
    if option.binding in ("tpot", "ttft"):
        return "latency"
    if option.max_num_seqs is not None and option.b_max >= option.max_num_seqs:
        return "throughput"
    return "memory"


def replica_requests_per_second(option: PlacementOption, output_tokens: int) -> float:
    """Requests/s one replica of `option` serves at its planned batch: a sequence holds its slot from
    arrival to its last token, TTFT + output x TPOT (Little's law), so B / that. 0 without a speed."""
    if option.tpot_ms is None or option.ttft_ms is None:
        return 0.0
    seconds = option.ttft_ms / 1e3 + output_tokens * option.tpot_ms / 1e3
    return option.planned_per_replica / seconds


def bucket_demand(
    model: ModelSpec,
    workload: WorkloadProfile,
    buckets: Sequence[RequestBucket],
    gpus: Sequence[GpuSku],
    *,
    model_id: str,
    request_rate_per_s: float,
    checkpoint_bytes: int | None = None,
    correction_for: CorrectionFor | None = None,
) -> BucketDemand:
    """Every layout's requests/s per replica per bucket, from `place` at each bucket's lengths."""
    per_layout: dict[str, dict[str, tuple[PlacementOption, float]]] = {}
    first: dict[str, PlacementOption] = {}
    for bucket in buckets:
        sized = replace(workload, context_tokens=bucket.context_tokens, output_tokens=bucket.output_tokens)
        result = place(
            model, sized, gpus, model_id=model_id, checkpoint_bytes=checkpoint_bytes, correction_for=correction_for
        )
        for option in result.options:
            if option.tpot_ms is None or option.ttft_ms is None:
                continue  # no bandwidth / FLOPS in the catalog: no request rate
            key = f"{option.gpu} tp={option.tp} pp={option.pp} {option.weight_dtype}/{option.kv_dtype}"
            rate = replica_requests_per_second(option, bucket.output_tokens)
            per_layout.setdefault(key, {})[bucket.label] = (option, rate)
            first.setdefault(key, option)
    candidates = []
    for key in sorted(per_layout):
        entries = per_layout[key]
        o = first[key]
        candidates.append(
            Candidate(
                key=key,
                gpu=o.gpu,
                gpus_per_replica=o.gpus_per_replica,
                gpus_per_node=o.gpus_per_node,
                usd_per_gpu_hour=o.usd_per_gpu_hour,
                requests_per_second={b: rate for b, (_o, rate) in entries.items()},
                binding={b: binding_of(opt) for b, (opt, _r) in entries.items()},
                batch={b: opt.planned_per_replica for b, (opt, _r) in entries.items()},
                tpot_ms={b: float(opt.tpot_ms or 0.0) for b, (opt, _r) in entries.items()},
                ttft_ms={b: float(opt.ttft_ms or 0.0) for b, (opt, _r) in entries.items()},
            )
        )
    return BucketDemand(workload.name, model_id, request_rate_per_s, tuple(buckets), tuple(candidates))


def _unservable(demand: BucketDemand) -> str | None:
    for bucket in demand.buckets:
        if not any(bucket.label in c.requests_per_second for c in demand.candidates):
            return f"no layout serves bucket {bucket.label} ({bucket.input_tokens:,} in + {bucket.output_tokens:,} out)"
    return None


def _servable(demands: Sequence[BucketDemand]) -> tuple[list[BucketDemand], list[tuple[str, str, str]]]:
    """The demands each of whose buckets some layout serves, and (workload, model, why) for the others."""
    served: list[BucketDemand] = []
    unserved: list[tuple[str, str, str]] = []
    for demand in demands:
        why = _unservable(demand)
        if why is None:
            served.append(demand)
        else:
            unserved.append((demand.workload, demand.model, why))
    return served, unserved


def plan_buckets(demands: Sequence[BucketDemand], solver: SolverOptions = DEFAULT_SOLVER) -> BucketPlan:
    """The cheapest GPUs (and each bucket's split across layouts) that serve every demand's rate
    (`solver.method`: auto, highs or cheapest-per-request)."""
    method, whole_nodes, limits = solver.method, solver.whole_nodes, solver.limits()
    served, unserved = _servable(demands)
    if method not in ("auto", "highs", "cheapest-per-request"):
        raise ValueError(f"unknown method {method!r}")
    use_highs = method == "highs" or (method == "auto" and solver_available())
    if method == "highs" and not solver_available():
        raise RuntimeError("method 'highs' needs the solver extra: pip install -e '.[solver]' in the capplan checkout")
    notes: list[str] = []
    if not served:
        return BucketPlan("none", True, whole_nodes, (), {}, {}, {}, tuple(unserved))
    if use_highs:
        solved = _solve_highs(served, whole_nodes, limits, solver.time_limit_s)
        if solved is None:
            for d in served:
                unserved.append((d.workload, d.model, "no plan serves every bucket within the per-GPU limits"))
            return BucketPlan("highs", True, whole_nodes, (), {}, {}, {}, tuple(unserved))
        shares, _none, optimal = solved
        label = "highs"
        if not optimal:
            notes.append("HiGHS stopped before proving optimality (time limit): best plan found")
    else:
        shares, optimal, label = _cheapest_per_request(served), False, "cheapest-per-request"
        notes.append("highspy not installed: each bucket on its cheapest layout per request, not proven optimal")
    return _plan(served, shares, whole_nodes, limits, label, optimal, unserved, notes)


Share = dict[tuple[int, str, str], float]  # (demand index, bucket label, candidate key) -> share


def _cheapest_per_request(demands: Sequence[BucketDemand]) -> Share:
    shares: Share = {}
    for i, d in enumerate(demands):
        for b in d.buckets:
            able = [c for c in d.candidates if b.label in c.requests_per_second]
            best = min(able, key=lambda c: (c.usd_per_replica_hour / c.requests_per_second[b.label], c.key))
            shares[(i, b.label, best.key)] = 1.0
    return shares


def _plan(
    demands: Sequence[BucketDemand],
    shares: Share,
    whole_nodes: bool,
    limits: Mapping[str, int],
    method: str,
    optimal: bool,
    unserved: list[tuple[str, str, str]],
    notes: list[str],
) -> BucketPlan:
    choices: list[BucketChoice] = []
    load: dict[tuple[int, str], float] = {}
    for (i, label, key), share in sorted(shares.items()):
        if share <= 1e-9:
            continue
        d = demands[i]
        bucket = next(b for b in d.buckets if b.label == label)
        candidate = next(c for c in d.candidates if c.key == key)
        rate = d.bucket_requests_per_second(bucket) * share
        replica_load = rate / candidate.requests_per_second[label]
        choices.append(BucketChoice(d.workload, d.model, bucket, candidate, share, rate, replica_load))
        load[(i, key)] = load.get((i, key), 0.0) + replica_load
    replicas: dict[tuple[str, str, str], int] = {}
    used: dict[str, int] = {}
    per_node: dict[str, int] = {}
    price: dict[str, float] = {}
    for (i, key), work in sorted(load.items()):
        d = demands[i]
        candidate = next(c for c in d.candidates if c.key == key)
        n = math.ceil(work - 1e-9)
        replicas[(d.workload, d.model, key)] = n
        used[candidate.gpu] = used.get(candidate.gpu, 0) + n * candidate.gpus_per_replica
        per_node[candidate.gpu] = candidate.gpus_per_node if whole_nodes else 1
        price[candidate.gpu] = candidate.usd_per_gpu_hour
    bought = {g: math.ceil(n / per_node[g]) * per_node[g] for g, n in sorted(used.items())}
    over = [g for g, n in bought.items() if g in limits and n > limits[g]]
    if over:
        notes.append(f"over the per-GPU limits on {', '.join(over)}: the plan without a solver ignores them")
    return BucketPlan(method, optimal, whole_nodes, tuple(choices), replicas, bought, price, tuple(unserved), tuple(notes))


def _solve_highs(
    demands: Sequence[BucketDemand],
    whole_nodes: bool,
    limits: Mapping[str, int],
    time_limit_s: float,
    fixed: Mapping[Demand, Sequence[PlacementOption]] | None = None,
) -> tuple[Share, dict[Demand, PlacementOption], bool] | None:
    """The MILP of the module docstring; None when it is infeasible (the per-SKU caps). `fixed`:
    concurrency-sized demands that take one of their options whole (binary y, as
    `capacity.placement.plan_procurement`), sharing the SKUs' nodes with the buckets."""
    import highspy
    import numpy as np

    h = new_highs(time_limit_s)
    inf = highspy.kHighsInf
    y_cols: list[tuple[Demand, PlacementOption]] = [(d, o) for d in sorted(fixed or {}) for o in (fixed or {})[d]]
    n_y = len(y_cols)
    x_cols: list[tuple[int, RequestBucket, Candidate]] = [
        (i, b, c) for i, d in enumerate(demands) for b in d.buckets for c in d.candidates if b.label in c.requests_per_second
    ]
    r_cols: list[tuple[int, Candidate]] = [(i, c) for i, d in enumerate(demands) for c in d.candidates]
    skus: dict[str, tuple[int, float]] = {}
    for gpu, per_node, price in [(c.gpu, c.gpus_per_node, c.usd_per_gpu_hour) for _i, c in r_cols] + [
        (o.gpu, o.gpus_per_node, o.usd_per_gpu_hour) for _d, o in y_cols
    ]:
        skus.setdefault(gpu, (per_node if whole_nodes else 1, price))
    sku_ids = sorted(skus)
    n_x, n_r, n_s = len(x_cols), len(r_cols), len(sku_ids)
    n = n_y + n_x + n_r + n_s
    # columns: y (fixed options, binary) | x (bucket shares) | R (replicas) | nodes per SKU
    x0, r0, s0 = n_y, n_y + n_x, n_y + n_x + n_r
    upper = np.concatenate([np.ones(n_y + n_x), np.full(n_r + n_s, inf)])
    for j, gpu in enumerate(sku_ids):
        if gpu in limits:
            upper[s0 + j] = limits[gpu] // skus[gpu][0]
    h.addVars(n, np.zeros(n), upper)
    integer = np.array([*range(n_y), *range(r0, n)], dtype=np.int32)
    h.changeColsIntegrality(len(integer), integer, np.array([highspy.HighsVarType.kInteger] * len(integer)))
    costs = [o.host_usd_per_hour + TIE_BREAK * o.usd_per_hour for _d, o in y_cols] + [0.0] * n_x
    costs += [TIE_BREAK * c.usd_per_replica_hour for _i, c in r_cols] + [skus[g][0] * skus[g][1] for g in sku_ids]
    h.changeColsCost(n, np.arange(n, dtype=np.int32), np.array(costs, dtype=float))
    for demand in sorted(fixed or {}):  # a concurrency-sized demand takes one option
        idx = [k for k, (d, _o) in enumerate(y_cols) if d == demand]
        h.addRow(1.0, 1.0, len(idx), np.array(idx, dtype=np.int32), np.ones(len(idx)))
    for i, d in enumerate(demands):  # every bucket's load is served in full
        for b in d.buckets:
            idx = [x0 + k for k, (ii, bb, _c) in enumerate(x_cols) if ii == i and bb.label == b.label]
            h.addRow(1.0, 1.0, len(idx), np.array(idx, dtype=np.int32), np.ones(len(idx)))
    for r, (i, c) in enumerate(r_cols):  # replica time: sum_b x lambda_b / mu_bc - R_c <= 0
        idx = [k for k, (ii, _b, cc) in enumerate(x_cols) if ii == i and cc.key == c.key]
        values = [demands[i].bucket_requests_per_second(x_cols[k][1]) / c.requests_per_second[x_cols[k][1].label] for k in idx]
        columns = np.array([*(x0 + k for k in idx), r0 + r], dtype=np.int32)
        h.addRow(-inf, 0.0, len(idx) + 1, columns, np.array([*values, -1.0]))
    for j, gpu in enumerate(sku_ids):  # GPUs of the options and replicas on a SKU <= GPUs bought
        ys = [k for k, (_d, o) in enumerate(y_cols) if o.gpu == gpu]
        rs = [r for r, (_i, c) in enumerate(r_cols) if c.gpu == gpu]
        values = [float(y_cols[k][1].gpus_total) for k in ys] + [float(r_cols[r][1].gpus_per_replica) for r in rs]
        columns = np.array([*ys, *(r0 + r for r in rs), s0 + j], dtype=np.int32)
        h.addRow(-inf, 0.0, len(columns), columns, np.array([*values, -float(skus[gpu][0])]))
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None
    values = h.getSolution().col_value
    if not values or len(values) < n:
        return None
    shares: Share = {
        (i, b.label, c.key): float(v) for (i, b, c), v in zip(x_cols, values[x0:r0], strict=True) if v > 1e-9
    }
    chosen = {d: o for (d, o), v in zip(y_cols, values[:n_y], strict=True) if v > 0.5}
    if len(chosen) != len(fixed or {}):
        return None
    return shares, chosen, status == highspy.HighsModelStatus.kOptimal


def plan_fleet(
    results: Sequence[PlacementResult], bucket_demands: Sequence[BucketDemand], solver: SolverOptions = DEFAULT_SOLVER
) -> ProcurementPlan:
    """The fleet's procurement over every workload: concurrency-sized demands take one placement
    each (`results`, as `plan_procurement`), rated ones are split by request size
    (`bucket_demands`), and with HiGHS one MILP buys for both, so they share the SKUs' nodes. A
    workload x model in both is planned by its buckets. Without HiGHS (or with `method`
    enumeration / greedy) the two are planned apart and their GPUs added up: not proven optimal.
    The plan's `buckets` holds the bucket choices (its GPUs: what the bucket replicas use)."""
    rated = {(d.workload, d.model) for d in bucket_demands}
    fixed_results = [r for r in results if (r.workload.name, r.model) not in rated]
    if not bucket_demands:
        return plan_procurement(fixed_results, solver)
    method, whole_nodes, limits = solver.method, solver.whole_nodes, solver.limits()
    if method in ("enumeration", "greedy") or (method == "auto" and not solver_available()):
        plan = plan_procurement(fixed_results, solver)
        buckets = plan_buckets(bucket_demands, SolverOptions(whole_nodes=False, method="cheapest-per-request"))
        note = "request-size buckets planned apart from the other workloads (no solver): not proven optimal"
        return replace(
            plan,
            method=f"{plan.method}+cheapest-per-request",
            optimal=False,
            purchases=_fleet_purchases(plan.assignments, buckets, whole_nodes),
            unserved=(*plan.unserved, *buckets.unserved),
            notes=(*plan.notes, *buckets.notes, note),
            buckets=buckets,
        )
    if method == "highs" and not solver_available():
        raise RuntimeError("method 'highs' needs the solver extra: pip install -e '.[solver]' in the capplan checkout")
    options: dict[Demand, list[PlacementOption]] = {}
    unserved: list[tuple[str, str, str]] = []
    for result in fixed_results:
        kept = procurement_options(result)
        if kept:
            options[(result.workload.name, result.model)] = kept
        else:
            unserved.append((result.workload.name, result.model, result.reason()))
    served, bucket_unserved = _servable(bucket_demands)
    solved = _solve_highs(served, whole_nodes, limits, solver.time_limit_s, fixed=options)
    if solved is None:
        why = "no plan serves every workload within the per-GPU limits"
        every = [*unserved, *bucket_unserved, *((*d, why) for d in options), *((d.workload, d.model, why) for d in served)]
        empty = BucketPlan("highs", True, whole_nodes, (), {}, {}, {}, tuple(bucket_unserved))
        return ProcurementPlan("highs", True, whole_nodes, {}, (), tuple(every), (), buckets=empty)
    shares, choice, optimal = solved
    notes = [] if optimal else ["HiGHS stopped before proving optimality (time limit): best plan found"]
    buckets = _plan(served, shares, False, limits, "highs", optimal, bucket_unserved, list(notes))
    return ProcurementPlan(
        "highs",
        optimal,
        whole_nodes,
        dict(sorted(choice.items())),
        _fleet_purchases(choice, buckets, whole_nodes),
        (*unserved, *bucket_unserved),
        tuple(notes),
        buckets=buckets,
    )


def _fleet_purchases(
    choice: Mapping[Demand, PlacementOption], buckets: BucketPlan, whole_nodes: bool
) -> tuple[SkuPurchase, ...]:
    """GPUs per SKU for the chosen placements and the bucket replicas together."""
    used: dict[str, list[tuple[int, int, float, str]]] = {}  # gpu -> (gpus, per node, price, workload:model)
    for (workload, model), option in choice.items():
        used.setdefault(option.gpu, []).append(
            (option.gpus_total, option.gpus_per_node, option.usd_per_gpu_hour, f"{workload}:{model}")
        )
    for (workload, model, key), replicas in buckets.replicas.items():
        candidate = next(c.candidate for c in buckets.choices if c.candidate.key == key and c.workload == workload)
        used.setdefault(candidate.gpu, []).append(
            (
                replicas * candidate.gpus_per_replica,
                candidate.gpus_per_node,
                candidate.usd_per_gpu_hour,
                f"{workload}:{model}",
            )
        )
    purchases = []
    for gpu in sorted(used):
        members = used[gpu]
        gpus = sum(m[0] for m in members)
        per_node = members[0][1] if whole_nodes else 1
        nodes = math.ceil(gpus / per_node)
        purchases.append(
            SkuPurchase(
                gpu=gpu,
                gpus_used=gpus,
                gpus_bought=nodes * per_node,
                nodes=nodes if whole_nodes else None,
                usd_per_gpu_hour=members[0][2],
                workloads=tuple(sorted({m[3] for m in members})),
            )
        )
    return tuple(purchases)
