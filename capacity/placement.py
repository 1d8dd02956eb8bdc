"""Placement: the cheapest way to serve a workload, and the GPUs to buy for a fleet of workloads.

Pure functions over capacity.spec types; every number comes from `capacity.estimate.estimate`.

**One model x one workload profile** (`place`): every candidate layout (GPU SKU, TP x PP, weight
and KV dtype the profile's dtype policy allows and the GPU supports) is sized for the profile's
context T and max_model_len L. A candidate is feasible when the engine starts (one sequence of L
tokens fits) and `planned = floor(B_max(T) x headroom) >= 1`; it then needs
`replicas = ceil(target_concurrency / planned)` replicas of `TP x PP` GPUs each, and costs
`replicas x TP x PP x $/GPU-hour`. Candidates are ranked by $/hour, then fewer GPUs, smaller
replicas, full precision over reduced, more spare capacity, then by name (a total order).
Where a calibration applies (`correction_for`), B_max comes from the calibrated KV pool
(`capacity.calibration`), and the option says so.

**A fleet** (`plan_procurement`): each (workload, model) demand is served by one of its feasible
options; GPUs are bought per SKU, in whole nodes (`gpus_per_node`) by default, optionally capped
per SKU. Minimize $/hour of the GPUs bought. Whole nodes couple the demands (two workloads can
share a node), so this is an integer program: solved with HiGHS (`highspy`, extra `solver`) when
installed, else by exact enumeration when the number of combinations is small, else greedily
(each demand's cheapest option, then single moves while the total falls). The plan names its method
and whether it is proven optimal. Workloads with a request rate join the same MILP split by request
size (`capacity.procurement.plan_fleet`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from capacity.calibration import Correction, calibrated_pool
from capacity.engines.kinds import Engine
from capacity.estimate import Estimate, estimate, pool_starts
from capacity.features.parallel_layout import dp_candidates, rank_layout
from capacity.features.speculative_speed import with_speculation
from capacity.offload_procurement import CachePlacement, HostTier
from capacity.parallel import valid_tp_sizes
from capacity.performance import LatencyTarget, LatencyTargets, Performance, largest_batch_meeting, speed_at
from capacity.planning_types import DEFAULT_SOLVER, BucketPlan, DtypePolicy, SolverOptions, WorkloadProfile
from capacity.pool import b_max
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec, SpecError
from capacity.weights import weight_format


class LayoutSettings(TypedDict):
    """What a layout fixes of a deployment, under the names `DeploymentSpec` and `PlacementOption` share."""

    tp: int
    pp: int
    weight_dtype: str
    kv_dtype: str
    dp: int
    ep: int


@dataclass(frozen=True, slots=True)
class Layout:
    """One way to lay a replica out on a GPU SKU."""

    gpu: GpuSku
    tp: int
    pp: int
    weight_dtype: str
    kv_dtype: str
    dp: int = 1  # attention DP ranks (`capacity.features.parallel_layout`)
    ep: int = 1  # expert-parallel width

    @property
    def label(self) -> str:
        ranks = f" dp={self.dp} ep={self.ep}" if self.dp > 1 or self.ep > 1 else ""
        return f"{self.gpu.id} tp={self.tp} pp={self.pp}{ranks} {self.weight_dtype}/{self.kv_dtype}"

    def settings(self) -> LayoutSettings:
        """Spread into a `DeploymentSpec` or a `PlacementOption`, so the six are named in one place."""
        return LayoutSettings(
            tp=self.tp, pp=self.pp, weight_dtype=self.weight_dtype, kv_dtype=self.kv_dtype, dp=self.dp, ep=self.ep
        )

    def deployment(
        self, workload: WorkloadProfile, *, max_model_len: int | None = None, max_num_seqs: int | None = None
    ) -> DeploymentSpec:
        """This layout serving `workload` (at its max_model_len unless given; the engine's batch limit unless given)."""
        return DeploymentSpec(
            **self.settings(),
            engine=workload.engine,
            engine_version=workload.engine_version,
            gpu_memory_utilization=workload.gpu_memory_utilization,
            max_model_len=max_model_len or workload.model_len,
            overhead_bytes_per_gpu=workload.overhead_bytes_per_gpu,
            max_num_seqs=max_num_seqs,
            prefix_caching=workload.prefix_caching,
            speculative=workload.speculative,
            lora=workload.adapters.lora_spec() if workload.adapters else None,
        )


@dataclass(frozen=True, slots=True)
class PlacementOption:
    """A feasible layout for one model x workload, sized and priced."""

    workload: str
    model: str
    gpu: str
    gpus_per_node: int
    tp: int
    pp: int
    weight_dtype: str  # as given to --dtype
    kv_dtype: str  # as given to --kv-dtype
    weight_format: str  # what it resolves to
    kv_cache_dtype: str
    engine: str
    engine_version: str | None
    context_tokens: int
    max_model_len: int
    b_max: int  # sequences of T tokens per replica (calibrated when `calibrated`)
    b_max_predicted: int  # the same from capplan's uncalibrated prediction
    planned_per_replica: int  # floor(b_max x headroom)
    replicas: int
    usd_per_gpu_hour: float
    calibrated: bool = False
    calibration_scope: str | None = None
    n_observations: int = 0
    rank: int = 0
    binding: str = "memory"  # what sets B per replica: memory | tpot | ttft
    b_latency: int | None = None  # the largest B that meets the latency targets (None: no target)
    tpot_ms: float | None = None  # at the planned B per replica
    ttft_ms: float | None = None
    output_tokens_per_second: float | None = None  # per replica, at the planned B
    max_num_seqs: int | None = None  # the engine's batch limit B_max is capped at
    # DP attention x expert parallel: a replica is the DP group (b_max, planned and tokens/s are the group's); its
    # GPUs are tp x pp x dp_gpus (vLLM's DP ranks add GPUs, SGLang's split --tp)
    dp: int = 1
    ep: int = 1
    dp_gpus: int = 1
    host_tier: HostTier | None = None  # where the hit rate's prefixes live, with host RAM or NVMe priced

    @property
    def host_usd_per_hour(self) -> float:
        """The host RAM or NVMe this option buys an hour (0 without a tier): the plan's cost beside the GPUs."""
        return self.host_tier.usd_per_hour if self.host_tier is not None else 0.0

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp * self.dp_gpus

    @property
    def gpus_total(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def usd_per_hour(self) -> float:
        return self.gpus_total * self.usd_per_gpu_hour

    @property
    def usd_per_replica_hour(self) -> float:
        return self.gpus_per_replica * self.usd_per_gpu_hour

    @property
    def planned_capacity(self) -> int:
        """Concurrent sequences the replicas are planned for (>= the target)."""
        return self.replicas * self.planned_per_replica

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        """$ per million generated tokens at the planned batch (replica $/hour over its tokens/hour)."""
        if not self.output_tokens_per_second:
            return None
        return self.usd_per_replica_hour / (self.output_tokens_per_second * 3600) * 1e6

    def usd_per_sequence_hour(self, target_concurrency: int) -> float:
        """$/hour per concurrent sequence of the workload."""
        return self.usd_per_hour / target_concurrency

    @property
    def reduced_precision(self) -> int:
        """How many of weights and KV are served below the checkpoint's precision (0, 1 or 2)."""
        return int(self.weight_dtype != "auto") + int(self.kv_dtype != "auto")

    def sort_key(self) -> tuple[object, ...]:
        return (
            round(self.usd_per_hour + self.host_usd_per_hour, 9),
            self.gpus_total,
            self.gpus_per_replica,
            self.reduced_precision,
            -self.planned_capacity,
            self.gpu,
            self.tp,
            self.pp,
            self.dp,
            self.ep,
            self.weight_dtype,
            self.kv_dtype,
        )


@dataclass(frozen=True, slots=True)
class PlacementResult:
    """All feasible options for one model x workload, best first, and why the others were not."""

    workload: WorkloadProfile
    model: str
    options: tuple[PlacementOption, ...]
    rejected: tuple[tuple[str, str], ...] = ()  # (layout label, reason)

    @property
    def best(self) -> PlacementOption | None:
        return self.options[0] if self.options else None

    def reason(self) -> str:
        """Why there is no option (the most common rejection), or '' when there is one."""
        if self.options:
            return ""
        if not self.rejected:
            return "no GPU with a price in the catalog is allowed for this workload"
        counts: dict[str, int] = {}
        for _label, why in self.rejected:
            counts[why] = counts.get(why, 0) + 1
        why, n = max(counts.items(), key=lambda item: (item[1], item[0]))
        return f"no feasible placement among {len(self.rejected)} layouts; most common: {why} ({n})"


CorrectionFor = Callable[[GpuSku, str, str | None, str], Correction | None]


def _weight_choices(model: ModelSpec, gpu: GpuSku, policy: DtypePolicy) -> list[str]:
    """The policy's weight dtypes this model and GPU can use, one per distinct served format."""
    choices: list[str] = []
    formats: set[str] = set()
    quantized = model.quantization is not None
    for dtype in policy.weight_dtypes:
        wanted = dtype.lower()
        if wanted != "auto" and quantized:
            continue  # a quantized checkpoint is served as published
        if wanted == "fp8" and not gpu.fp8_support:
            continue
        if wanted == "mxfp4" and (not gpu.fp4_support or not model.num_experts):
            continue
        try:
            name = weight_format(model, wanted).name
        except SpecError:
            continue
        if name in formats:
            continue
        formats.add(name)
        choices.append(wanted)
    return choices


def _kv_choices(gpu: GpuSku, policy: DtypePolicy) -> list[str]:
    return [kv for kv in policy.kv_dtypes if kv == "auto" or not kv.startswith("fp8") or gpu.fp8_support]


def layouts(model: ModelSpec, gpu: GpuSku, workload: WorkloadProfile) -> list[Layout]:
    """Candidate layouts on one SKU. PP > 1 only at the node's largest valid TP (pipeline stages
    span nodes only when a node is not enough)."""
    tps = valid_tp_sizes(model, workload.tp_sizes, gpu)
    if not tps:
        return []
    node_tp = max(tps)
    cap = workload.max_gpus_per_replica
    out: list[Layout] = []
    for tp in tps:
        for pp in workload.pp_sizes:
            if pp < 1 or (pp > 1 and tp != node_tp) or pp > model.num_layers:
                continue
            if cap is not None and tp * pp > cap:
                continue
            for weight in _weight_choices(model, gpu, workload.dtype_policy):
                for kv in _kv_choices(gpu, workload.dtype_policy):
                    out.append(Layout(gpu, tp, pp, weight, kv))
    engine = Engine(workload.engine)
    for c in dp_candidates(engine, model, tps, gpu.gpus_per_node):
        if cap is not None and rank_layout(engine, model, c.tp, c.dp, c.ep).gpus(1) > cap:
            continue
        for weight in _weight_choices(model, gpu, workload.dtype_policy):
            out += [Layout(gpu, c.tp, 1, weight, kv, c.dp, c.ep) for kv in _kv_choices(gpu, workload.dtype_policy)]
    return out


def size_layout(
    model: ModelSpec,
    layout: Layout,
    workload: WorkloadProfile,
    *,
    model_id: str,
    checkpoint_bytes: int | None = None,
    correction: Correction | None = None,
) -> PlacementOption | str:
    """The option for one layout, or the reason it is not feasible."""
    gpu = layout.gpu
    if gpu.price_usd_per_gpu_hour is None:
        return "no price for this GPU"
    deployment = layout.deployment(workload)
    try:
        est = estimate(
            model,
            deployment,
            gpu=gpu,
            model_name=model_id,
            checkpoint_bytes=checkpoint_bytes,
            context_tokens=workload.context_tokens,
        )
    except SpecError as exc:
        return str(exc)
    if workload.model_len > model.context_limit_tokens:
        return f"max_model_len {workload.model_len:,} exceeds the model's context limit {model.context_limit_tokens:,}"
    pool = est.pool
    if correction is not None:
        pool = calibrated_pool(est, correction)
    seqs, limit = est.max_num_seqs, est.max_model_len
    predicted = est.b_max
    if pool.capacity_units <= 0 or est.kv_budget_bytes_per_gpu <= 0:
        return "weights and overhead leave no KV cache"
    if not pool_starts(est, pool):
        return f"one sequence of max_model_len {limit:,} tokens does not fit (the engine would not start)"
    sequences = b_max(pool, workload.context_tokens, seqs, limit, est.prefix_cached_tokens)
    planned = math.floor(sequences * workload.headroom)
    if planned < 1:
        return f"B_max {sequences} at {workload.context_tokens:,} tokens leaves no sequence at {workload.headroom:.0%} headroom"
    speed = _speed_at(model, est, layout, workload, planned)
    if isinstance(speed, str):
        return speed
    binding, b_latency, planned, perf = speed
    ranks = layout.dp  # every DP rank serves its own sequences: the replica's figures are the group's
    return PlacementOption(
        workload=workload.name,
        model=model_id,
        gpu=gpu.id,
        gpus_per_node=gpu.gpus_per_node,
        **layout.settings(),
        weight_format=est.weight_dtype,
        kv_cache_dtype=est.kv_dtype,
        engine=est.engine,
        engine_version=est.engine_version,
        context_tokens=workload.context_tokens,
        max_model_len=limit,
        b_max=sequences * ranks,
        b_max_predicted=predicted * ranks,
        planned_per_replica=planned * ranks,
        replicas=math.ceil(workload.target_concurrency / (planned * ranks)),
        usd_per_gpu_hour=float(gpu.price_usd_per_gpu_hour),
        calibrated=correction is not None,
        calibration_scope=correction.scope.label() if correction is not None else None,
        n_observations=correction.n_observations if correction is not None else 0,
        binding=binding,
        b_latency=b_latency * ranks if b_latency is not None else None,
        tpot_ms=perf.tpot_ms if perf is not None else None,
        ttft_ms=perf.ttft_ms if perf is not None else None,
        output_tokens_per_second=perf.output_tokens_per_second * ranks if perf is not None else None,
        max_num_seqs=seqs,
        dp_gpus=est.layout.gpus(layout.pp) // (layout.tp * layout.pp) if est.layout is not None else 1,
    )


def _speed_at(
    model: ModelSpec, est: Estimate, layout: Layout, workload: WorkloadProfile, planned: int
) -> tuple[str, int | None, int, Performance | None] | str:
    """(binding, latency bound on B, B per replica, speed at that B), or why no B meets the targets.
    Without targets the speed is reported where the catalog has the GPU's bandwidth and FLOPS."""
    gpu = layout.gpu
    known = gpu.memory_bandwidth_gbps is not None and gpu.bf16_dense_tflops is not None
    if not known:
        if workload.has_latency_target:
            return f"{gpu.id} has no bandwidth / TFLOPS in the catalog: latency targets cannot be checked"
        return "memory", None, planned, None
    out = workload.generated_tokens
    speed = speed_at(
        model, est, gpu, input_tokens=workload.context_tokens - out, output_tokens=out, weight_dtype=layout.weight_dtype
    )
    speed = with_speculation(speed, model, est, layout.deployment(workload), workload.acceptance_rate)
    targets = LatencyTargets(workload.tpot_ms_target, workload.ttft_ms_target)
    if not targets.any:
        return "memory", None, planned, speed(planned)
    within = largest_batch_meeting(speed, planned, targets)
    if within.batch == 0:
        missed = within.binding or LatencyTarget.TPOT
        return f"even one sequence misses the {missed.upper()} target of {targets.target_ms(missed):,.1f} ms"
    if within.binding is None:
        return "memory", planned, planned, within.perf
    return within.binding.value, within.batch, within.batch, within.perf


def place(
    model: ModelSpec,
    workload: WorkloadProfile,
    gpus: Sequence[GpuSku],
    *,
    model_id: str,
    checkpoint_bytes: int | None = None,
    correction_for: CorrectionFor | None = None,
) -> PlacementResult:
    """Every feasible placement of `model` for `workload` on `gpus`, ranked (rank 1 = cheapest)."""
    workload.validate()
    allowed = set(workload.gpus)
    options: list[PlacementOption] = []
    rejected: list[tuple[str, str]] = []
    if workload.model_len > model.context_limit_tokens:
        reason = (
            f"max_model_len {workload.model_len:,} exceeds the model's context limit {model.context_limit_tokens:,}"
        )
        return PlacementResult(workload, model_id, (), (("every layout", reason),))
    for gpu in gpus:
        if allowed and gpu.id not in allowed:
            continue
        if gpu.price_usd_per_gpu_hour is None:
            continue
        correction = (
            correction_for(gpu, workload.engine, workload.engine_version, model.family) if correction_for else None
        )
        candidates = layouts(model, gpu, workload)
        if not candidates:
            rejected.append((gpu.id, "no valid tensor-parallel size on this GPU"))
        for layout in candidates:
            sized = size_layout(
                model, layout, workload, model_id=model_id, checkpoint_bytes=checkpoint_bytes, correction=correction
            )
            if isinstance(sized, str):
                rejected.append((layout.label, sized))
            else:
                options.append(sized)
    options.sort(key=PlacementOption.sort_key)
    ranked = tuple(_with_rank(option, i + 1) for i, option in enumerate(options))
    return PlacementResult(workload, model_id, ranked, tuple(rejected))


def _with_rank(option: PlacementOption, rank: int) -> PlacementOption:
    return replace(option, rank=rank)


# --- the fleet ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SkuPurchase:
    gpu: str
    gpus_used: int
    gpus_bought: int
    nodes: int | None  # None when GPUs are bought one by one
    usd_per_gpu_hour: float
    workloads: tuple[str, ...]  # "workload:model" served on this SKU

    @property
    def usd_per_hour(self) -> float:
        return self.gpus_bought * self.usd_per_gpu_hour

    @property
    def spare_gpus(self) -> int:
        return self.gpus_bought - self.gpus_used


@dataclass(frozen=True)
class ProcurementPlan:
    method: str  # highs | enumeration | greedy | none
    optimal: bool  # proven optimal for the model below (HiGHS or enumeration)
    whole_nodes: bool
    assignments: dict[tuple[str, str], PlacementOption]  # (workload, model) -> the option used
    purchases: tuple[SkuPurchase, ...]
    unserved: tuple[tuple[str, str, str], ...] = ()  # (workload, model, reason)
    notes: tuple[str, ...] = field(default_factory=tuple)
    buckets: BucketPlan | None = None  # the request-size bucket part (capacity.procurement.plan_fleet)

    @property
    def host_usd_per_hour(self) -> float:
        """Host RAM and NVMe bought for the chosen placements' KV tiers, an hour."""
        return sum(o.host_usd_per_hour for o in self.assignments.values())

    @property
    def usd_per_hour(self) -> float:
        return sum(p.usd_per_hour for p in self.purchases) + self.host_usd_per_hour

    @property
    def gpus(self) -> int:
        return sum(p.gpus_bought for p in self.purchases)


Demand = tuple[str, str]  # (workload, model)


def procurement_options(result: PlacementResult) -> list[PlacementOption]:
    """Per SKU (and cache tier), the option with the fewest GPUs (cost depends only on SKU, GPU count and the
    host RAM or NVMe a tier buys), best rank first."""
    best: dict[tuple[str, CachePlacement | None], PlacementOption] = {}
    for option in result.options:
        key = (option.gpu, option.host_tier.placement if option.host_tier else None)
        kept = best.get(key)
        if kept is None or (option.gpus_total, option.rank) < (kept.gpus_total, kept.rank):
            best[key] = option
    return sorted(best.values(), key=lambda o: o.rank)


def _bought(used: int, per_node: int, whole_nodes: bool) -> tuple[int, int | None]:
    if not whole_nodes:
        return used, None
    nodes = -(-used // per_node) if used else 0
    return nodes * per_node, nodes


def _cost(choice: Mapping[Demand, PlacementOption], whole_nodes: bool, limits: Mapping[str, int]) -> float | None:
    """$/hour of the GPUs a choice needs; None when a per-SKU cap is exceeded."""
    used: dict[str, tuple[int, int, float]] = {}
    total = sum(option.host_usd_per_hour for option in choice.values())
    for option in choice.values():
        gpus, per_node, _price = used.get(option.gpu, (0, option.gpus_per_node, option.usd_per_gpu_hour))
        used[option.gpu] = (gpus + option.gpus_total, per_node, option.usd_per_gpu_hour)
    for gpu, (gpus, per_node, price) in used.items():
        bought, _nodes = _bought(gpus, per_node, whole_nodes)
        if gpu in limits and bought > limits[gpu]:
            return None
        total += bought * price
    return total


def _tie_break(choice: Mapping[Demand, PlacementOption]) -> tuple[float, int, int]:
    return (
        round(sum(o.usd_per_hour for o in choice.values()), 9),
        sum(o.gpus_total for o in choice.values()),
        sum(o.rank for o in choice.values()),
    )


def _enumerate(
    demands: Sequence[Demand],
    options: Mapping[Demand, list[PlacementOption]],
    whole_nodes: bool,
    limits: Mapping[str, int],
) -> dict[Demand, PlacementOption] | None:
    best: dict[Demand, PlacementOption] | None = None
    best_key: tuple[float, float, int, int] | None = None
    for combo in itertools.product(*(options[d] for d in demands)):
        choice = dict(zip(demands, combo, strict=True))
        cost = _cost(choice, whole_nodes, limits)
        if cost is None:
            continue
        key = (round(cost, 9), *_tie_break(choice))
        if best_key is None or key < best_key:
            best, best_key = choice, key
    return best


def _greedy(
    demands: Sequence[Demand],
    options: Mapping[Demand, list[PlacementOption]],
    whole_nodes: bool,
    limits: Mapping[str, int],
) -> dict[Demand, PlacementOption] | None:
    """Demands with the fewest options first, each to its cheapest option that keeps the caps (moving
    one earlier demand to another option when that makes room); then single moves while the total falls."""
    choice: dict[Demand, PlacementOption] = {}
    for demand in sorted(demands, key=lambda d: (len(options[d]), d)):
        placed = _place_one(choice, demand, options, whole_nodes, limits)
        if placed is None:
            return None
        choice = placed
    current = _cost(choice, whole_nodes, limits)
    assert current is not None
    improved = True
    while improved:
        improved = False
        for demand in demands:
            for option in options[demand]:
                if option is choice[demand]:
                    continue
                trial = {**choice, demand: option}
                cost = _cost(trial, whole_nodes, limits)
                if cost is not None and (cost, *_tie_break(trial)) < (current, *_tie_break(choice)):
                    choice, current, improved = trial, cost, True
    return choice


def _place_one(
    choice: dict[Demand, PlacementOption],
    demand: Demand,
    options: Mapping[Demand, list[PlacementOption]],
    whole_nodes: bool,
    limits: Mapping[str, int],
) -> dict[Demand, PlacementOption] | None:
    for option in options[demand]:
        trial = {**choice, demand: option}
        if _cost(trial, whole_nodes, limits) is not None:
            return trial
    for option in options[demand]:  # repair: move one placed demand elsewhere
        for other in choice:
            for alternative in options[other]:
                trial = {**choice, other: alternative, demand: option}
                if _cost(trial, whole_nodes, limits) is not None:
                    return trial
    return None


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints a banner from C++ on its first construction in a process; keep it off stdout."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1 (embedded interpreters)
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            try:
                yield
            finally:
                sys.stdout.flush()
                os.dup2(saved, 1)
    finally:
        os.close(saved)


def new_highs(time_limit_s: float) -> Any:
    """A silent HiGHS instance that proves optimality (gap 0) within `time_limit_s`."""
    import highspy

    with _quiet_stdout():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 0.0)
    return h


def _solve_highs(
    demands: Sequence[Demand],
    options: Mapping[Demand, list[PlacementOption]],
    whole_nodes: bool,
    limits: Mapping[str, int],
    time_limit_s: float,
) -> tuple[dict[Demand, PlacementOption] | None, bool]:
    """min sum_s price_s * bought_s  s.t. each demand takes one option; GPUs used on s <= bought_s;
    bought_s = gpus_per_node * nodes_s (whole nodes) and <= the cap. A tiny second objective
    (1e-6 x the options' own cost) breaks ties toward cheaper, smaller options; an option's host RAM or NVMe
    (a KV tier) is paid in full."""
    import highspy
    import numpy as np

    h = new_highs(time_limit_s)
    inf = highspy.kHighsInf
    columns: list[tuple[Demand, PlacementOption]] = [(d, o) for d in demands for o in options[d]]
    skus: dict[str, tuple[int, float]] = {}
    for _d, o in columns:
        skus.setdefault(o.gpu, (o.gpus_per_node if whole_nodes else 1, o.usd_per_gpu_hour))
    sku_ids = sorted(skus)
    n_x, n_s = len(columns), len(sku_ids)
    lower = np.zeros(n_x + n_s)
    upper = np.concatenate([np.ones(n_x), np.full(n_s, inf)])
    for j, gpu in enumerate(sku_ids):
        if gpu in limits:
            per, _price = skus[gpu]
            upper[n_x + j] = limits[gpu] // per
    h.addVars(n_x + n_s, lower, upper)
    index = np.arange(n_x + n_s, dtype=np.int32)
    h.changeColsIntegrality(n_x + n_s, index, np.array([highspy.HighsVarType.kInteger] * (n_x + n_s)))
    costs = [o.host_usd_per_hour + 1e-6 * o.usd_per_hour for _d, o in columns] + [
        skus[g][0] * skus[g][1] for g in sku_ids
    ]
    h.changeColsCost(n_x + n_s, index, np.array(costs, dtype=float))
    for demand in demands:
        idx = [i for i, (d, _o) in enumerate(columns) if d == demand]
        h.addRow(1.0, 1.0, len(idx), np.array(idx, dtype=np.int32), np.ones(len(idx)))
    for j, gpu in enumerate(sku_ids):
        idx = [i for i, (_d, o) in enumerate(columns) if o.gpu == gpu]
        values = [float(columns[i][1].gpus_total) for i in idx] + [-float(skus[gpu][0])]
        h.addRow(-inf, 0.0, len(idx) + 1, np.array([*idx, n_x + j], dtype=np.int32), np.array(values))
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None, True
    values = h.getSolution().col_value
    if not values or len(values) < n_x:
        return None, False
    choice = {d: o for (d, o), v in zip(columns, values[:n_x], strict=True) if v > 0.5}
    if len(choice) != len(demands):
        return None, False
    return choice, status == highspy.HighsModelStatus.kOptimal


def solver_available() -> bool:
    try:
        import highspy  # noqa: F401
    except ImportError:
        return False
    return True


def plan_procurement(results: Sequence[PlacementResult], solver: SolverOptions = DEFAULT_SOLVER) -> ProcurementPlan:
    """The GPUs to buy to serve every demand with one of its feasible placements, at least cost.

    `solver.method`: auto (HiGHS if installed, else enumeration when small, else greedy), highs,
    enumeration, greedy. Demands without a feasible option are reported in `unserved`.
    """
    method, whole_nodes, limits = solver.method, solver.whole_nodes, solver.limits()
    if method not in ("auto", "highs", "enumeration", "greedy"):
        raise ValueError(f"unknown method {method!r}; expected auto, highs, enumeration or greedy")
    options: dict[Demand, list[PlacementOption]] = {}
    unserved: list[tuple[str, str, str]] = []
    for result in results:
        demand = (result.workload.name, result.model)
        if demand in options:
            raise ValueError(f"demand {demand} given twice")
        kept = procurement_options(result)
        if kept:
            options[demand] = kept
        else:
            unserved.append((*demand, result.reason()))
    demands = sorted(options)
    notes: list[str] = []
    combos = math.prod(len(options[d]) for d in demands) if demands else 1
    if method == "auto":
        if solver_available():
            method = "highs"
        elif combos <= solver.enumeration_limit:
            method = "enumeration"
        else:
            method = "greedy"
            notes.append(f"highspy not installed and {combos:,} combinations: greedy plan, not proven optimal")
    if method == "highs" and not solver_available():
        raise RuntimeError("method 'highs' needs the solver extra: pip install -e '.[solver]' in the capplan checkout")
    if method == "enumeration" and combos > solver.enumeration_limit:
        raise ValueError(f"{combos:,} combinations exceed the enumeration limit {solver.enumeration_limit:,}")
    choice: dict[Demand, PlacementOption] | None
    optimal = False
    if not demands:
        choice, optimal = {}, True
    elif method == "highs":
        choice, optimal = _solve_highs(demands, options, whole_nodes, limits, solver.time_limit_s)
        if not optimal and choice is not None:
            notes.append("HiGHS stopped before proving optimality (time limit): best plan found")
    elif method == "enumeration":
        choice, optimal = _enumerate(demands, options, whole_nodes, limits), True
    else:
        choice = _greedy(demands, options, whole_nodes, limits)
    if choice is None:
        for demand in demands:
            unserved.append((*demand, "no plan serves every workload within the per-GPU limits"))
        return ProcurementPlan(method, optimal, whole_nodes, {}, (), tuple(unserved), tuple(notes))
    return ProcurementPlan(
        method,
        optimal,
        whole_nodes,
        dict(sorted(choice.items())),
        _purchases(choice, whole_nodes),
        tuple(unserved),
        tuple(notes),
    )


def _purchases(choice: Mapping[Demand, PlacementOption], whole_nodes: bool) -> tuple[SkuPurchase, ...]:
    by_sku: dict[str, list[tuple[Demand, PlacementOption]]] = {}
    for demand, option in choice.items():
        by_sku.setdefault(option.gpu, []).append((demand, option))
    purchases = []
    for gpu in sorted(by_sku):
        members = by_sku[gpu]
        first = members[0][1]
        used = sum(o.gpus_total for _d, o in members)
        bought, nodes = _bought(used, first.gpus_per_node, whole_nodes)
        purchases.append(
            SkuPurchase(
                gpu=gpu,
                gpus_used=used,
                gpus_bought=bought,
                nodes=nodes,
                usd_per_gpu_hour=first.usd_per_gpu_hour,
                workloads=tuple(sorted(f"{w}:{m}" for (w, m), _o in members)),
            )
        )
    return tuple(purchases)
