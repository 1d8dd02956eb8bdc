"""`capplan place`: the cheapest layouts that serve one model at a load within latency targets.

Two stages, so an answer takes a second or two:

1. **Screen** (steady state): `capacity.placement.place` sizes every layout (GPU SKU x TP x PP x the
   dtypes the policy allows) for requests of I + O tokens: the batch B per replica is the largest that
   fits memory (at the headroom) and meets the steady-state TPOT / TTFT targets
   (`capacity.performance.largest_batch_meeting`). At a request rate R a replica serves
   `B / (TTFT + O x TPOT)` requests/s (`capacity.procurement.replica_requests_per_second`), so a layout
   needs `ceil(R / that)` replicas; at a concurrency C, `ceil(C / B)`.
2. **Check** (simulation, only with a request rate): best first by $/hour, each candidate's replica
   is simulated (`capacity.serving.simulate`, the engine's scheduler, Poisson arrivals at R / replicas,
   `max_num_seqs` = B) and its TTFT / TPOT at the asked percentile compared with the targets; one that
   misses gets another replica and goes back in the queue at its new price. The first `top` that pass
   are the answer, cheapest first: a layout is only ever passed over for one that costs no more.

Each option carries `plan`: what a deploy step needs to start the engine with the planned budget.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from capacity.estimate import Estimate, estimate
from capacity.explain import derivation
from capacity.performance import efficiency_for, perf_inputs
from capacity.placement import Layout, PlacementOption, place
from capacity.planning_types import DTYPE_POLICIES, WorkloadProfile
from capacity.procurement import binding_of, replica_requests_per_second
from capacity.serving import Distribution, Lengths, Load, ServingResult, simulate
from capacity.spec import GpuSku, ModelSpec, SpecError

DEFAULT_TOP = 5
NO_PRICE = "no price in the catalog"
SIMULATED_REQUESTS = 400  # per simulated replica: enough for a stable p99 (4 requests above it)
MAX_SIMULATIONS = 60  # the check stops here; the answer then says so
MAX_EXTRA_REPLICAS_FACTOR = 4  # a layout that needs 4x the screen's replicas to meet a percentile is dropped


class Percentile(StrEnum):
    """Which point of a simulated latency distribution the targets bound."""

    P50 = "p50"
    P99 = "p99"
    MEAN = "mean"

    def of(self, distribution: Distribution) -> float:
        if self is Percentile.P50:
            return distribution.median_ms
        if self is Percentile.P99:
            return distribution.p99_ms
        return distribution.mean_ms


@dataclass(frozen=True, slots=True)
class PlaceQuery:
    """What `capplan place` was asked: requests of `input_tokens` + `output_tokens` at a load (a rate,
    a concurrency, or one replica when neither), within latency targets, on these GPUs."""

    input_tokens: int
    output_tokens: int
    request_rate_per_s: float | None = None
    concurrency: int | None = None
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    percentile: Percentile = Percentile.P99
    max_model_len: int | None = None
    dtype_policy: str = "fp8"
    engine: str = "vllm"
    engine_version: str | None = None
    gpus: tuple[str, ...] = ()  # catalog ids (empty: every GPU with a price)
    top: int = DEFAULT_TOP
    workload: str = "ad-hoc"

    def profile(self, model_id: str) -> WorkloadProfile:
        """The steady-state screen's workload profile; SpecError for a query that cannot be planned."""
        if self.dtype_policy not in DTYPE_POLICIES:
            raise SpecError(f"unknown dtype policy {self.dtype_policy!r}; expected one of {', '.join(DTYPE_POLICIES)}")
        if self.input_tokens < 1 or self.output_tokens < 1:
            raise SpecError("--input-len and --output-len must be positive")
        if self.top < 1:
            raise SpecError(f"--top must be >= 1, got {self.top}")
        context = self.input_tokens + self.output_tokens
        profile = WorkloadProfile(
            name=self.workload,
            models=(model_id,),
            target_concurrency=self.concurrency or 1,
            context_tokens=context,
            max_model_len=self.max_model_len,
            dtype_policy=DTYPE_POLICIES[self.dtype_policy],
            engine=self.engine,
            engine_version=self.engine_version,
            gpus=self.gpus,
            tpot_ms_target=self.tpot_ms,
            ttft_ms_target=self.ttft_ms,
            output_tokens=self.output_tokens,
            request_rate_per_s=self.request_rate_per_s,
        )
        profile.validate()
        return profile

    def contract(self) -> dict[str, object]:
        return {
            "input_len": self.input_tokens,
            "output_len": self.output_tokens,
            "request_rate": self.request_rate_per_s,
            "concurrency": self.concurrency,
            "tpot_ms": self.tpot_ms,
            "ttft_ms": self.ttft_ms,
            "percentile": self.percentile.value,
            "max_model_len": self.max_model_len or self.input_tokens + self.output_tokens,
            "dtype_policy": self.dtype_policy,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "gpus": list(self.gpus),
        }


