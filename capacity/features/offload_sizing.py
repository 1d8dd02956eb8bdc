"""Which offload a deployment's flags ask for, and the estimate's three questions to the offload rules
(`capacity.features.offload`): the weights left on each GPU, the KV budget after what an offload takes before
the pool is sized, and the tiers behind the pool.

Apart from the rules because it reads the engines' kinds and the estimate's types (weights, pool, GPU), which
read `capacity.spec`, which names the offload specs."""

from __future__ import annotations

import math
from dataclasses import replace
from enum import StrEnum

from capacity.dtypes import GIB, format_gib
from capacity.engines.kinds import Engine
from capacity.features.offload import (
    HICACHE_DEFAULT_RATIO,
    LMCACHE_DEFAULT_CHUNK_TOKENS,
    LMCACHE_DEFAULT_CPU_GIB,
    HiCacheOffload,
    KVOffload,
    KVTier,
    LMCacheOffload,
    Medium,
    OffloadSizing,
    TrtllmHostCache,
    UnsizedConnector,
    VllmNativeOffload,
    WeightOffload,
    hit_load_seconds,
    host_link_gbps,
)
from capacity.parallel import pp_partition
from capacity.pool import KVPool, PoolUnit
from capacity.spec import GpuSku, ModelSpec, SpecError
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


def hybrid_manager_notes(offload: KVOffload, model: ModelSpec) -> list[str]:
    """A connector without HMA support turns vLLM's hybrid KV cache manager off (`VllmConfig`, "Turning off hybrid
    kv cache manager because `--kv-transfer-config` selects a KV connector that does not support it"): a model
    with state layers then fails at startup (SpecError); windowed layers are charged as full attention (noted)."""
    if not offload.disables_hybrid_manager or len(model.kind_counts()) < 2:
        return []
    if model.has_state_layers:
        raise SpecError(
            f"{offload.label} turns vLLM's hybrid KV cache manager off, and a model with SSM/linear-attention state "
            "layers fails at startup without it (use vLLM's --kv-offloading-size: its connector supports it)"
        )
    return [f"{offload.label} turns vLLM's hybrid KV cache manager off: windowed layers are charged as full attention"]


def kv_tiers(offload: KVOffload | None, s: OffloadSizing, gpu: GpuSku | None) -> tuple[KVTier, ...]:
    """The GPU pool and the tiers behind it (none without an offload), per GPU."""
    if offload is None or offload.unmodelled():
        return ()
    pool = KVTier("GPU pool", Medium.GPU, s.pool_tokens, s.pool_tokens * s.kv_bytes_per_token_per_gpu)
    link = gpu_host_link_gbps(gpu) if gpu is not None else None
    lower = [
        replace(t, load_ms_per_1k_tokens=round(hit_load_seconds(1000, s.kv_bytes_per_token_per_gpu, link) * 1e3, 3))
        if link and t.medium is Medium.HOST_RAM
        else t
        for t in offload.tiers(s)
    ]
    staging = offload.pool_gpu_bytes(s) + offload.headroom_gpu_bytes(s)  # held for the first tier behind the pool
    if lower and staging:
        lower[0] = replace(lower[0], gpu_bytes_per_gpu=staging)
    return (pool, *lower)


def gpu_host_link_gbps(gpu: GpuSku) -> float:
    """GB/s one direction between this GPU and host memory (`capacity.features.offload.host_link_gbps`)."""
    return host_link_gbps(gpu.name, gpu.interconnect, gpu.interconnect_gbps, gpu.architecture)


class VllmOffloadingBackend(StrEnum):
    """vLLM's `--kv-offloading-backend` (config/cache.py KVOffloadingBackend)."""

    NATIVE = "native"  # the OffloadingConnector (VllmConfig._post_init_kv_transfer_config)
    LMCACHE = "lmcache"  # LMCacheMPConnector: the LMCache server process holds the memory


# connectors named in --kv-transfer-config that the rules above size, as the backend they are
_CONNECTORS = {"OffloadingConnector": VllmOffloadingBackend.NATIVE, "LMCacheConnectorV1": VllmOffloadingBackend.LMCACHE}


