"""The textbook formula (DESIGN.md, the seed article): bytes, no blocks, overhead given by hand."""

from __future__ import annotations

from dataclasses import dataclass

from capacity.engines.base import ProfileBase
from capacity.engines.kinds import Engine
from capacity.engines.protocol import DefaultsRequest, PoolRequest
from capacity.kv_bytes import layer_kv_bytes_per_token, layer_state_bytes
from capacity.numeric import Num, truncate
from capacity.overhead import EngineDefaults, Overhead, OverheadInputs
from capacity.parallel import stage_layers
from capacity.pool import KVGroup, KVPool, PoolUnit


@dataclass(frozen=True, slots=True)
class PlainProfile(ProfileBase):
    requested_version: str | None = None
    engine: Engine = Engine.PLAIN

    def defaults(self, request: DefaultsRequest) -> EngineDefaults:
        return EngineDefaults(1.0, 0, 0, 1)

    @property
    def overhead_note(self) -> str | None:
        return "plain engine: no overhead unless given with --overhead-gib"

    @property
    def assumed_off(self) -> frozenset[str]:
        """No engine behind it: nothing assumed."""
        return frozenset()

    def overhead(self, inputs: OverheadInputs) -> Overhead:
        return Overhead(0, 0, 0)

    def stage_pools(self, request: PoolRequest) -> list[KVPool]:
        """Bytes, each layer keeping what its window allows, on the tightest stage."""
        r = request
        stage = max(
            stage_layers(r.model, r.pp),
            key=lambda s: sum(layer_kv_bytes_per_token(layer, r.kv_bytes, r.tp) for layer in s),
        )
        cached = [layer for layer in stage if layer.cache.stores_per_token_kv]
        per_token = tuple(layer_kv_bytes_per_token(layer, r.kv_bytes, r.tp) for layer in cached)
        groups = tuple(KVGroup(layer.kind, 1, layer.cache.window) for layer in cached)
        state = sum(layer_state_bytes(layer, r.act_bytes, r.ssm_bytes, r.tp) for layer in stage)
        return [KVPool(PoolUnit.BYTE, max(r.budget_bytes, 0), 1, groups, 0, 1, per_token, state)]

    def max_in_flight_tokens(self, max_num_batched_tokens: int, pp: int, async_scheduling: bool | None) -> int:
        return 0

    def kv_cache_tokens(
        self, num_blocks: Num, num_groups: Num, block_size: Num, concurrency: Num, max_model_len: Num
    ) -> Num:
        return truncate(concurrency * max_model_len)
