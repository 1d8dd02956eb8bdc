"""Packed placements: where the fleet plan gives two or more workloads a GPU each, and one GPU holds them all
for less, the pack that replaces them, with each engine's command line in start order.

Read from the plan's assignments (`raw.recommended_placements` rows in the fleet plan, so a published run
and a computed one pack alike): a workload placed on one GPU (one replica at TP = PP = 1) is a candidate;
its packed concurrency is the B_max that plans its target at its headroom, at its own context. A pack is
sized by `capacity.packing.pack` (each member's estimate with an explicit KV budget and the members started
before it as other processes). Latency targets and request rates are not packed: engines sharing a GPU
share its compute, which the performance model does not split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import polars as pl

from capacity.engines.kinds import Engine
from capacity.packing import Packing, PackMember, footprint_alone, pack
from capacity.planning_types import WorkloadProfile
from capacity.spec import DeploymentSpec, GpuSku, SpecError
from models_registry.planning import Catalog
from recommendations.deploy.command import PORT, engine_command
from recommendations.deploy.plan import ServingPlan
from recommendations.workloads import WorkloadsFile

MAX_MEMBERS = 4  # models per shared GPU the search tries
MAX_GROUPS = 1500  # groups sized per round at most: fewer members per GPU are tried where candidates are many

PACKED_SCHEMA: dict[str, Any] = {
    "pack": pl.Int64,
    "gpu": pl.String,
    "start_order": pl.Int64,
    "workload": pl.String,
    "model": pl.String,
    "engine": pl.String,
    "context_tokens": pl.Int64,
    "packed_concurrency": pl.Int64,
    "kv_budget_bytes": pl.Int64,
    "gpu_memory_utilization": pl.Float64,
    "footprint_bytes": pl.Int64,
    "others_at_start_bytes": pl.Int64,
    "usd_per_hour_apart": pl.Float64,
    "pack_usd_per_hour": pl.Float64,
    "command": pl.String,
}


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A fleet-plan assignment on one GPU, as a pack member, with what it costs apart."""

    workload: WorkloadProfile
    row: Mapping[str, Any]
    member: PackMember
    usd_per_hour_apart: float


@dataclass(frozen=True, slots=True)
class PackOffer:
    """One GPU holding several assignments for less than a GPU each."""

    packing: Packing
    candidates: tuple[_Candidate, ...]  # in start order

    @property
    def usd_per_hour(self) -> float:
        return float(self.packing.gpu.price_usd_per_gpu_hour or 0.0)

    @property
    def usd_per_hour_apart(self) -> float:
        return sum(c.usd_per_hour_apart for c in self.candidates)

    def commands(self) -> tuple[str, ...]:
        return engine_commands(self.packing)


def engine_commands(packing: Packing) -> tuple[str, ...]:
    """Each engine's command line in start order, with the budget flags that realize the split (ports
    PORT, PORT + 1, ...: one per engine on the host)."""
    out = []
    for m in packing.members:
        plan = ServingPlan(
            model=m.member.name,
            engine=Engine(m.estimate.engine),
            gpu=packing.gpu.id,
            max_model_len=m.estimate.max_model_len,
            weight_dtype=m.member.deployment.weight_dtype,
            kv_cache_dtype=m.member.deployment.kv_dtype,
            gpu_memory_utilization=m.gpu_memory_utilization,
            kv_cache_memory_bytes=m.kv_cache_memory_bytes,
            engine_version=m.estimate.engine_version,
        )
        out.append(engine_command(plan, port=PORT + m.start_order - 1).text)
    return tuple(out)


def packed_concurrency(workload: WorkloadProfile) -> int:
    """The smallest B_max the placement would plan the workload's target at (floor(B x headroom) >= target)."""
    b = math.ceil(workload.target_concurrency / workload.headroom)
    while math.floor(b * workload.headroom) < workload.target_concurrency:
        b += 1
    return b


def _candidates(placements: pl.DataFrame, workloads: WorkloadsFile, catalog: Catalog) -> list[_Candidate]:
    """The plan's single-GPU assignments of workloads without latency targets or a request rate."""
    profiles = {p.name: p for p in workloads.profiles}
    rows = placements.filter(pl.col("in_fleet_plan") & (pl.col("gpus_total") == 1)).sort("workload", "model")
    out = []
    for row in rows.iter_rows(named=True):
        profile = profiles.get(row["workload"])
        model = catalog.models.get(row["model"])
        if profile is None or model is None or _shares_compute(profile):
            continue
        deployment = DeploymentSpec(
            weight_dtype=row["weight_dtype"],
            kv_dtype=row["kv_dtype"],
            engine=row["engine"],
            engine_version=row["engine_version"],
        )
        member = PackMember(
            row["model"],
            model.spec,
            deployment,
            row["context_tokens"],
            packed_concurrency(profile),
            model.checkpoint_bytes,
            row["max_model_len"],
        )
        out.append(_Candidate(profile, row, member, float(row["usd_per_hour"])))
    return out


def _shares_compute(profile: WorkloadProfile) -> bool:
    """A latency target or a request rate: planned on a GPU's compute, which a pack would share."""
    return any(v is not None for v in (profile.tpot_ms_target, profile.ttft_ms_target, profile.request_rate_per_s))


def _allowed(gpu: GpuSku, group: Sequence[_Candidate]) -> bool:
    return all(not c.workload.gpus or gpu.id in c.workload.gpus for c in group)


