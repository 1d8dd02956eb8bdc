"""Several models on one GPU: a split of one GPU's memory between engines started one after another.

Each member is sized by the estimate itself (`capacity.estimate.estimate`), never by a second formula:
its smallest KV budget that holds its concurrency at its context (the pool's own B_max), with the memory
of the engines started before it as other processes (each engine and release counts them its way:
`other_process_charge`, and vLLM's start check `start_memory_problem`). The knob that realizes the
budget is the engine's (`capacity.features.kv_budget.budget_knob`): vLLM's --kv-cache-memory-bytes with
a --gpu-memory-utilization that passes its start check, or a fraction found by bisection in thousandths.
What a member holds on the GPU (`footprint_bytes`) is what the next one sees as used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from capacity.dtypes import format_gib
from capacity.engines.kinds import Engine
from capacity.engines.protocol import DefaultsRequest
from capacity.engines.registry import engine_profile
from capacity.estimate import Estimate, estimate
from capacity.features.kv_budget import BudgetKnob, budget_knob
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec, SpecError

_THOUSANDTHS = 1000  # fractions are searched and written in thousandths (0.437)
# engines whose activations and CUDA graphs live outside the fraction they are given: SGLang's
# mem_fraction_static holds weights and the KV pool only (`arg_groups/memory_hook.py`: the default
# fraction is (gpu - reserved) / gpu with the activation and graph reserves), so the reserve its own
# default leaves free is part of what it holds on a shared GPU
_RESERVE_OUTSIDE_FRACTION = frozenset({Engine.SGLANG})


@dataclass(frozen=True, slots=True)
class PackMember:
    """One model to serve on the shared GPU: `concurrency` sequences of `context_tokens` at once."""

    name: str
    model: ModelSpec
    deployment: DeploymentSpec  # engine, release, dtypes; TP = PP = 1
    context_tokens: int
    concurrency: int
    checkpoint_bytes: int | None = None
    max_model_len: int | None = None  # the engine's --max-model-len (default: the context)


@dataclass(frozen=True, slots=True)
class PackedMember:
    """A member as packed: its start position, the budget and the flags that realize it, what it holds."""

    member: PackMember
    start_order: int  # 1 starts first
    knob: BudgetKnob
    kv_budget_bytes: int
    gpu_memory_utilization: float  # the fraction written on its command line (vLLM: passes the start check)
    others_at_start_bytes: int  # what the members started before it hold
    footprint_bytes: int  # weights + overhead + KV budget (+ SGLang's reserve outside its fraction)
    estimate: Estimate  # the member's estimate with this budget and these others

    @property
    def kv_cache_memory_bytes(self) -> int | None:
        """The byte budget its command line carries (vLLM from 0.33), else None (a fraction only)."""
        return self.kv_budget_bytes if self.knob is BudgetKnob.BYTES else None


@dataclass(frozen=True, slots=True)
class Packing:
    """Members on one GPU in start order; `fits` with the first reason it does not."""

    gpu: GpuSku
    members: tuple[PackedMember, ...]
    fits: bool
    reason: str

    @property
    def used_bytes(self) -> int:
        return sum(m.footprint_bytes for m in self.members)


def pack(members: Sequence[PackMember], gpu: GpuSku) -> Packing:
    """Members on one `gpu`, started in the order given; each sized with the earlier ones as other processes.
    Raises SpecError for a member the estimate cannot plan at all."""
    total = gpu.memory_total_bytes
    packed: list[PackedMember] = []
    for order, member in enumerate(members, start=1):
        others = sum(p.footprint_bytes for p in packed)
        placed = _packed_member(member, gpu, order, others)
        if isinstance(placed, str):
            return Packing(gpu, tuple(packed), False, f"{member.name}: {placed}")
        packed.append(placed)
    used = sum(p.footprint_bytes for p in packed)
    if used > total:
        return Packing(gpu, tuple(packed), False, f"{format_gib(used)} held, {format_gib(total)} on {gpu.id}")
    return Packing(gpu, tuple(packed), True, f"{len(packed)} models in {format_gib(used)} of {format_gib(total)}")


def footprint_alone(member: PackMember, gpu: GpuSku) -> int | None:
    """What the member holds on `gpu` started first (None: it does not fit alone). The members of a pack hold
    about as much each as alone (a byte budget does not move; a fraction is found for the same KV), so the sum
    is a quick bound before `pack` sizes a group."""
    placed = _packed_member(member, gpu, 1, 0)
    return None if isinstance(placed, str) else placed.footprint_bytes


def _sized(member: PackMember, gpu: GpuSku, **deployment: object) -> Estimate:
    length = member.max_model_len or member.context_tokens
    d = replace(member.deployment, tp=1, pp=1, max_model_len=length, **deployment)  # type: ignore[arg-type]
    return estimate(
        member.model,
        d,
        gpu=gpu,
        model_name=member.name,
        checkpoint_bytes=member.checkpoint_bytes,
        context_tokens=member.context_tokens,
        concurrency=member.concurrency,
    )


def _holds(est: Estimate, member: PackMember) -> bool:
    """The pool holds the member's sequences (B_max at its context) and one request of its max_model_len (the
    engine's start check on the pool). A refusal for want of free memory (vLLM's `request_memory`) is no pool
    question: it is judged once the budget is found (`est.fits`)."""
    holds = est.kv_budget_bytes_per_gpu > 0 and est.b_max_at(member.context_tokens) >= member.concurrency
    return holds and (est.starts or est.start_memory_refused)


def _smallest(lo: int, hi: int, enough: Callable[[int], bool]) -> int | None:
    """The smallest n in (lo, hi] with enough(n) (monotone), None where hi is not enough."""
    if not enough(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def _packed_member(member: PackMember, gpu: GpuSku, order: int, others: int) -> PackedMember | str:
    """The member's smallest budget with `others` bytes held before it starts, or why it does not fit."""
    total = gpu.memory_total_bytes
    profile = engine_profile(member.deployment.engine, member.deployment.engine_version)
    knob = budget_knob(profile.engine, profile.version)
    if knob is BudgetKnob.BYTES:
        unit = _sized(member, gpu, kv_cache_memory_bytes=total).pool.unit_bytes or 1
        units = _smallest(
            0, total // unit, lambda n: _holds(_sized(member, gpu, kv_cache_memory_bytes=n * unit), member)
        )
        if units is None:
            return f"{member.concurrency} x {member.context_tokens:,} tokens do not fit even a whole {gpu.id}"
        budget = units * unit
        base = _sized(member, gpu, kv_cache_memory_bytes=budget)
        held = base.weights_bytes_per_gpu + base.overhead_bytes_per_gpu + budget
        fraction = min(math.ceil(held * _THOUSANDTHS / total) / _THOUSANDTHS, 1.0)
        est = _sized(
            member, gpu, kv_cache_memory_bytes=budget, gpu_memory_utilization=fraction, other_process_bytes=others
        )
    else:
        found = _smallest(
            0,
            _THOUSANDTHS,
            lambda n: _holds(
                _sized(member, gpu, gpu_memory_utilization=n / _THOUSANDTHS, other_process_bytes=others), member
            ),
        )
        if found is None:
            return f"{member.concurrency} x {member.context_tokens:,} tokens do not fit in what is left on {gpu.id}"
        fraction = found / _THOUSANDTHS
        est = _sized(member, gpu, gpu_memory_utilization=fraction, other_process_bytes=others)
        held = est.weights_bytes_per_gpu + est.overhead_bytes_per_gpu + est.kv_budget_bytes_per_gpu
        held += _reserve_outside_fraction(member, gpu)
    if not est.fits:
        return est.reason
    return PackedMember(member, order, knob, est.kv_budget_bytes_per_gpu, fraction, others, held, est)


def _reserve_outside_fraction(member: PackMember, gpu: GpuSku) -> int:
    """SGLang's activations and graphs: the reserve its default fraction leaves free on this GPU
    (total x (1 - default mem_fraction_static)); none for engines whose budget already counts them."""
    d = member.deployment
    profile = engine_profile(d.engine, d.engine_version)
    if profile.engine not in _RESERVE_OUTSIDE_FRACTION:
        return 0
    length, kv_dtype = member.max_model_len or member.context_tokens, d.kv_dtype.lower()
    request = DefaultsRequest(member.model, gpu, gpu.memory_total_bytes, length, 1, 1, kv_dtype)
    default = profile.defaults(request).gpu_memory_utilization
    return max(0, math.ceil(gpu.memory_total_bytes * (1 - default)))


def check_members(members: Sequence[PackMember]) -> None:
    """A one-line SpecError for members that cannot be packed at all (nothing to pack, a bad count)."""
    if len(members) < 2:
        raise SpecError("packing needs at least two models")
    for m in members:
        if m.concurrency < 1 or m.context_tokens < 1:
            raise SpecError(
                f"{m.name}: concurrency and context must be positive, got {m.concurrency} x {m.context_tokens}"
            )
