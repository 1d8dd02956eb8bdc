"""KV tiers in the fleet plan (issue 23 item 7): with host RAM or local NVMe priced (`procurement.host_memory`,
`procurement.local_nvme`), a workload that states a prefix hit rate gets these kinds of placement option, and the procurement MILP picks among them
as it picks GPUs (`capacity.placement.plan_procurement`, `capacity.procurement.plan_fleet`):

* GPU: the prefixes its hit rate reuses stay in the GPU pools, so a replica holds the running sequences *and*
  those prefixes: replicas = max(ceil(C / B), ceil((C + ceil(K / T)) / floor(B_max x headroom))), with C the
  target concurrency, B the planned batch per replica, T the sequence's tokens and K the cached tokens below;
* HOST: fewer GPUs plus offload: the replicas of the running set alone (the option as `place` sizes it) and
  K x (KV bytes per token) of host RAM at the stated $/GiB-hour; a hit's private part is loaded over the
  host link (`capacity.features.offload.hit_load_seconds`) before the first token, so TTFT + load must meet
  the TTFT target, and loading must be faster than recomputing (the same layout without hits);
* DISK: the same with local NVMe priced (`procurement.local_nvme`), a hit read from the node's drives at
  their `read_gbps` (or over the host link, whichever is slower);
* NONE: recompute: the workload placed without its hit rate (every prompt prefilled, only the shared prefix
  held once), which may need more replicas or miss the TTFT target.

K, the reused prefixes kept: the prefixes the next requests will hit must be resident when they arrive; over
one request's lifetime C requests arrive (Little's law), each hitting floor(h x P) tokens of its P-token
prompt, of which the shared prefix S is held once already: K = C x max(0, floor(h x P) - S). Where they share
more than that, K is an upper bound (the GPU option is then priced high, the host option too).

Every tiered option carries its `HostTier` (what it holds where, the medium bought, its price source and why);
the plan pays the medium beside the GPUs. Without a price the options are `place`'s, unchanged (the hit rate
moves the prefill only). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace

from capacity.dtypes import GIB, element_bytes
from capacity.features.offload import hit_load_seconds
from capacity.features.offload_sizing import gpu_host_link_gbps
from capacity.kv_bytes import kv_bytes_per_token, kv_bytes_per_token_per_gpu
from capacity.offload_procurement import CachePlacement, HostMemoryPrice, HostTier
from capacity.placement import PlacementOption, PlacementResult
from capacity.planning_types import WorkloadProfile
from capacity.spec import GpuSku, ModelSpec

Media = Mapping[CachePlacement, HostMemoryPrice]  # the offload media procurement prices (HOST, DISK)


def media(
    host_memory: HostMemoryPrice | None, local_nvme: HostMemoryPrice | None
) -> dict[CachePlacement, HostMemoryPrice]:
    """The media with a price: host RAM (`procurement.host_memory`) and local NVMe (`procurement.local_nvme`)."""
    priced = {CachePlacement.HOST: host_memory, CachePlacement.DISK: local_nvme}
    return {placement: price for placement, price in priced.items() if price is not None}


def tiered(workload: WorkloadProfile, prices: Media) -> bool:
    """Whether the workload's options are tiered: a medium is priced and it states a hit rate the cache serves."""
    prefix = workload.prefix_caching
    return bool(prices) and bool(prefix.hit_rate) and prefix.enabled is not False


def without_hits(workload: WorkloadProfile) -> WorkloadProfile:
    """The workload recomputing what it would hit (the shared prefix still held once)."""
    return replace(workload, prefix_caching=replace(workload.prefix_caching, hit_rate=None))


def private_hit_tokens(workload: WorkloadProfile) -> int:
    """Prompt tokens a request hits beyond the shared prefix: floor(h x P) - S, at least 0."""
    prompt = workload.context_tokens - workload.generated_tokens
    hit = math.floor((workload.prefix_caching.hit_rate or 0.0) * prompt)
    return max(0, hit - workload.prefix_caching.shared_prefix_tokens)


def cached_prefix_tokens(workload: WorkloadProfile) -> int:
    """K: the reused prefixes kept for the hit rate, fleet-wide (C x the private hit; see the module docstring)."""
    return workload.target_concurrency * private_hit_tokens(workload)