class _Alone:
    """Each candidate's footprint alone on each GPU, computed once (`footprint_alone`)."""

    def __init__(self) -> None:
        self._known: dict[tuple[int, str], int | None] = {}

    def fits(self, group: Sequence[_Candidate], gpu: GpuSku) -> bool:
        """Whether the group's footprints alone sum to no more than the GPU (a quick bound before `pack`)."""
        total = 0
        for c in group:
            key = (id(c), gpu.id)
            if key not in self._known:
                try:
                    self._known[key] = footprint_alone(c.member, gpu)
                except SpecError:
                    self._known[key] = None
            held = self._known[key]
            if held is None:
                return False
            total += held
        return total <= gpu.memory_total_bytes


def _best_pack(group: Sequence[_Candidate], gpus: Iterable[GpuSku], alone: _Alone) -> PackOffer | None:
    """The cheapest GPU that holds the group for less than it costs apart (largest member started first)."""
    apart = sum(c.usd_per_hour_apart for c in group)
    ordered = sorted(group, key=lambda c: -c.member.model.total_params)
    best: PackOffer | None = None
    for gpu in sorted(gpus, key=lambda g: (g.price_usd_per_gpu_hour or math.inf, g.id)):
        price = gpu.price_usd_per_gpu_hour
        if price is None or price >= apart or not _allowed(gpu, group) or not alone.fits(group, gpu):
            continue
        try:
            packing = pack([c.member for c in ordered], gpu)
        except SpecError:
            continue
        if packing.fits:
            best = PackOffer(packing, tuple(ordered))
            break
    return best


def pack_offers(placements: pl.DataFrame, workloads: WorkloadsFile, catalog: Catalog) -> list[PackOffer]:
    """Greedy: the pack saving the most $/hour among groups of up to MAX_MEMBERS candidates (fewer where there
    are many: `_group_sizes`), then again among those left, until no group is cheaper together than apart. A
    group is sized only on GPUs cheaper than its members apart whose memory the members' footprints alone fit."""
    left = _candidates(placements, workloads, catalog)
    gpus = [g for g in catalog.gpus.values() if workloads.procurement.buys(g)]
    offers: list[PackOffer] = []
    alone = _Alone()
    best_of: dict[tuple[int, ...], PackOffer | None] = {}  # a group's answer does not change between rounds
    while len(left) >= 2:
        sizes = _group_sizes(len(left))
        for size in sizes:
            for group in combinations(left, size):
                ids = tuple(id(c) for c in group)
                if ids not in best_of:
                    best_of[ids] = _best_pack(group, gpus, alone)
        found = [
            offer
            for size in sizes
            for group in combinations(left, size)
            if (offer := best_of[tuple(id(c) for c in group)]) is not None
        ]
        if not found:
            break
        best = max(found, key=lambda o: (o.usd_per_hour_apart - o.usd_per_hour, len(o.candidates)))
        offers.append(best)
        taken = {id(c) for c in best.candidates}
        left = [c for c in left if id(c) not in taken]
    return offers


def _group_sizes(candidates: int) -> range:
    """Group sizes 2..k, k the largest (up to MAX_MEMBERS) whose groups number at most MAX_GROUPS (pairs always)."""
    largest, groups = 2, math.comb(candidates, 2)
    while largest < min(MAX_MEMBERS, candidates) and groups + math.comb(candidates, largest + 1) <= MAX_GROUPS:
        largest += 1
        groups += math.comb(candidates, largest)
    return range(2, largest + 1)


def packed_frame(offers: Sequence[PackOffer]) -> pl.DataFrame:
    """One row per packed member: its start order, budget flags, what it holds, the command that runs it."""
    rows = []
    for number, offer in enumerate(offers, start=1):
        for c, m, command in zip(offer.candidates, offer.packing.members, offer.commands(), strict=True):
            rows.append(
                {
                    "pack": number,
                    "gpu": offer.packing.gpu.id,
                    "start_order": m.start_order,
                    "workload": c.workload.name,
                    "model": c.member.name,
                    "engine": m.estimate.engine,
                    "context_tokens": c.member.context_tokens,
                    "packed_concurrency": c.member.concurrency,
                    "kv_budget_bytes": m.kv_budget_bytes,
                    "gpu_memory_utilization": m.gpu_memory_utilization,
                    "footprint_bytes": m.footprint_bytes,
                    "others_at_start_bytes": m.others_at_start_bytes,
                    "usd_per_hour_apart": c.usd_per_hour_apart,
                    "pack_usd_per_hour": offer.usd_per_hour,
                    "command": command,
                }
            )
    return pl.DataFrame(rows, schema=PACKED_SCHEMA)


def packed_lines(frame: pl.DataFrame) -> list[str]:
    """`capplan procure`'s text for the packs: the GPU, its saving, each engine in start order."""
    lines: list[str] = []
    for (number,), group in frame.group_by(["pack"], maintain_order=True):
        first = group.row(0, named=True)
        apart = group["usd_per_hour_apart"].sum()
        lines.append(
            f"   pack {number}: 1 x {first['gpu']} at ${first['pack_usd_per_hour']:,.2f}/h instead of "
            f"${apart:,.2f}/h apart, started in this order:"
        )
        for r in group.iter_rows(named=True):
            lines.append(
                f"      {r['start_order']}. {r['workload']} / {r['model']}: B {r['packed_concurrency']} x "
                f"{r['context_tokens']:,} tokens, KV {r['kv_budget_bytes'] / 2**30:.2f} GiB, holds "
                f"{r['footprint_bytes'] / 2**30:.2f} GiB: {r['command']}"
            )
    return lines
