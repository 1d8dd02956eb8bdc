"""Serving-engine profiles: one module per engine behind one small protocol.

Each profile answers for itself what the engine does with a deployment: its defaults, the non-KV
overhead it charges, the KV budget, how it lays the pool out (per pipeline stage), how many tokens a
windowed layer keeps in flight, what it prints as the KV cache size, and whether it starts. The
scalar `capacity.memory.estimate` and the vectorized grid call the same methods; the few rules the
grid evaluates per row (budget, printed size) are written over `capacity.engines.numeric`, so one
definition serves Python integers and Polars expressions alike.

Engines are chosen by the `Engine` enum (a `StrEnum`: "vllm" == Engine.VLLM), never by comparing
names in several places.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from capacity.engines.numeric import Num
    from capacity.memory import EngineDefaults, KVPool, Overhead, OverheadInputs
    from capacity.spec import GpuSku, ModelSpec


class Engine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"
    PLAIN = "plain"

    @property
    def casts_fp32_to_bf16(self) -> bool:
        """vLLM and SGLang serve a float32 checkpoint in bfloat16 unless told otherwise."""
        return self in (Engine.VLLM, Engine.SGLANG)


ENGINE_NAMES = tuple(e.value for e in Engine)


class EngineProfile(Protocol):
    """What capplan asks a serving engine (one release of it)."""

    @property
    def engine(self) -> Engine:
        """Which engine this profile speaks for."""

    @property
    def version(self) -> str | None:
        """The release whose rules are in force (None: the engine has no versioned rules here)."""

    def serving_dtype(self, model: ModelSpec) -> str:
        """The dtype activations and `auto` KV use."""

    def ssm_cache_dtype(self, model: ModelSpec, act_dtype: str) -> str:
        """The dtype of a state layer's recurrent (SSM) state."""

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
        """Utilization, batch limits and block size the engine picks when the deployment does not say."""

    def overhead(self, inputs: OverheadInputs) -> Overhead:
        """Non-KV, non-weight memory per GPU: activation peak, non-torch memory, CUDA graphs. The GPU's
        links (`inputs.nvlink_multicast`, `peer_link_gpus`) may move only what TP > 1 adds."""

    def weight_layout_extra_bytes(self, model: ModelSpec, tp: int, pp: int, gpu: GpuSku | None,
                                  triton_kernels: bool | None = None) -> int:  # fmt: skip
        """Weight bytes per GPU the engine's kernels keep beyond the checkpoint's format (padding, re-layouts);
        `triton_kernels`: the optional package beside the engine (None: a plain install)."""

    def kv_budget(self, total_bytes: Num, utilization: Num, weights_bytes: Num, overhead_bytes: Num) -> Num:
        """Bytes per GPU left for the KV cache (Python ints or Polars expressions)."""

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
        """The pool each pipeline stage builds from `budget_bytes`, in stage order (the engine sizes
        every rank to the tightest one). Raises SpecError / ValueError where the engine cannot.
        `state_checkpoints`: what `defaults()` says for the GPU."""

    def max_in_flight_tokens(self, max_num_batched_tokens: int, pp: int, async_scheduling: bool | None) -> int:
        """Tokens scheduled but not settled that a windowed layer keeps blocks for."""

    def kv_cache_tokens(
        self, num_blocks: Num, num_groups: Num, block_size: Num, concurrency: Num, max_model_len: Num
    ) -> Num:
        """What the engine prints as its KV cache size in tokens."""

    @property
    def start_reserved_units(self) -> int:
        """Units of the pool the start check holds back (vLLM 0.33: the null block)."""

    @property
    def refuses_short_pool(self) -> bool:
        """True when the engine refuses to start unless one request of max_model_len fits."""

    def kv_dtype_problem(self, kv_dtype: str) -> str | None:
        """Why the engine rejects a KV cache dtype (None: accepted)."""

    @property
    def conv_state_without_current(self) -> bool:
        """The conv state keeps `kernel - 1` columns (the current token is not stored), not `kernel`."""

    def unmodelled(self, model: ModelSpec) -> str | None:
        """Why this engine's accounting of the model is not modelled (None: it is); the estimate and
        the grid then say so instead of printing a number sized as something else."""

    @property
    def assumed_off(self) -> frozenset[str]:
        """Engine features this profile does not size and the estimate says it assumed off when the
        deployment does not declare them: lora, cpu_offload, speculative, dp_attention."""

    @property
    def overhead_era(self) -> str:
        """Which fitted overhead coefficients apply (vLLM: the release's era, e.g. 'v1-mid')."""

    def observed_version(self, version: str | None, generation: str | None) -> str | None:
        """The release to predict an observed deployment with, from what its log says."""


def engine_profile(engine: str | Engine, version: str | None = None) -> EngineProfile:
    """The profile of an engine (and, for vLLM, of a release). Raises SpecError for an unknown name."""
    from capacity.engines.plain import PlainProfile
    from capacity.engines.sglang import SglangProfile
    from capacity.engines.trtllm import TrtllmProfile
    from capacity.engines.vllm import VllmProfile
    from capacity.spec import SpecError

    try:
        kind = Engine(str(engine).lower())
    except ValueError:
        raise SpecError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINE_NAMES)}") from None
    if kind is Engine.VLLM:
        return VllmProfile.for_version(version)
    if kind is Engine.SGLANG:
        return SglangProfile(version)
    if kind is Engine.TRTLLM:
        return TrtllmProfile(version)
    return PlainProfile(version)
