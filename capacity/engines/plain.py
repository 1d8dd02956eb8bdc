"""The textbook formula (DESIGN.md, the seed article): bytes, no blocks, overhead given by hand."""

from __future__ import annotations

from dataclasses import dataclass

from capacity.engines import Engine
from capacity.engines.base import ProfileBase
from capacity.engines.numeric import Num, truncate
from capacity.memory import (
    EngineDefaults,
    KVGroup,
    KVPool,
    Overhead,
    OverheadInputs,
    layer_kv_bytes_per_token,
    layer_state_bytes,
    stage_layers,
)
from capacity.spec import GpuSku, ModelSpec


@dataclass(frozen=True, slots=True)
class PlainProfile(ProfileBase):
    requested_version: str | None = None
    engine: Engine = Engine.PLAIN

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

    @property
    def assumed_off(self) -> frozenset[str]:
        """No engine behind it: nothing assumed."""
        return frozenset()

    def overhead(self, inputs: OverheadInputs) -> Overhead:
        return Overhead(0, 0, 0)

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
