"""Explicit KV budgets: what each engine's knob for "this much KV, no more" does, so several engines can
share one GPU (issue 23 item 6).

Read in the engines' source:

- vLLM 0.33 `--kv-cache-memory-bytes` (`config/cache.py` CacheConfig.kv_cache_memory_bytes): the budget
  per GPU as given. `v1/worker/gpu_worker.py` determine_available_memory still runs the profiling pass,
  then returns the given bytes without memory profiling (the utilization is not used to size the pool).
  The start check is NOT skipped: `init_device` calls `v1/worker/utils.py` request_memory before any
  of that, and it raises unless free memory at start >= ceil(total x gpu_memory_utilization) (default
  0.92). So a second engine on a GPU needs both flags: the bytes for its pool and a utilization its start
  check passes with the first engine's memory in use. The estimate already holds both (the given budget in
  `estimate._kv_budget`, the check in the profile's `start_memory_problem`); `BudgetKnob.BYTES` says so.
- vLLM `--gpu-memory-utilization` (every release), SGLang `--mem-fraction-static`, TensorRT-LLM
  `free_gpu_memory_fraction`: a fraction; what the memory of an engine started earlier does to it is the
  profile's `other_process_charge` per engine and release (`BudgetKnob.FRACTION`).
- SGLang 0.5.23 `--max-total-tokens` (`mem_cache/kv_cache_configurator.py` config_from_budget,
  _apply_token_constraints): the token pool is min(profiled tokens, the cap), sized again from that count;
  the memory fraction is unchanged, so the cap frees no memory for another engine (`token_capped_pool`).
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum

from capacity.engine_constants import parse_version
from capacity.engines.kinds import Engine
from capacity.engines.sglang import hybrid_swa_pools
from capacity.pool import KVPool, PoolUnit
from capacity.spec import SpecError

# the vLLM release whose source the bytes knob was read in (older releases: the fraction knob)
VLLM_KV_BYTES_READ_IN = "0.33"


class BudgetKnob(Enum):
    """How an engine is told its KV budget when it shares a GPU."""

    BYTES = "--kv-cache-memory-bytes"  # the budget itself (vLLM); a utilization still passes the start check
    FRACTION = "fraction"  # a share of the memory (vLLM utilization, SGLang mem_fraction_static, TRT-LLM)


def budget_knob(engine: Engine, version: str | None) -> BudgetKnob:
    """vLLM releases read from 0.33 take the bytes; every other engine and release a fraction."""
    if engine is Engine.VLLM and (version is None or parse_version(version) >= parse_version(VLLM_KV_BYTES_READ_IN)):
        return BudgetKnob.BYTES
    return BudgetKnob.FRACTION


def token_capped_pool(pool: KVPool, engine: Engine, max_total_tokens: int | None) -> tuple[KVPool, str | None]:
    """SGLang's pool under `--max-total-tokens`, and a note where the cap moves it or is not applied.

    0.5.23 `kv_cache_configurator.config_from_budget`: the profiled pool's tokens, min'd with the cap
    (`_apply_token_constraints`); where that lowers them, the configurator sizes the pool again from the token
    count (`calculate_pool_sizes_from_max_tokens`): the default pool page-aligned down, the hybrid SWA pool
    (`HybridSWAPoolConfigurator._solve_pool_sizes`) the full pool page-aligned and the window pool its ratio,
    as `engines.sglang.hybrid_swa_pools` sizes them from a budget. The Mamba configurator's token path is not
    read: such a pool is sized without the cap, and said so."""
    if max_total_tokens is None:
        return pool, None
    if engine is not Engine.SGLANG:
        raise SpecError(f"--max-total-tokens is SGLang's; {engine.value} is given its budget otherwise")
    if max_total_tokens <= 0:
        raise SpecError(f"--max-total-tokens must be a positive number of tokens, got {max_total_tokens}")
    if pool.unit is not PoolUnit.TOKEN or pool.state_bytes_per_sequence:
        return pool, "--max-total-tokens on a Mamba hybrid's pool: sized without the cap (that path is not read)"
    page = max(pool.block_size, 1)
    hybrid = pool.swa_bytes_per_full_token is not None
    profiled = pool.capacity_units if hybrid else pool.capacity_units * page  # a hybrid pool counts tokens
    if max_total_tokens >= profiled:
        return pool, (
            f"--max-total-tokens {max_total_tokens:,} is not below the profiled pool ({profiled:,} tokens): "
            "SGLang keeps the profiled value"
        )
    if hybrid:
        full, swa = hybrid_swa_pools(max_total_tokens, pool.swa_floor_tokens, page)
        capped = replace(pool, capacity_units=int(full), swa_capacity_units=int(swa))
        tokens = int(full)
    else:
        capped = replace(pool, capacity_units=max_total_tokens // page)
        tokens = max_total_tokens // page * page
    return (
        capped,
        f"--max-total-tokens caps the pool at {tokens:,} tokens (profiled {profiled:,}); the fraction is unchanged",
    )