def kv_offload_for(
    engine: Engine,
    *,
    connector: str | None = None,
    kv_offloading_size_gib: float | None = None,
    kv_offloading_backend: str = "native",
    extra_config: dict[str, object] | None = None,
    lmcache_cpu_gib: float | None = None,
    lmcache_disk_gib: float | None = None,
    lmcache_chunk_tokens: int | None = None,
    hierarchical_cache: bool = False,
    hicache_ratio: float | None = None,
    hicache_size_gb: int | None = None,
    host_cache_bytes: int | None = None,
) -> KVOffload | None:
    """The offload a deployment's engine flags ask for (None: none); ValueError with a one-line reason."""
    extra = extra_config or {}
    sizes = {
        "--kv-offloading-size": kv_offloading_size_gib,
        "--hicache-ratio": hicache_ratio,
        "LMCache CPU size": lmcache_cpu_gib,
        "LMCache disk size": lmcache_disk_gib,
    }
    for name, value in sizes.items():
        if value is not None and not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    if hierarchical_cache or hicache_ratio is not None or hicache_size_gb:
        if engine is not Engine.SGLANG:
            raise ValueError(
                "--enable-hierarchical-cache is SGLang's (HiCache); vLLM offloads with --kv-offloading-size"
            )
        return HiCacheOffload(
            ratio=HICACHE_DEFAULT_RATIO if hicache_ratio is None else hicache_ratio,
            size_gb=max(hicache_size_gb or 0, 0),
        )
    if host_cache_bytes:
        if engine is not Engine.TRTLLM:
            raise ValueError("a host cache size is TensorRT-LLM's kv_cache_config.host_cache_size")
        return TrtllmHostCache(host_cache_bytes)
    try:
        backend = VllmOffloadingBackend(kv_offloading_backend)
    except ValueError:
        raise ValueError(f"--kv-offloading-backend must be native or lmcache, got {kv_offloading_backend!r}") from None
    if kv_offloading_size_gib is None and connector is None:
        return None
    if engine is not Engine.VLLM:
        raise ValueError("--kv-offloading-size and --kv-transfer-config are vLLM's")
    if connector is not None and kv_offloading_size_gib is None:
        if connector not in _CONNECTORS:
            return UnsizedConnector(name=connector)
        backend = _CONNECTORS[connector]
    if backend is VllmOffloadingBackend.LMCACHE:
        if connector is None:  # --kv-offloading-backend lmcache: LMCacheMPConnector, memory in the LMCache server
            return UnsizedConnector(name="LMCacheMPConnector (the LMCache server holds its memory)")
        return LMCacheOffload(
            cpu_gib=LMCACHE_DEFAULT_CPU_GIB if lmcache_cpu_gib is None else lmcache_cpu_gib,
            disk_gib=lmcache_disk_gib or 0.0,
            chunk_tokens=lmcache_chunk_tokens or LMCACHE_DEFAULT_CHUNK_TOKENS,
        )
    size = kv_offloading_size_gib
    if size is None:  # an OffloadingConnector named in --kv-transfer-config: its extra config has the bytes
        cpu_bytes = extra.get("cpu_bytes_to_use")
        if not isinstance(cpu_bytes, int | float) or cpu_bytes <= 0:
            raise ValueError("OffloadingConnector needs cpu_bytes_to_use in kv_connector_extra_config")
        size = float(cpu_bytes) / GIB
    blocks_per_chunk, chunk_tokens = extra.get("blocks_per_chunk", 1), extra.get("block_size")
    if "blocks_per_chunk" in extra and chunk_tokens is not None:
        raise ValueError("Specify only one of 'block_size' or 'blocks_per_chunk' in kv_connector_extra_config")
    if not isinstance(blocks_per_chunk, int) or blocks_per_chunk <= 0:
        raise ValueError("'blocks_per_chunk' must be greater than 0.")
    if chunk_tokens is not None and (not isinstance(chunk_tokens, int) or chunk_tokens <= 0):
        raise ValueError("'block_size' in kv_connector_extra_config must be a positive number of tokens")
    return VllmNativeOffload(size, blocks_per_chunk, chunk_tokens)
