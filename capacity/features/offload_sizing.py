"""The estimate's three questions to the offload rules (`capacity.features.offload`): the weights left on each
GPU, the KV budget after what an offload takes before the pool is sized, and the tiers behind the pool.

Apart from the rules because it reads the estimate's types (weights, pool, GPU), which read `capacity.spec`,
which names the offload specs."""

from __future__ import annotations

from dataclasses import replace

from capacity.dtypes import format_gib
from capacity.features.offload import (
    KVOffload,
    KVTier,
    Medium,
    OffloadSizing,
    WeightOffload,
    hit_load_seconds,
    host_link_gbps,
)
from capacity.parallel import pp_partition
from capacity.pool import KVPool, PoolUnit
from capacity.spec import GpuSku, ModelSpec
from capacity.weights import WeightsEstimate


def decoder_bytes_per_gpu(model: ModelSpec, weights: WeightsEstimate, pp: int) -> int:
    """The weights of the decoder layers on the most loaded GPU (what the offloaders can move): the GPU's
    weights in the proportion of its stage's decoder parameters to all it loads (the first stage also holds
    the embeddings and the extras, the last the head)."""
    counts = pp_partition(len(model.layer_params), pp)
    decoder = sum(p.total for p in model.layer_params[: counts[0]])
    loaded = decoder + model.embedding_params + model.loaded_extra_params
    if pp == 1:
        loaded += model.lm_head_params + model.final_norm_params
    return weights.per_gpu_bytes * decoder // max(loaded, 1)


def weights_after_offload(
    model: ModelSpec, weights: WeightsEstimate, offload: WeightOffload | None, pp: int, notes: list[str]
) -> WeightsEstimate:
    """The weights left on each GPU under `--cpu-offload-gb` (a note says how much moved to host memory)."""
    if offload is None or offload.unmodelled():
        return weights
    moved = offload.offloaded_bytes(decoder_bytes_per_gpu(model, weights, pp))
    if not moved:
        return weights
    notes.append(
        f"--cpu-offload-gb: {format_gib(moved)} of decoder weights per GPU kept in pinned host memory and read "
        "over the host link every step (the GPU holds the rest; whole parameters move, so up to one more)"
    )
    return replace(weights, per_gpu_bytes=weights.per_gpu_bytes - moved)


def sizing(
    offload: KVOffload, per_token_gpu: int, pool: KVPool | None, block_size: int, tp: int, pp: int, is_mla: bool
) -> OffloadSizing:
    """What the rules read; before the pool is built, `pool` is None (no tokens yet)."""
    tokens = 0
    block_bytes = per_token_gpu * block_size
    if pool is not None and pool.capacity_units:
        if pool.unit is PoolUnit.BLOCK:
            tokens, block_bytes = pool.capacity_units * pool.block_size, pool.unit_bytes
        elif pool.unit is PoolUnit.TOKEN:
            tokens = pool.capacity_units
        else:
            tokens = pool.capacity_units // max(per_token_gpu, 1)
        block_size = pool.block_size
    return OffloadSizing(per_token_gpu, tokens, block_bytes, block_size, tp, pp, is_mla)


def budget_after_offload(
    offload: KVOffload | None, budget: int, s: OffloadSizing, headroom: int, notes: list[str]
) -> int:
    """The KV budget less what the offload takes on the GPU before the pool is sized; what it takes after
    comes out of the headroom the memory utilization leaves (noted, and flagged where it does not fit)."""
    if offload is None or offload.unmodelled():
        return budget
    before = offload.pool_gpu_bytes(s)
    after = offload.headroom_gpu_bytes(s)
    if before:
        notes.append(f"{offload.label}: {format_gib(before)} per GPU of staging buffers, taken before the KV pool")
    if after:
        fits = "" if after <= headroom else f", MORE than the {format_gib(headroom)} the memory utilization leaves"
        notes.append(
            f"{offload.label}: {format_gib(after)} per GPU of GPU buffers, allocated after the KV pool is sized "
            f"(the pool does not shrink){fits}"
        )
    return budget - before


def kv_tiers(offload: KVOffload | None, s: OffloadSizing, gpu: GpuSku | None) -> tuple[KVTier, ...]:
    """The GPU pool and the tiers behind it (none without an offload), per GPU."""
    if offload is None or offload.unmodelled():
        return ()
    pool = KVTier("GPU pool", Medium.GPU, s.pool_tokens, s.pool_tokens * s.kv_bytes_per_token_per_gpu)
    link = gpu_host_link_gbps(gpu) if gpu is not None else None
    lower = tuple(
        replace(t, load_ms_per_1k_tokens=round(hit_load_seconds(1000, s.kv_bytes_per_token_per_gpu, link) * 1e3, 3))
        if link and t.medium is Medium.HOST_RAM
        else t
        for t in offload.tiers(s)
    )
    return (pool, *lower)


def gpu_host_link_gbps(gpu: GpuSku) -> float:
    """GB/s one direction between this GPU and host memory (`capacity.features.offload.host_link_gbps`)."""
    return host_link_gbps(gpu.name, gpu.interconnect, gpu.interconnect_gbps, gpu.architecture)