def tiered_result(
    placer: Callable[[WorkloadProfile], PlacementResult],
    workload: WorkloadProfile,
    model: ModelSpec,
    gpus: Mapping[str, GpuSku],
    prices: Media,
) -> PlacementResult:
    """GPU, offloaded (a HOST or DISK option per priced medium) and NONE options (the module docstring) in one
    ranked result; `placer` is `place` for the model, called at the workload and at `without_hits(workload)`."""
    with_hits, recompute = placer(workload), placer(without_hits(workload))
    w = with_hits.workload
    cached = cached_prefix_tokens(w)
    recompute_ttft = {_layout(o): o.ttft_ms for o in recompute.options}
    options: list[PlacementOption] = []
    for o in with_hits.options:
        options.append(_gpu_tier(o, w, cached))
        for placement, price in prices.items():
            offloaded = _offloaded(o, w, model, gpus[o.gpu], cached, (placement, price), recompute_ttft.get(_layout(o)))
            if offloaded is not None:
                options.append(offloaded)
    for o in recompute.options:
        why = "no prefix cache beyond the shared prefix: every prompt prefilled"
        options.append(replace(o, host_tier=HostTier(CachePlacement.NONE, 0, 0.0, 0.0, 0.0, "", why)))
    options.sort(key=PlacementOption.sort_key)
    ranked = tuple(replace(o, rank=i + 1) for i, o in enumerate(options))
    return PlacementResult(w, with_hits.model, ranked, with_hits.rejected)


def _layout(o: PlacementOption) -> tuple[object, ...]:
    return (o.gpu, o.tp, o.pp, o.dp, o.ep, o.weight_dtype, o.kv_dtype)


def _gpu_tier(o: PlacementOption, w: WorkloadProfile, cached: int) -> PlacementOption:
    """The replicas that hold the running sequences and the cached prefixes in their GPU pools."""
    by_memory = math.floor(o.b_max * w.headroom)
    prefix_sequences = math.ceil(cached / w.context_tokens)
    replicas = max(o.replicas, math.ceil((w.target_concurrency + prefix_sequences) / max(by_memory, 1)))
    why = f"{cached:,} reused prefix tokens in the GPU pools ({prefix_sequences:,} sequences' worth)"
    return replace(o, replicas=replicas, host_tier=HostTier(CachePlacement.GPU, cached, 0.0, 0.0, 0.0, "", why))


def load_ms(
    tokens: int, model: ModelSpec, kv_cache_dtype: str, tp: int, pp: int, gpu: GpuSku, price: HostMemoryPrice
) -> float:
    """A hit's load before its first token: each GPU's share over its host link at once, and for NVMe the whole
    hit read from the node's drives (`read_gbps`), whichever takes longer."""
    kv_element = element_bytes(kv_cache_dtype)
    per_gpu = kv_bytes_per_token_per_gpu(model, kv_element, tp, pp)
    link_s = hit_load_seconds(tokens, per_gpu, gpu_host_link_gbps(gpu))
    read_s = (
        0.0 if price.read_gbps is None else tokens * kv_bytes_per_token(model, kv_element) / (price.read_gbps * 1e9)
    )
    return max(link_s, read_s) * 1e3


def _offloaded(
    o: PlacementOption,
    w: WorkloadProfile,
    model: ModelSpec,
    gpu: GpuSku,
    cached: int,
    priced: tuple[CachePlacement, HostMemoryPrice],
    recompute_ttft_ms: float | None,
) -> PlacementOption | None:
    """The option as placed plus the medium for the cached prefixes; None where a hit loads too slowly (the
    TTFT target, or slower than recomputing it), or the catalog has no speed to tell."""
    placement, price = priced
    if o.ttft_ms is None:
        return None
    gib = cached * kv_bytes_per_token(model, element_bytes(o.kv_cache_dtype)) / GIB
    load = load_ms(private_hit_tokens(w), model, o.kv_cache_dtype, o.tp, o.pp, gpu, price)
    ttft_ms = o.ttft_ms + load
    if w.ttft_ms_target is not None and ttft_ms > w.ttft_ms_target:
        return None
    if recompute_ttft_ms is not None and ttft_ms >= recompute_ttft_ms:
        return None
    usd = gib * price.usd_per_gib_hour
    why = (
        f"{cached:,} reused prefix tokens in {gib:,.1f} GiB of {placement.medium} at ${price.usd_per_gib_hour:g}/GiB-h "
        f"({price.source}); a hit loads in {load:,.1f} ms, TTFT {ttft_ms:,.1f} ms"
    )
    return replace(o, ttft_ms=ttft_ms, host_tier=HostTier(placement, cached, gib, usd, load, price.source, why))