@dataclass(frozen=True, slots=True)
class ServedModel:
    """The model a query places: its spec, registry id and checkpoint size (None: from the config)."""

    spec: ModelSpec
    model_id: str
    checkpoint_bytes: int | None = None
    hf_repo: str | None = None


@dataclass(frozen=True, slots=True)
class ServingOption:
    """One answer: a screened layout, the replicas it takes, and the simulated check where there was one."""

    option: PlacementOption
    replicas: int
    screened_replicas: int
    gpu: GpuSku
    est: Estimate
    sim: ServingResult | None = None
    replicas_binding: str = "concurrency"  # request_rate | concurrency | simulated <percentile> <target>

    @property
    def usd_per_hour(self) -> float:
        return self.replicas * self.option.usd_per_replica_hour

    def sort_key(self) -> tuple[object, ...]:
        return (round(self.usd_per_hour, 9), self.replicas * self.option.gpus_per_replica, *self.option.sort_key())

    def usd_per_million_output_tokens(self, query: PlaceQuery) -> float | None:
        """At a request rate: the fleet's $/hour over the output tokens asked for; else at the planned batch."""
        if query.request_rate_per_s is not None:
            return self.usd_per_hour / (query.request_rate_per_s * query.output_tokens * 3600) * 1e6
        return self.option.usd_per_million_output_tokens

    def plan(self, model: ServedModel) -> dict[str, object]:
        """Everything a deploy step needs to start this layout with the planned budget."""
        o, est = self.option, self.est
        quant = model.spec.quantization
        return {
            "model": model.model_id,
            "hf_repo": model.hf_repo,
            "engine": est.engine,
            "engine_version": est.engine_version,
            "gpu": o.gpu,
            "gpu_name": self.gpu.name,
            "gpus_per_node": o.gpus_per_node,
            "tp": o.tp,
            "pp": o.pp,
            "gpus_per_replica": o.gpus_per_replica,
            "replicas": self.replicas,
            "weight_dtype": o.weight_dtype,
            "weight_format": o.weight_format,
            "quantization": quant.method
            if quant is not None
            else (o.weight_dtype if o.weight_dtype != "auto" else None),
            "kv_cache_dtype": o.kv_dtype,
            "kv_cache_format": o.kv_cache_dtype,
            "max_model_len": est.max_model_len,
            "max_num_seqs": o.planned_per_replica,
            "max_num_batched_tokens": est.pool.max_num_batched_tokens,
            "block_size": est.block_size,
            "gpu_memory_utilization": est.gpu_memory_utilization,
            "kv_cache_memory_bytes": est.kv_budget_bytes_per_gpu,
        }

    def contract(self, model: ServedModel, query: PlaceQuery, rank: int) -> dict[str, object]:
        o = self.option
        rate = query.request_rate_per_s
        return {
            "rank": rank,
            "gpu": o.gpu,
            "tp": o.tp,
            "pp": o.pp,
            "weight_dtype": o.weight_dtype,
            "kv_cache_dtype": o.kv_dtype,
            "replicas": self.replicas,
            "gpus_total": self.replicas * o.gpus_per_replica,
            "usd_per_gpu_hour": o.usd_per_gpu_hour,
            "usd_per_hour": round(self.usd_per_hour, 4),
            "usd_per_million_output_tokens": _rounded(self.usd_per_million_output_tokens(query)),
            "batch_per_replica": o.planned_per_replica,
            "b_max": o.b_max,
            "binding": _batch_binding(o),
            "replicas_binding": self.replicas_binding,
            "requests_per_second_per_replica": _rounded(replica_requests_per_second(o, query.output_tokens)),
            "steady_state": {"tpot_ms": _rounded(o.tpot_ms), "ttft_ms": _rounded(o.ttft_ms)},
            "simulated": None if self.sim is None else _simulated(self.sim, rate / self.replicas if rate else None),
            "plan": self.plan(model),
        }


