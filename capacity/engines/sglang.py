"""SGLang: a token pool (page size 1 by default), sized from `mem_fraction_static` of the device.

Rules followed (python/sglang/srt/server_args.py defaults; model_executor/model_runner.py
profile_max_num_token and mem_cache/memory_pool.py): the KV budget is total x mem_fraction_static
minus the weights and a context reserve; the cell size sums every attention layer's bytes per token;
models with both full and sliding-window layers get a separate, smaller window pool (a fixed share of
the full pool's tokens). The fractions and reserves are per release in capacity/engine_constants.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity import engine_constants as ec
from capacity.engines import Engine
from capacity.engines.numeric import Num, truncate
from capacity.memory import (
    WINDOWED_KINDS,
    EngineDefaults,
    KVGroup,
    KVPool,
    Overhead,
    layer_kv_bytes_per_token,
    serving_dtype,
    stage_layer_counts,
)
from capacity.spec import GpuSku, ModelSpec


@dataclass(frozen=True, slots=True)
class SglangProfile:
    requested_version: str | None = None
    engine: Engine = Engine.SGLANG

    @property
    def version(self) -> str | None:
        return self.requested_version

    def serving_dtype(self, model: ModelSpec) -> str:
        return serving_dtype(model, self.engine)

    def ssm_cache_dtype(self, model: ModelSpec, act_dtype: str) -> str:
        """The config's SSM state dtype, float32 when it says none (transformers' default)."""
        return model.mamba_ssm_cache_dtype

    def defaults(
        self,
        model: ModelSpec,
        gpu: GpuSku | None,
        gpu_memory_bytes: int,
        max_model_len: int,
        tp: int,
        pp: int,
        kv_dtype: str = "auto",
    ) -> EngineDefaults:
        return EngineDefaults(
            mem_fraction_static(gpu_memory_bytes, tp, pp), 0, chunked_prefill_size(gpu_memory_bytes), ec.SGLANG_PAGE_SIZE
        )

    def overhead(
        self, model: ModelSpec, tp: int, pp: int, max_num_batched_tokens: int, max_num_seqs: int | None, act_bytes: int
    ) -> Overhead:
        """A fixed context reserve: SGLang's activations live in the 1 - mem_fraction_static it leaves free."""
        return Overhead(0, ec.SGLANG_CONTEXT_BYTES, 0)

    def kv_budget(self, total_bytes: Num, utilization: Num, weights_bytes: Num, overhead_bytes: Num) -> Num:
        return truncate(total_bytes * utilization) - weights_bytes - overhead_bytes

    def stage_pools(
        self,
        model: ModelSpec,
        budget_bytes: int,
        kv_bytes: int,
        ssm_bytes: int,
        act_bytes: int,
        tp: int,
        pp: int,
        block_size: int,
        max_num_batched_tokens: int,
        max_in_flight_tokens: int,
    ) -> list[KVPool]:
        return [pool_from_cells(cells(model, kv_bytes, tp, pp), budget_bytes, block_size, max_num_batched_tokens)]

    def max_in_flight_tokens(self, max_num_batched_tokens: int, pp: int, async_scheduling: bool | None) -> int:
        return max_num_batched_tokens

    def kv_cache_tokens(
        self, num_blocks: Num, num_groups: Num, block_size: Num, concurrency: Num, max_model_len: Num
    ) -> Num:
        """`max_total_num_tokens`: the pool's token slots."""
        return num_blocks * block_size

    @property
    def start_reserved_units(self) -> int:
        return 0

    @property
    def refuses_short_pool(self) -> bool:
        """SGLang starts with any non-empty pool; a longer request waits or is rejected at admission."""
        return False

    def kv_dtype_problem(self, kv_dtype: str) -> str | None:
        return None


def chunked_prefill_size(gpu_memory_bytes: int) -> int:
    gb = gpu_memory_bytes / 1e9
    if gb < 35:
        return 2048
    if gb < 60:
        return 4096
    if gb < 160:
        return 8192
    return 16384


def mem_fraction_static(gpu_memory_bytes: int, tp: int, pp: int) -> float:
    """SGLang's default: (gpu_mem - reserved) / gpu_mem, reserved in MiB from its server_args."""
    gpu_mib = gpu_memory_bytes / ec.MIB
    chunked = chunked_prefill_size(gpu_memory_bytes)
    cuda_graph_max_bs = 256 if gpu_mib > 60 * 1024 else 160
    reserved = 512 + max(chunked, 2048) * 1.5 + cuda_graph_max_bs * 2 + tp * pp / 8 * 1024
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    fraction = (gpu_mib - reserved) / gpu_mib if gpu_mib > reserved else ec.SGLANG_FALLBACK_MEM_FRACTION
    return round(fraction, 3)


@dataclass(frozen=True, slots=True)
class SglangCells:
    """Bytes per token of SGLang's pools on the tightest stage: full-attention layers and SWA layers."""

    full_cell: int
    swa_cell: int
    full_layers: int
    swa_layers: int
    window: int  # the widest sliding window (0 without SWA layers)

    @property
    def hybrid(self) -> bool:
        """Both kinds present: SGLang keeps a separate, smaller pool for the window layers."""
        return self.full_layers > 0 and self.swa_layers > 0

    @property
    def swa_denominator(self) -> float:
        """Bytes one full-pool token costs in a hybrid SWA layout (the window pool is a fixed ratio)."""
        return self.full_cell + ec.SGLANG_SWA_FULL_TOKENS_RATIO * self.swa_cell


def cells(model: ModelSpec, kv_bytes: int, tp: int, pp: int) -> SglangCells:
    stage = max(
        stage_layer_counts(model, pp),
        key=lambda s: sum(layer_kv_bytes_per_token(layer, kv_bytes, tp) * n for layer, n in s),
    )
    full = [(layer, n) for layer, n in stage if layer.stores_per_token_kv and layer.kind not in WINDOWED_KINDS]
    swa = [(layer, n) for layer, n in stage if layer.kind in WINDOWED_KINDS and layer.window_tokens]
    return SglangCells(
        full_cell=sum(layer_kv_bytes_per_token(layer, kv_bytes, tp) * n for layer, n in full),
        swa_cell=sum(layer_kv_bytes_per_token(layer, kv_bytes, tp) * n for layer, n in swa),
        full_layers=sum(n for _, n in full),
        swa_layers=sum(n for _, n in swa),
        window=max((layer.window_tokens or 0 for layer, _ in swa), default=0),
    )


def pool_from_cells(c: SglangCells, budget: int, page_size: int, batched: int) -> KVPool:
    if c.hybrid:
        full_tokens = truncate(budget / c.swa_denominator) if budget > 0 else 0
        full_tokens -= full_tokens % page_size
        return KVPool(
            "token",
            full_tokens,
            page_size,
            (KVGroup("full", c.full_layers),),
            batched,
            c.full_cell,
            swa_capacity_units=int(full_tokens * ec.SGLANG_SWA_FULL_TOKENS_RATIO),
            swa_window_tokens=c.window,
            swa_bytes_per_full_token=c.swa_denominator,
        )
    cell = c.full_cell + c.swa_cell
    tokens = budget // cell if cell and budget > 0 else 0
    tokens -= tokens % page_size
    return KVPool("token", tokens // page_size, page_size, (KVGroup("full", c.full_layers + c.swa_layers),),
                  batched, cell * page_size)  # fmt: skip
