"""TensorRT-LLM (PyTorch backend): fixed 32-token blocks over every layer, a fraction of the free memory.

Rules followed (tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator): the KV budget is
(total - weights - profiled peak) x free_gpu_memory_fraction; one pool of fixed-size blocks over all
layers. Not modelled: one pool per attention window (variable sliding window attention) and the hybrid
state managers; windowed layers are sized as full attention, which over-charges them.
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity import engine_constants as ec
from capacity.engines import Engine
from capacity.engines.base import UNSIZED_FEATURES, ProfileBase
from capacity.engines.numeric import Num, truncate
from capacity.memory import (
    EngineDefaults,
    KVGroup,
    KVPool,
    Overhead,
    OverheadInputs,
    kv_bytes_per_token_per_gpu,
    transformer_overhead,
)
from capacity.spec import GpuSku, KVKind, ModelSpec


@dataclass(frozen=True, slots=True)
class TrtllmProfile(ProfileBase):
    requested_version: str | None = None
    engine: Engine = Engine.TRTLLM

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
            ec.TRTLLM_FREE_GPU_MEMORY_FRACTION,
            ec.TRTLLM_DEFAULT_MAX_BATCH_SIZE,
            ec.TRTLLM_DEFAULT_MAX_NUM_TOKENS,
            ec.TRTLLM_TOKENS_PER_BLOCK,
        )

    def overhead(self, inputs: OverheadInputs) -> Overhead:
        """vLLM's profiling-pass model without CUDA graphs (captured after the KV allocation)."""
        i = inputs
        return transformer_overhead(i.model, i.tp, i.pp, max(i.max_num_batched_tokens, 1), i.max_num_seqs or 256,
                                    ec.vllm_release(None), i.act_bytes, graphs=False)  # fmt: skip

    def kv_budget(self, total_bytes: Num, utilization: Num, weights_bytes: Num, overhead_bytes: Num) -> Num:
        """free_gpu_memory_fraction of what is free after the profiling run."""
        return truncate((total_bytes - weights_bytes - overhead_bytes) * utilization)

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
        unit = kv_bytes_per_token_per_gpu(model, kv_bytes, tp, pp) * block_size
        capacity = budget_bytes // unit if unit and budget_bytes > 0 else 0
        return [KVPool("block", capacity, block_size, (KVGroup("full", model.num_layers),), max_num_batched_tokens, unit)]

    @property
    def assumed_off(self) -> frozenset[str]:
        """Speculative decoding (a draft model and its KV pool) and DP attention (a pool per attention
        rank) besides LoRA and CPU offload: none of them sized here."""
        return UNSIZED_FEATURES

    def unmodelled(self, model: ModelSpec) -> str | None:
        if any(layer.kind in (KVKind.SLIDING, KVKind.CHUNKED) for layer in model.layers):
            return (
                "TensorRT-LLM keeps one KV pool per attention window (variable sliding window attention, "
                "a static split): not modelled, windowed layers sized as full attention"
            )
        if model.has_state_layers:
            return "TensorRT-LLM's state managers for Mamba / linear-attention layers are not modelled"
        return None