def _batch_binding(option: PlacementOption) -> str:
    """What sets B per replica: memory | tpot | ttft | max_num_seqs."""
    if option.binding != "memory":
        return option.binding
    return "max_num_seqs" if binding_of(option) == "throughput" else "memory"


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _simulated(sim: ServingResult, rate_per_replica: float | None) -> dict[str, object]:
    return {
        "request_rate_per_replica": _rounded(rate_per_replica),
        "requests": sim.num_requests,
        "ttft": sim.ttft.contract(),
        "tpot": sim.tpot.contract(),
        "queued": sim.queued,
        "peak_running": sim.peak_running,
    }


@dataclass(frozen=True, slots=True)
class PlaceAnswer:
    """The cheapest options that pass, and why every other GPU could not serve the query."""

    model: ServedModel
    query: PlaceQuery
    options: tuple[ServingOption, ...]
    infeasible: tuple[tuple[str, str], ...]  # (gpu, why)
    simulations: int
    notes: tuple[str, ...] = ()

    def contract(self, *, explain: bool = False) -> dict[str, object]:
        out: dict[str, object] = {
            "model": self.model.model_id,
            "source": "computed",
            "query": self.query.contract(),
            "options": [o.contract(self.model, self.query, i + 1) for i, o in enumerate(self.options)],
            "infeasible": [{"gpu": gpu, "reason": why} for gpu, why in self.infeasible],
            "simulations": self.simulations,
            "notes": list(self.notes),
        }
        if explain:
            out["derivation"] = self.derivation()
        return out

    def derivation(self) -> list[str]:
        """How the cheapest option was reached: its memory derivation, then its screen and check."""
        if not self.options:
            return []
        best = self.options[0]
        o, q = best.option, self.query
        lines = derivation(best.est, self.model.spec)
        lines.append("")
        lines.append(
            f"Screen: B per replica {o.planned_per_replica:,} (B_max {o.b_max:,}, binding {_batch_binding(o)}); "
            f"steady state TPOT {o.tpot_ms or 0:,.2f} ms, TTFT {o.ttft_ms or 0:,.1f} ms"
        )
        if q.request_rate_per_s is not None:
            per = replica_requests_per_second(o, q.output_tokens)
            lines.append(
                f"   a replica serves B / (TTFT + O x TPOT) = {o.planned_per_replica:,} / "
                f"({(o.ttft_ms or 0) / 1e3:.3f} s + {q.output_tokens:,} x {(o.tpot_ms or 0) / 1e3:.4f} s) = "
                f"{per:,.3f} req/s; {q.request_rate_per_s:g} req/s -> {best.screened_replicas:,} replica(s)"
            )
        if best.sim is not None:
            lines.append(
                f"Check: {best.replicas:,} replica(s) ({best.replicas_binding}); simulated at "
                f"{(q.request_rate_per_s or 0) / best.replicas:,.3f} req/s each:"
            )
            lines += best.sim.lines()[1:]
        lines.append(
            f"Cost: {best.replicas:,} x {o.gpus_per_replica} x {o.gpu} at ${o.usd_per_gpu_hour:,.2f}/GPU-hour = "
            f"${best.usd_per_hour:,.2f}/hour"
        )
        return lines


def _estimate_for(model: ServedModel, option: PlacementOption, gpu: GpuSku, profile: WorkloadProfile) -> Estimate:
    """The option's deployment, its batch limit set to the planned B (what the plan starts the engine with)."""
    layout = Layout(gpu, option.tp, option.pp, option.weight_dtype, option.kv_dtype)
    deployment = layout.deployment(profile, max_model_len=option.max_model_len, max_num_seqs=option.planned_per_replica)
    return estimate(
        model.spec,
        deployment,
        gpu=gpu,
        model_name=model.model_id,
        checkpoint_bytes=model.checkpoint_bytes,
        context_tokens=option.context_tokens,
    )


def _screened_replicas(option: PlacementOption, query: PlaceQuery) -> tuple[int, str] | str:
    """Replicas the steady state asks for, and what sets them; or why a rate cannot be sized."""
    by_concurrency = option.replicas if query.concurrency is not None else 1
    if query.request_rate_per_s is None:
        return by_concurrency, "concurrency"
    per_replica = replica_requests_per_second(option, query.output_tokens)
    if per_replica <= 0:
        return f"{option.gpu} has no bandwidth / TFLOPS in the catalog: a request rate cannot be sized"
    by_rate = max(1, math.ceil(query.request_rate_per_s / per_replica - 1e-9))
    return (by_rate, "request_rate") if by_rate >= by_concurrency else (by_concurrency, "concurrency")


