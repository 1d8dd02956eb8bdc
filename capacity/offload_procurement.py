"""Procurement with KV tiers (issue 23 item 7): host RAM per node as a purchasable resource, so a plan can buy
fewer GPUs plus offload where the workload's hit rate and TTFT SLO allow it.

The question, per deployment shape: where do the reused prefixes the hit rate needs live? Three answers:

* GPU only: the fleet's GPU pools hold the running sequences and the cached prefixes (more GPUs);
* host tier: the GPU pools hold the running sequences, host RAM the cached prefixes; a hit is loaded over the
  host link (`capacity.features.offload.hit_load_seconds`), the rest of the prompt prefilled;
* recompute: no cache; every prompt is prefilled whole.

An option counts only where its TTFT (load + prefill of the misses) is within the SLO, and a host tier only
where loading a hit is faster than recomputing it. The cheapest option that meets the SLO is chosen; $ per
million tokens is its hourly price over the tokens it serves an hour. Memory decides the replica count here
(the sequences' and the prefixes' tokens over the pool); the performance model gives the prefill time
(`recompute_seconds`), the catalog the host link. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

from capacity.dtypes import GIB
from capacity.estimate import Estimate
from capacity.features.offload import hit_load_seconds
from capacity.features.offload_sizing import gpu_host_link_gbps
from capacity.performance import perf_inputs, prefill_seconds
from capacity.spec import GpuSku, ModelSpec, SpecError


class CachePlacement(Enum):
    """Where an option keeps the reused prefixes."""

    GPU = "gpu"  # more GPUs: the prefixes in the GPU pools
    HOST = "host"  # fewer GPUs plus host RAM
    DISK = "disk"  # fewer GPUs plus local NVMe (LMCache's local disk tier), read through the host
    NONE = "none"  # no cache: every prompt recomputed

    @property
    def offloaded(self) -> bool:
        """Whether the prefixes live off the GPU, in a medium the plan buys."""
        return self in (CachePlacement.HOST, CachePlacement.DISK)

    @property
    def medium(self) -> str:
        """What holds the prefixes, in words."""
        return {CachePlacement.HOST: "host RAM", CachePlacement.DISK: "local NVMe"}.get(self, "GPU memory")


@dataclass(frozen=True, slots=True)
class HostMemoryPrice:
    """What one GiB of a host-side KV medium costs an hour (host RAM; or local NVMe, with its read bandwidth),
    and where that figure comes from (a procurement setting)."""

    usd_per_gib_hour: float
    source: str
    read_gbps: float | None = None  # GB/s the medium reads at, where slower than the host link (NVMe)

    def __post_init__(self) -> None:
        if not (self.usd_per_gib_hour >= 0 and math.isfinite(self.usd_per_gib_hour)) or not self.source.strip():
            raise SpecError("a host memory price needs a finite $/GiB-hour >= 0 and its source")
        if self.read_gbps is not None and not (self.read_gbps > 0 and math.isfinite(self.read_gbps)):
            raise SpecError(f"a read bandwidth must be a positive number of GB/s, got {self.read_gbps}")


@dataclass(frozen=True, slots=True)
class HostTier:
    """Where a fleet placement keeps the reused prefixes its hit rate needs, and what that buys
    (`capacity.tiered_placement`): the host RAM bought for them, its price and source, and why."""

    placement: CachePlacement
    cached_tokens: int  # reused prefix tokens kept for the hit rate (fleet-wide)
    host_gib: float  # host RAM or NVMe bought for them (0 unless offloaded)
    usd_per_hour: float  # its price an hour
    load_ms: float  # loading one request's hit over the host link (0 unless HOST)
    price_source: str
    reason: str


@dataclass(frozen=True, slots=True)
class CachedWorkload:
    """A workload whose prompts reuse prefixes: the demand, the hit rate it states and its TTFT SLO."""

    requests_per_second: float
    concurrency: int  # sequences in flight (Little's law over the request's duration)
    prompt_tokens: int
    output_tokens: int
    hit_rate: float  # share of each prompt's tokens found in the cache
    cached_tokens: int  # the reused prefixes the hit rate needs kept (tokens, fleet-wide)
    ttft_slo_ms: float

    def __post_init__(self) -> None:
        if not 0 <= self.hit_rate <= 1:
            raise SpecError(f"hit rate must be in [0, 1], got {self.hit_rate}")
        if min(self.requests_per_second, self.concurrency, self.prompt_tokens, self.ttft_slo_ms) <= 0:
            raise SpecError("requests per second, concurrency, prompt tokens and the TTFT SLO must be positive")

    @property
    def hit_tokens(self) -> int:
        return round(self.prompt_tokens * self.hit_rate)

    @property
    def tokens_per_hour(self) -> float:
        return self.requests_per_second * (self.prompt_tokens + self.output_tokens) * 3600


@dataclass(frozen=True, slots=True)
class ReplicaShape:
    """One replica of a deployment on one GPU type, as the estimate and the performance model size it."""

    gpu: GpuSku
    gpus: int  # tp x pp
    pool_tokens: int  # tokens its GPU pool holds
    kv_bytes_per_token: int  # every GPU's share together (what a token costs in host RAM)
    kv_bytes_per_token_per_gpu: int  # what each GPU loads per token on a hit
    prefill_tokens_per_second: float  # one prompt's prefill rate (the performance model's)

    @property
    def usd_per_hour(self) -> float:
        if self.gpu.price_usd_per_gpu_hour is None:
            raise SpecError(f"GPU {self.gpu.id} has no price: it cannot be bought")
        return self.gpu.price_usd_per_gpu_hour * self.gpus


@dataclass(frozen=True, slots=True)
class TierOption:
    """One way to serve the workload: replicas, host RAM, TTFT, price, and whether it meets the SLO."""

    placement: CachePlacement
    replicas: int
    host_gib: float
    ttft_ms: float
    usd_per_hour: float
    usd_per_million_tokens: float
    meets_slo: bool
    reason: str


def recompute_seconds(model: ModelSpec, est: Estimate, gpu: GpuSku, tokens: int) -> float:
    """The performance model's prefill time for `tokens` on this deployment (what a hit saves)."""
    chunk = est.pool.max_num_batched_tokens or tokens
    return float(prefill_seconds(perf_inputs(model, est, gpu), tokens, chunk))


