"""The textbook formula (DESIGN.md, the seed article): bytes, no blocks, overhead given by hand."""

from __future__ import annotations

from dataclasses import dataclass

from capacity.engines import Engine
from capacity.engines.numeric import Num, truncate
from capacity.memory import (
    EngineDefaults,
    KVGroup,
    KVPool,
    Overhead,
    layer_kv_bytes_per_token,
    layer_state_bytes,
    serving_dtype,
    stage_layers,
)
from capacity.spec import GpuSku, ModelSpec


@dataclass(frozen=True, slots=True)
class PlainProfile:
    requested_version: str | None = None
    engine: Engine = Engine.PLAIN

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
        return EngineDefaults(1.0, 0, 0, 1)

    def overhead(
        self, model: ModelSpec, tp: int, pp: int, max_num_batched_tokens: int, max_num_seqs: int | None, act_bytes: int
    ) -> Overhead:
        return Overhead(0, 0, 0)

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
        *,
        state_checkpoints: bool = False,
    ) -> list[KVPool]:
        """Bytes, each layer keeping what its window allows, on the tightest stage."""
        stage = max(
            stage_layers(model, pp), key=lambda s: sum(layer_kv_bytes_per_token(layer, kv_bytes, tp) for layer in s)
        )
        per_token = tuple(layer_kv_bytes_per_token(layer, kv_bytes, tp) for layer in stage if layer.stores_per_token_kv)
        groups = tuple(KVGroup(layer.kind.value, 1, layer.window_tokens) for layer in stage if layer.stores_per_token_kv)
        state = sum(layer_state_bytes(layer, act_bytes, ssm_bytes, tp) for layer in stage)
        return [KVPool("byte", max(budget_bytes, 0), 1, groups, 0, 1, per_token, state)]

    def max_in_flight_tokens(self, max_num_batched_tokens: int, pp: int, async_scheduling: bool | None) -> int:
        return 0

    def kv_cache_tokens(
        self, num_blocks: Num, num_groups: Num, block_size: Num, concurrency: Num, max_model_len: Num
    ) -> Num:
        return truncate(concurrency * max_model_len)

    @property
    def start_reserved_units(self) -> int:
        return 0

    @property
    def refuses_short_pool(self) -> bool:
        return False

    def kv_dtype_problem(self, kv_dtype: str) -> str | None:
        return None

    @property
    def conv_state_without_current(self) -> bool:
        """transformers caches the whole conv window"""
        return False

    def unmodelled(self, model: ModelSpec) -> str | None:
        return None

    @property
    def overhead_era(self) -> str:
        return self.engine.value

    def observed_version(self, version: str | None, generation: str | None) -> str | None:
        return version