def _missed(sim: ServingResult, query: PlaceQuery) -> tuple[str, str] | None:
    """The first target the simulated percentile misses, as (`p99 ttft`, `p99 ttft 612.3 ms > 500 ms`)."""
    p = query.percentile
    for name, target, distribution in (("ttft", query.ttft_ms, sim.ttft), ("tpot", query.tpot_ms, sim.tpot)):
        if target is not None and p.of(distribution) > target:
            return f"{p.value} {name}", f"{p.value} {name} {p.of(distribution):,.1f} ms > {target:g} ms"
    return None


def _simulate(model: ServedModel, option: ServingOption, query: PlaceQuery) -> ServingResult:
    assert query.request_rate_per_s is not None
    est, gpu = option.est, option.gpu
    lengths = Lengths(query.input_tokens, query.output_tokens)
    load = Load.poisson(query.request_rate_per_s / option.replicas, SIMULATED_REQUESTS, lengths)
    return simulate(
        est, perf_inputs(model.spec, est, gpu, option.option.weight_dtype), load, efficiency_for(est.engine, gpu)
    )


def place_model(model: ServedModel, query: PlaceQuery, gpus: Sequence[GpuSku]) -> PlaceAnswer:
    """The `query.top` cheapest options that pass the screen (and, at a rate, the simulated check)."""
    profile = query.profile(model.model_id)
    screened = place(model.spec, profile, gpus, model_id=model.model_id, checkpoint_bytes=model.checkpoint_bytes)
    by_id = {g.id: g for g in gpus}
    rejected: dict[str, list[str]] = {}
    for label, why in screened.rejected:
        rejected.setdefault(label.split(" ")[0], []).append(why)
    queue: list[tuple[tuple[object, ...], int, ServingOption]] = []
    for i, option in enumerate(screened.options):
        replicas = _screened_replicas(option, query)
        if isinstance(replicas, str):
            rejected.setdefault(option.gpu, []).append(replicas)
            continue
        gpu = by_id[option.gpu]
        try:
            est = _estimate_for(model, option, gpu, profile)
        except SpecError as exc:
            rejected.setdefault(option.gpu, []).append(str(exc))
            continue
        served = ServingOption(option, replicas[0], replicas[0], gpu, est, replicas_binding=replicas[1])
        heapq.heappush(queue, (served.sort_key(), i, served))
    check = query.request_rate_per_s is not None and (query.tpot_ms is not None or query.ttft_ms is not None)
    simulate_all = query.request_rate_per_s is not None
    answers: list[ServingOption] = []
    simulations = 0
    notes: list[str] = []
    while queue and len(answers) < query.top:
        _key, i, served = heapq.heappop(queue)
        if not simulate_all:
            answers.append(served)
            continue
        if simulations >= MAX_SIMULATIONS:
            notes.append(f"the simulated check stopped after {MAX_SIMULATIONS} simulations; fewer options than asked")
            break
        try:
            sim = _simulate(model, served, query)
        except SpecError as exc:
            rejected.setdefault(served.option.gpu, []).append(str(exc))
            continue
        simulations += 1
        missed = _missed(sim, query) if check else None
        if missed is None:
            answers.append(replace(served, sim=sim))
            continue
        if served.replicas >= MAX_EXTRA_REPLICAS_FACTOR * served.screened_replicas:
            rejected.setdefault(served.option.gpu, []).append(f"simulated {missed[1]} at {served.replicas} replicas")
            continue
        more = replace(served, replicas=served.replicas + 1, replicas_binding=f"simulated {missed[0]}")
        heapq.heappush(queue, (more.sort_key(), i, more))
    placed = {a.option.gpu for a in answers} | {s.option.gpu for _k, _i, s in queue}
    infeasible = sorted(
        ((gpu.id, _most_common(rejected.get(gpu.id)) or NO_PRICE) for gpu in gpus if gpu.id not in placed),
        key=lambda pair: (pair[1] == NO_PRICE, pair[0]),
    )
    if profile.gpus:
        infeasible = [pair for pair in infeasible if pair[0] in profile.gpus]
    if not screened.options:
        notes.append(screened.reason())
    return PlaceAnswer(model, query, tuple(answers), tuple(infeasible), simulations, tuple(notes))


def _most_common(reasons: list[str] | None) -> str | None:
    if not reasons:
        return None
    counts: dict[str, int] = {}
    for why in reasons:
        counts[why] = counts.get(why, 0) + 1
    return max(counts.items(), key=lambda item: (item[1], item[0]))[0]