def replica_shape(model: ModelSpec, est: Estimate, gpu: GpuSku, prompt_tokens: int) -> ReplicaShape:
    """The replica the estimate describes, its prefill rate at `prompt_tokens` from the performance model."""
    seconds = recompute_seconds(model, est, gpu, prompt_tokens)
    return ReplicaShape(
        gpu,
        est.tp * est.pp,
        est.kv_cache_tokens,
        est.kv_bytes_per_token,
        est.kv_bytes_per_token_per_gpu,
        prompt_tokens / seconds,
    )


def tier_options(w: CachedWorkload, shape: ReplicaShape, price: HostMemoryPrice | None) -> tuple[TierOption, ...]:
    """GPU-only, host-tier (where host RAM has a price) and recompute options for one replica shape."""
    running = w.concurrency * (w.prompt_tokens + w.output_tokens)
    miss_s = (w.prompt_tokens - w.hit_tokens) / shape.prefill_tokens_per_second
    whole_s = w.prompt_tokens / shape.prefill_tokens_per_second
    load_s = hit_load_seconds(w.hit_tokens, shape.kv_bytes_per_token_per_gpu, gpu_host_link_gbps(shape.gpu))
    options = [
        _option(w, shape, CachePlacement.GPU, running + w.cached_tokens, 0.0, 0.0, miss_s, "prefixes in the GPU pools"),
        _option(w, shape, CachePlacement.NONE, running, 0.0, 0.0, whole_s, "no cache: every prompt prefilled"),
    ]
    if price is not None:
        host_gib = w.cached_tokens * shape.kv_bytes_per_token / GIB
        faster = load_s < w.hit_tokens / shape.prefill_tokens_per_second
        why = "prefixes in host RAM, loaded on a hit" if faster else "loading a hit is slower than recomputing it"
        host = _option(w, shape, CachePlacement.HOST, running, host_gib, price.usd_per_gib_hour, load_s + miss_s, why)
        options.append(host if faster else _refused(host))
    return tuple(options)


def cheapest(options: tuple[TierOption, ...]) -> TierOption | None:
    """The cheapest option that meets the SLO (None: none does)."""
    meeting = [o for o in options if o.meets_slo]
    return min(meeting, key=lambda o: o.usd_per_hour) if meeting else None


def _option(
    w: CachedWorkload,
    shape: ReplicaShape,
    placement: CachePlacement,
    gpu_tokens: int,
    host_gib: float,
    usd_per_gib_hour: float,
    ttft_s: float,
    why: str,
) -> TierOption:
    replicas = max(1, math.ceil(gpu_tokens / max(shape.pool_tokens, 1)))
    usd = replicas * shape.usd_per_hour + host_gib * usd_per_gib_hour
    ttft_ms = ttft_s * 1e3
    meets = ttft_ms <= w.ttft_slo_ms
    slo = "within" if meets else "OVER"
    return TierOption(
        placement,
        replicas,
        host_gib,
        ttft_ms,
        usd,
        usd / (w.tokens_per_hour / 1e6),
        meets,
        f"{why}; TTFT {ttft_ms:,.1f} ms {slo} the {w.ttft_slo_ms:g} ms SLO",
    )


def _refused(option: TierOption) -> TierOption:
    """A host tier whose hits load slower than they recompute: never chosen (recompute does it faster)."""
    return replace(option, meets_slo=False)
