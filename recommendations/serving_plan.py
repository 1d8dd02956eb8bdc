"""`capplan place`: the cheapest layouts that serve one model at a load within latency targets.

Two stages, so an answer takes seconds, not minutes:

1. **Screen** (steady state): `capacity.placement.place` sizes every layout (GPU SKU x TP x PP x the
   dtypes the policy allows) for requests of I + O tokens: the batch B per replica is the largest that
   fits memory (at the headroom) and meets the steady-state TPOT / TTFT targets
   (`capacity.performance.largest_batch_meeting`). At a request rate R a replica serves the lesser of
   `B / (TTFT + O x TPOT)` (slots held from arrival to last token) and `1 / (prefill alone + O x TPOT / B)`
   (the replica's time per request), so a layout needs `ceil(R / that)` replicas; at a concurrency C,
   `ceil(C / B)`.
2. **Check** (simulation, only with a request rate), cheapest candidate first: the replica's throughput
   at B is measured (a closed loop of B requests through the engine's scheduler, `capacity.serving`,
   `max_num_seqs` = B) and the replicas raised where it is lower than the screen's; then Poisson arrivals
   at R / replicas, and the TTFT / TPOT at the asked percentile against the targets. A miss adds replicas
   (10 %, or 50 % when the miss is more than 2x) and the candidate goes back in line at its new price; a
   pass is tried with 10 % fewer replicas while those pass too. The first `top` that pass are the answer,
   cheapest first. The screen is an estimate, not a bound: a layout it ranks far down is not simulated.

Each option carries `plan`: what a deploy step needs to start the engine with the planned budget.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from capacity.engines.kinds import Engine
from capacity.estimate import Estimate, estimate
from capacity.explain import derivation
from capacity.features.parallel_layout import spelled_batch_limit
from capacity.performance import efficiency_for, perf_inputs, speed_at
from capacity.placement import Layout, PlacementOption, place
from capacity.planning_types import DTYPE_POLICIES, DtypePolicy, WorkloadProfile
from capacity.procurement import binding_of, replica_requests_per_second
from capacity.serving import Distribution, Lengths, Load, ServingResult, simulate
from capacity.spec import GpuSku, ModelSpec, SpecError
from recommendations.deploy import DeployError, ServingPlan, engine_command

DEFAULT_TOP = 5
NO_PRICE = "no price in the catalog"
ESTIMATED_PRICE = "its price is an estimate, not a list price (--allow-estimated-prices, or --gpu it by name)"
SIMULATED_REQUESTS = 400  # per simulated replica: enough for a stable p99 (4 requests above it)
MAX_SIMULATIONS = 120  # the check stops here (about 10 s on a laptop core); the answer then says so
MAX_EXTRA_REPLICAS_FACTOR = 4  # a layout that needs 4x its throughput's replicas to meet a percentile is dropped
REPLICA_STEP = 0.1  # a miss within 2x of the target adds 10 % more replicas (at least one): near the least price
FAR_REPLICA_STEP = 0.5  # a miss by more than 2x adds half as many again
DOWN_TRIES = 4  # a candidate that passes is tried with fewer replicas this many times at most


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


# the query's fields a WorkloadProfile has under the same name, with the same meaning: passed as they are
_PROFILE_FIELDS = (
    "max_model_len",
    "dtype_policy",
    "engine",
    "engine_version",
    "gpus",
    "output_tokens",
    "request_rate_per_s",
)


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
    dtype_policy: DtypePolicy = DTYPE_POLICIES["fp8"]
    engine: str = "vllm"
    engine_version: str | None = None
    gpus: tuple[str, ...] = ()  # catalog ids (empty: every GPU with a price)
    top: int = DEFAULT_TOP
    workload: str = "ad-hoc"
    max_simulations: int = MAX_SIMULATIONS
    allow_estimated_prices: bool = False  # also GPUs whose price is a guess, not a list or contract price

    def buys(self, gpu: GpuSku) -> bool:
        """A GPU the answer may place on: one asked for by name, or one priced at what someone can pay
        (the default plan's rule, `ProcurementSettings.buys`) unless estimated prices are opted in."""
        return gpu.id in self.gpus or self.allow_estimated_prices or gpu.priced_to_buy

    def profile(self, model_id: str) -> WorkloadProfile:
        """The steady-state screen's workload profile; SpecError for a query that cannot be planned."""
        if self.input_tokens < 1 or self.output_tokens < 1:
            raise SpecError("--input-len and --output-len must be positive")
        if self.top < 1:
            raise SpecError(f"--top must be >= 1, got {self.top}")
        shared = {name: getattr(self, name) for name in _PROFILE_FIELDS}
        profile = WorkloadProfile(
            name=self.workload,
            models=(model_id,),
            target_concurrency=self.concurrency or 1,
            context_tokens=self.input_tokens + self.output_tokens,
            tpot_ms_target=self.tpot_ms,
            ttft_ms_target=self.ttft_ms,
            **shared,
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
            "dtype_policy": self.dtype_policy.name,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "gpus": list(self.gpus),
            "allow_estimated_prices": self.allow_estimated_prices,
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
    screened_rate: float = 0.0  # requests/s a replica serves at steady state (`_replica_rate`; 0: no rate asked)
    sim: ServingResult | None = None
    replicas_binding: str = "concurrency"  # request_rate | concurrency | simulated throughput | simulated p99 ttft
    throughput_checked: bool = False  # the simulated check has measured the replica's throughput at B
    check_base: int = 0  # replicas after that measurement: the check adds at most 3x more
    keeps_up: int = 1  # fewest replicas whose simulated throughput at B carries the rate (fewer: the queue grows)

    @property
    def usd_per_hour(self) -> float:
        return self.replicas * self.option.usd_per_replica_hour

    @property
    def binding(self) -> str:
        """What sets B per replica: memory | tpot | ttft | max_num_seqs."""
        return _batch_binding(self.option)

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
            "dp": o.dp,
            "ep": o.ep,
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
            "max_num_seqs": spelled_batch_limit(Engine(est.engine), o.planned_per_replica // o.dp, o.dp),
            "max_num_batched_tokens": est.pool.max_num_batched_tokens,
            "block_size": est.block_size,
            "gpu_memory_utilization": est.gpu_memory_utilization,
            "kv_cache_memory_bytes": est.kv_budget_bytes_per_gpu,
        }

    def contract(self, model: ServedModel, query: PlaceQuery, rank: int) -> dict[str, object]:
        o = self.option
        plan = self.plan(model)
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
            "price_basis": None if self.gpu.price_basis is None else self.gpu.price_basis.value,
            "usd_per_hour": round(self.usd_per_hour, 4),
            "usd_per_million_output_tokens": _rounded(self.usd_per_million_output_tokens(query)),
            "batch_per_replica": o.planned_per_replica,
            "b_max": o.b_max,
            "binding": self.binding,
            "replicas_binding": self.replicas_binding,
            "requests_per_second_per_replica": _rounded(self.screened_rate) if rate else None,
            "steady_state": {"tpot_ms": _rounded(o.tpot_ms), "ttft_ms": _rounded(o.ttft_ms)},
            "simulated": None if self.sim is None else _simulated(self.sim, rate / self.replicas if rate else None),
            "plan": plan,
            "command": command_line(plan),
        }


def command_line(plan: dict[str, object]) -> dict[str, object]:
    """The engine's server command that realizes `plan` (argv and the shell line), or why none can."""
    try:
        line = engine_command(ServingPlan.from_mapping(plan))
    except DeployError as exc:
        return {"argv": None, "text": None, "reason": str(exc)}
    return {"argv": list(line.argv), "text": line.text, "reason": None}


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
            f"Screen: B per replica {o.planned_per_replica:,} (B_max {o.b_max:,}, binding {best.binding}); "
            f"steady state TPOT {o.tpot_ms or 0:,.2f} ms, TTFT {o.ttft_ms or 0:,.1f} ms"
        )
        if q.request_rate_per_s is not None:
            per = replica_requests_per_second(o, q.output_tokens)
            lines.append(
                f"   a replica serves min(B / (TTFT + O x TPOT), 1 / (prefill alone + O x TPOT / B)) = "
                f"min({o.planned_per_replica:,} / ({(o.ttft_ms or 0) / 1e3:.3f} s + {q.output_tokens:,} x "
                f"{(o.tpot_ms or 0) / 1e3:.4f} s) = {per:,.3f}, ...) = {best.screened_rate:,.3f} req/s; "
                f"{q.request_rate_per_s:g} req/s -> {best.screened_replicas:,} replica(s)"
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
    layout = Layout(gpu, option.tp, option.pp, option.weight_dtype, option.kv_dtype, option.dp, option.ep)
    seqs = spelled_batch_limit(Engine(option.engine), option.planned_per_replica // option.dp, option.dp)
    deployment = layout.deployment(profile, max_model_len=option.max_model_len, max_num_seqs=seqs)
    return estimate(
        model.spec,
        deployment,
        gpu=gpu,
        model_name=model.model_id,
        checkpoint_bytes=model.checkpoint_bytes,
        context_tokens=option.context_tokens,
    )


def _replica_rate(option: PlacementOption, served: ServedModel, est: Estimate, gpu: GpuSku, query: PlaceQuery) -> float:
    """Requests/s a replica serves at B, steady state: the lesser of B / (TTFT + O x TPOT) (a sequence holds
    its slot from arrival to its last token) and 1 / (prefill alone + O x TPOT / B) (the replica's time
    per request: its prompt's prefill steps, which no other sequence shares, and its share of the decode
    steps); a DP group's dp ranks each serve their share of B that way, side by side. 0 where the catalog has no
    bandwidth / FLOPS for the GPU."""
    by_slots = replica_requests_per_second(option, query.output_tokens)
    if by_slots <= 0 or option.tpot_ms is None:
        return 0.0
    speed = speed_at(
        served.spec,
        est,
        gpu,
        input_tokens=query.input_tokens,
        output_tokens=query.output_tokens,
        weight_dtype=option.weight_dtype,
    )
    prefill_s = speed(1).ttft_ms / 1e3
    ranks = option.dp
    per_rank = option.planned_per_replica // ranks
    by_time = ranks / (prefill_s + query.output_tokens * option.tpot_ms / 1e3 / per_rank)
    return min(by_slots, by_time)


def _screened_replicas(option: PlacementOption, query: PlaceQuery, rate_per_replica: float) -> tuple[int, str] | str:
    """Replicas the steady state asks for, and what sets them; or why a rate cannot be sized."""
    by_concurrency = option.replicas if query.concurrency is not None else 1
    if query.request_rate_per_s is None:
        return by_concurrency, "concurrency"
    if rate_per_replica <= 0:
        return f"{option.gpu} has no bandwidth / TFLOPS in the catalog: a request rate cannot be sized"
    by_rate = max(1, math.ceil(query.request_rate_per_s / rate_per_replica - 1e-9))
    return (by_rate, "request_rate") if by_rate >= by_concurrency else (by_concurrency, "concurrency")


def _missed(sim: ServingResult, query: PlaceQuery) -> tuple[str, str, float] | None:
    """The first target the simulated percentile misses: (`p99 ttft`, `p99 ttft 612.3 ms > 500 ms`, 1.22)."""
    p = query.percentile
    for name, target, distribution in (("ttft", query.ttft_ms, sim.ttft), ("tpot", query.tpot_ms, sim.tpot)):
        if target is not None and p.of(distribution) > target:
            seen = p.of(distribution)
            return f"{p.value} {name}", f"{p.value} {name} {seen:,.1f} ms > {target:g} ms", seen / target
    return None


@dataclass
class _Checker:
    """The simulated check of one candidate at a time (`place_model` keeps the queue): first its replica's
    throughput at B (a closed loop of B requests: prefills and decodes sharing steps, which the steady
    state's `B / (TTFT + O x TPOT)` leaves out), then Poisson arrivals at its share of the rate against the
    percentile targets."""

    model: ServedModel
    query: PlaceQuery
    rejected: dict[str, list[str]]
    simulations: int = 0

    def check(self, served: ServingOption) -> tuple[ServingOption | None, bool]:
        """(the candidate, True) when it passes; (the candidate with more replicas, False) to queue again at
        its new price; (None, False) when it cannot pass (the reason kept in `rejected`)."""
        rate = self.query.request_rate_per_s
        assert rate is not None
        try:
            if not served.throughput_checked:
                ranks = served.option.dp  # a DP group: dp engines, each with its own pool and its share of B
                batch = served.option.planned_per_replica // ranks
                closed = Load.closed(batch, max(SIMULATED_REQUESTS, 3 * batch), self._lengths())
                throughput = self._run(served, closed)
                keeps_up = max(1, math.ceil(rate / (ranks * throughput.request_throughput) - 1e-9))
                needed = max(served.replicas, keeps_up)
                base = replace(served, throughput_checked=True, check_base=needed, keeps_up=keeps_up)
                if needed > served.replicas:
                    return replace(base, replicas=needed, replicas_binding="simulated throughput"), False
                served = base
            sim = self._run(served, self._arrivals(served, served.replicas))
        except SpecError as exc:
            self.rejected.setdefault(served.option.gpu, []).append(str(exc))
            return None, False
        missed = _missed(sim, self.query)
        if missed is None:
            return self._fewest(replace(served, sim=sim)), True
        if served.replicas >= MAX_EXTRA_REPLICAS_FACTOR * served.check_base:
            why = f"simulated {missed[1]} at {served.replicas} replicas"
            self.rejected.setdefault(served.option.gpu, []).append(why)
            return None, False
        step = max(1, math.ceil(served.replicas * (REPLICA_STEP if missed[2] <= 2 else FAR_REPLICA_STEP)))
        return replace(served, replicas=served.replicas + step, replicas_binding=f"simulated {missed[0]}"), False

    def _fewest(self, passed: ServingOption) -> ServingOption:
        """`passed` with fewer replicas while those pass too (10 % fewer a try, at most `DOWN_TRIES` tries):
        the steady state's replica count is an estimate, and the simulation may need fewer."""
        rate = self.query.request_rate_per_s
        assert rate is not None
        for _ in range(DOWN_TRIES):
            fewer = passed.replicas - max(1, math.floor(passed.replicas * REPLICA_STEP))
            if fewer < passed.keeps_up:  # below it arrivals outrun completions: no percentile is steady
                break
            try:
                sim = self._run(passed, self._arrivals(passed, fewer))
            except SpecError:
                break
            if _missed(sim, self.query) is not None:
                break
            passed = replace(passed, replicas=fewer, sim=sim, replicas_binding="simulated: fewer pass")
        return passed

    def _lengths(self) -> Lengths:
        return Lengths(self.query.input_tokens, self.query.output_tokens)

    def _arrivals(self, served: ServingOption, replicas: int) -> Load:
        """Poisson arrivals at one engine's share of the rate: the replicas share the stream evenly, and a DP
        group's dp ranks share its replica's (each rank schedules its own requests from its own pool: vLLM's DP
        coordinator and SGLang's DP controller balance them over the ranks), so one rank is simulated at
        rate / (replicas x dp) with its own per-rank estimate and step cost."""
        rate = self.query.request_rate_per_s
        assert rate is not None
        return Load.poisson(rate / (replicas * served.option.dp), SIMULATED_REQUESTS, self._lengths())

    def _run(self, served: ServingOption, load: Load) -> ServingResult:
        self.simulations += 1
        est, gpu = served.est, served.gpu
        inputs = perf_inputs(self.model.spec, est, gpu, served.option.weight_dtype)
        return simulate(est, inputs, load, efficiency_for(est.engine, gpu))


def place_model(model: ServedModel, query: PlaceQuery, gpus: Sequence[GpuSku]) -> PlaceAnswer:
    """The `query.top` cheapest options that pass the screen (and, at a rate, the simulated check)."""
    profile = query.profile(model.model_id)
    estimated = [g for g in gpus if g.price_usd_per_gpu_hour is not None and not query.buys(g)]
    gpus = [g for g in gpus if query.buys(g)]
    screened = place(model.spec, profile, gpus, model_id=model.model_id, checkpoint_bytes=model.checkpoint_bytes)
    by_id = {g.id: g for g in gpus}
    rejected: dict[str, list[str]] = {}
    for label, why in screened.rejected:
        rejected.setdefault(label.split(" ")[0], []).append(why)
    queue: list[tuple[tuple[object, ...], int, ServingOption]] = []
    for i, option in enumerate(screened.options):
        gpu = by_id[option.gpu]
        try:
            est = _estimate_for(model, option, gpu, profile)
            rate = _replica_rate(option, model, est, gpu, query) if query.request_rate_per_s is not None else 0.0
        except SpecError as exc:
            rejected.setdefault(option.gpu, []).append(str(exc))
            continue
        replicas = _screened_replicas(option, query, rate)
        if isinstance(replicas, str):
            rejected.setdefault(option.gpu, []).append(replicas)
            continue
        served = ServingOption(option, replicas[0], replicas[0], gpu, est, rate, replicas_binding=replicas[1])
        heapq.heappush(queue, (served.sort_key(), i, served))
    checker = _Checker(model, query, rejected)
    answers: list[ServingOption] = []
    notes: list[str] = []
    while queue and _worth_a_look(queue[0][2], answers, query.top):
        _key, i, served = heapq.heappop(queue)
        if query.request_rate_per_s is None:
            answers.append(served)
            continue
        if checker.simulations >= query.max_simulations:
            notes.append(
                f"the simulated check stopped after {checker.simulations} simulations (--max-simulations); "
                f"fewer options than asked"
            )
            break
        checked, passed = checker.check(served)
        if checked is not None and passed:
            answers.append(checked)
        elif checked is not None:
            heapq.heappush(queue, (checked.sort_key(), i, checked))
    simulations = checker.simulations
    answers = sorted(answers, key=ServingOption.sort_key)[: query.top]  # a check may have found fewer replicas
    placed = {a.option.gpu for a in answers} | {s.option.gpu for _k, _i, s in queue}
    infeasible = sorted(
        ((gpu.id, _most_common(rejected.get(gpu.id)) or NO_PRICE) for gpu in gpus if gpu.id not in placed),
        key=lambda pair: (pair[1] == NO_PRICE, pair[0]),
    )
    if profile.gpus:
        infeasible = [pair for pair in infeasible if pair[0] in profile.gpus]
    else:
        infeasible += [(g.id, ESTIMATED_PRICE) for g in estimated]
    if not screened.options:
        notes.append(screened.reason())
    return PlaceAnswer(model, query, tuple(answers), tuple(infeasible), simulations, tuple(notes))


def _worth_a_look(candidate: ServingOption, answers: list[ServingOption], top: int) -> bool:
    """Whether to check `candidate`: fewer answers than asked, or it costs no more than the `top`-th found
    (a candidate that passes may pass with fewer replicas, and so come in under an answer found before)."""
    if len(answers) < top:
        return True
    kept = sorted(a.usd_per_hour for a in answers)[top - 1]
    return candidate.usd_per_hour <= kept + 1e-9


def _most_common(reasons: list[str] | None) -> str | None:
    if not reasons:
        return None
    counts: dict[str, int] = {}
    for why in reasons:
        counts[why] = counts.get(why, 0) + 1
    return max(counts.items(), key=lambda item: (item[1], item[0]))[0]
