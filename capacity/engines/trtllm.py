"""TensorRT-LLM (PyTorch backend): fixed 32-token blocks over every layer, a fraction of the free memory.

Rules followed (tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator): the KV budget is
(total - weights - profiled peak) x free_gpu_memory_fraction; one pool of fixed-size blocks over all
layers. Through 1.3 (`ec.TRTLLM_VSWA_OPT_IN_THROUGH`, the V1 manager's releases) windowed layers keep the full
length unless kv_cache_config.max_attention_window is given, which is what this sizes. Not modelled: one pool per
attention window (variable sliding window attention: `KVCacheManager.adjust_window_sizes_for_vswa`, and the V2
manager's pools) where a release, a model family (`ec.TRTLLM_DERIVED_WINDOW_FAMILIES`) or the user turns it on,
and the hybrid state managers (`MambaHybridCacheManager`).
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity import engine_constants as ec
from capacity.engines.base import UNSIZED_FEATURES, ProfileBase
from capacity.engines.kinds import Engine
from capacity.engines.protocol import AssumptionContext, DefaultsRequest, PoolRequest
from capacity.kv_bytes import kv_bytes_per_token_per_gpu
from capacity.numeric import Num, truncate
from capacity.overhead import EngineDefaults, Overhead, OverheadInputs, transformer_overhead
from capacity.pool import KVGroup, KVPool, PoolUnit
from capacity.spec import KVKind, ModelSpec


@dataclass(frozen=True, slots=True)
class TrtllmProfile(ProfileBase):
    requested_version: str | None = None
    engine: Engine = Engine.TRTLLM

    def defaults(self, request: DefaultsRequest) -> EngineDefaults:
        return EngineDefaults(
            ec.TRTLLM_FREE_GPU_MEMORY_FRACTION,
            ec.TRTLLM_DEFAULT_MAX_BATCH_SIZE,
            ec.TRTLLM_DEFAULT_MAX_NUM_TOKENS,
            ec.TRTLLM_TOKENS_PER_BLOCK,
        )

    def overhead(self, inputs: OverheadInputs) -> Overhead:
        """vLLM's profiling-pass model without CUDA graphs (captured after the KV allocation)."""
        return transformer_overhead(inputs, ec.vllm_release(None), graphs=False)

    def kv_budget(
        self, total_bytes: Num, utilization: Num, weights_bytes: Num, overhead_bytes: Num, other_bytes: Num = 0
    ) -> Num:
        """free_gpu_memory_fraction of what is free after the profiling run (mem_get_info's free: other
        processes' memory is not free, so all of it comes off before the fraction)."""
        return truncate((total_bytes - other_bytes - weights_bytes - overhead_bytes) * utilization)

    def stage_pools(self, request: PoolRequest) -> list[KVPool]:
        r = request
        unit = kv_bytes_per_token_per_gpu(r.model, r.kv_bytes, r.tp, r.pp) * r.block_size
        capacity = r.budget_bytes // unit if unit and r.budget_bytes > 0 else 0
        group = KVGroup(KVKind.FULL, r.model.num_layers)
        return [KVPool(PoolUnit.BLOCK, capacity, r.block_size, (group,), r.max_num_batched_tokens, unit)]

    def windows_opt_in(self, model: ModelSpec) -> bool:
        """A stated release through 1.3, whose V1 manager keeps windowed layers at the full length by default
        (per-window pools only with kv_cache_config.max_attention_window, which is not an input here), for a model
        whose windows _create_kv_cache_manager does not fill in by itself (Gemma 4's, in releases not dated)."""
        if not self.requested_version or model.family in ec.TRTLLM_DERIVED_WINDOW_FAMILIES:
            return False
        try:
            return ec.parse_version(self.requested_version)[:2] <= ec.TRTLLM_VSWA_OPT_IN_THROUGH
        except ValueError:
            return False

    def assumption_notes(self, context: AssumptionContext) -> list[str]:
        """Windowed layers sized at the full length, as the release does without max_attention_window."""
        model = context.inputs.model
        if self.windows_opt_in(model) and any(layer.cache.windowed for layer in model.layers):
            return [
                f"TensorRT-LLM {self.requested_version}: windowed layers keep the full length's KV (variable sliding "
                "window attention is opt-in through kv_cache_config.max_attention_window, which would size one pool "
                "per window: not modelled)"
            ]
        return []

    @property
    def assumed_off(self) -> frozenset[str]:
        """Speculative decoding (a draft model and its KV pool) and DP attention (a pool per attention
        rank) besides LoRA and CPU offload: none of them sized here."""
        return UNSIZED_FEATURES

    def unmodelled(self, model: ModelSpec) -> str | None:
        if any(layer.cache.windowed for layer in model.layers) and not self.windows_opt_in(model):
            return (
                "TensorRT-LLM keeps one KV pool per attention window (variable sliding window attention, "
                "a static split): not modelled, windowed layers sized as full attention"
            )
        if model.has_state_layers:
            return "TensorRT-LLM's state managers for Mamba / linear-attention layers are not modelled"
        return None
