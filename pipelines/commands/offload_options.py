"""`capplan estimate`'s offload options: weights kept in host memory and the KV tiers behind the GPU pool, spelled
as the engines spell them, read into `capacity.features.offload`'s specs (a bad value is a one-line error). The
options are declared with the others in `options.ESTIMATE_OPTIONS`."""

from __future__ import annotations

import json
from typing import Any

from capacity.engines.kinds import Engine
from capacity.features.offload import ExpertOffload, KVOffload, WeightOffload
from capacity.features.offload_sizing import kv_offload_for
from pipelines.commands.common import fail


def offload_specs(engine: str, options: dict[str, Any]) -> tuple[WeightOffload | None, KVOffload | None]:
    """The offload specs the options ask for; a bad value fails with one line (exit 2)."""
    gib = options.get("cpu_offload_gb")
    if gib is not None and not 0 <= gib < 1e9:
        fail(f"--cpu-offload-gb must be a number of GiB >= 0, got {gib:g}")
    connector, extra = _transfer_config(options.get("kv_transfer_config"))
    size = options.get("hicache_size")
    if size is not None and size < 0:
        fail(f"--hicache-size must be >= 0 GB, got {size}")
    chunk = options.get("lmcache_chunk_size")
    if chunk is not None and chunk <= 0:
        fail(f"--lmcache-chunk-size must be a positive number of tokens, got {chunk}")
    if engine.lower() not in {e.value for e in Engine}:
        return (WeightOffload(gib) if gib else None), None  # the estimate names the unknown engine
    if gib and Engine(engine.lower()) is Engine.TRTLLM:
        fail(
            "--cpu-offload-gb is vLLM's and SGLang's: TensorRT-LLM offloads no weights (its host tier is KV: --host-cache-size)"
        )
    try:
        kv = kv_offload_for(
            Engine(engine.lower()),
            connector=connector,
            kv_offloading_size_gib=options.get("kv_offloading_size"),
            kv_offloading_backend=options.get("kv_offloading_backend") or "native",
            extra_config=extra,
            lmcache_cpu_gib=options.get("lmcache_max_local_cpu_size"),
            lmcache_disk_gib=options.get("lmcache_max_local_disk_size"),
            lmcache_chunk_tokens=chunk,
            hierarchical_cache=bool(options.get("enable_hierarchical_cache")),
            hicache_ratio=options.get("hicache_ratio"),
            hicache_size_gb=size,
            host_cache_bytes=options.get("host_cache_size"),
        )
    except ValueError as exc:
        fail(str(exc))
    return (WeightOffload(gib) if gib else None), kv


def _transfer_config(text: str | None) -> tuple[str | None, dict[str, object]]:
    """vLLM's --kv-transfer-config: the connector's name and its extra config."""
    if text is None:
        return None, {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError:
        fail('--kv-transfer-config must be a JSON object, e.g. \'{"kv_connector":"LMCacheConnectorV1"}\'')
    if not isinstance(config, dict) or not isinstance(config.get("kv_connector"), str):
        fail("--kv-transfer-config must be a JSON object naming its kv_connector")
    extra = config.get("kv_connector_extra_config") or {}
    if not isinstance(extra, dict):
        fail("--kv-transfer-config: kv_connector_extra_config must be a JSON object")
    return config["kv_connector"], extra


def expert_offload(engine: str, options: dict[str, Any], notes: list[str]) -> ExpertOffload | None:
    """KTransformers' CPU experts (SGLang, on with --kt-weight-path as the engine has it); a bad value fails with
    one line, a count without the weight path is noted (the engine ignores it)."""
    path, count = options.get("kt_weight_path"), options.get("kt_num_gpu_experts")
    if count is not None and count < 0:
        fail(f"--kt-num-gpu-experts must be a number of experts >= 0, got {count}")
    if path is None:
        if count is not None:
            notes.append("--kt-num-gpu-experts without --kt-weight-path: KTransformers is off (SGLang ignores it)")
        return None
    if engine.lower() not in {e.value for e in Engine} or Engine(engine.lower()) is not Engine.SGLANG:
        fail("--kt-weight-path is KTransformers' on SGLang (--engine sglang)")
    return ExpertOffload(count, options.get("kt_method"))
