"""What most engine profiles answer the same way; a profile overrides only where its engine differs.

Every method is the protocol's (`capacity.engines.protocol.EngineProfile`); the defaults are the plain
reading: the model's serving dtype, usable memory minus weights and overhead as the KV budget, one
batch in flight, the pool's token slots as the printed size, start with any non-empty pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from capacity.dtypes import format_gib, serving_dtype
from capacity.engines.protocol import ASSUMPTION_SHARE, AssumptionContext, StartRequest
from capacity.numeric import Num, truncate

if TYPE_CHECKING:
    from collections.abc import Hashable

    from capacity.engines.kinds import Engine
    from capacity.hf_config.overrides import OverrideRule
    from capacity.spec import DeploymentSpec, GpuSku, ModelSpec


# features of `DeploymentSpec.unmodelled_features` a profile may assume off (its `assumed_off`)
ADAPTER_FEATURES = frozenset({"lora", "cpu_offload"})
UNSIZED_FEATURES = ADAPTER_FEATURES | {"speculative"}
KV_CONNECTOR = "kv_connector"  # vLLM's --kv-transfer-config (LMCache and the like hold GPU buffers of their own)


def declares_fp8_kv_cache(model: ModelSpec) -> bool:
    """Whether the checkpoint declares an FP8 KV cache for itself (`CheckpointQuant.kv_cache_format`)."""
    return model.quantization is not None and model.quantization.kv_cache_format == "fp8"


class ProfileBase:
    """Defaults shared by the engine profiles (each a frozen dataclass with `engine` and `requested_version`)."""

    __slots__ = ()
    engine: Engine
    requested_version: str | None

    @property
    def version(self) -> str | None:
        return self.requested_version

    @property
    def engine_rules_version(self) -> str | None:
        return self.version

    @property
    def overhead_calibrated(self) -> bool:
        """No fitted overhead coefficients or calibration rows: the modelled overhead stands as it is."""
        return False

    @property
    def overhead_note(self) -> str | None:
        return None

    # constants of the engine (the protocol's read-only properties): the overhead does not read the DP size; no flag
    # overrides the config (TensorRT-LLM: edit config.json)
    overhead_reads_moe_dispatch: ClassVar[bool] = False
    config_override_rule: ClassVar[OverrideRule | None] = None
    # one budget for every pipeline stage (the most loaded stage's): the engine's per-stage sizing is not read
    budgets_per_stage: ClassVar[bool] = False
    # the defaults may read the KV dtype (an engine that says otherwise is held to it by tests/test_engine_defaults.py)
    defaults_read_kv_dtype: ClassVar[bool] = True

    def serving_dtype(self, model: ModelSpec) -> str:
        return serving_dtype(model, self.engine)

    def ssm_cache_dtype(self, model: ModelSpec, act_dtype: str) -> str:
        """The config's SSM state dtype, float32 when it says none (transformers' default)."""
        return model.mamba_ssm_cache_dtype

    def weight_layout_extra_bytes(
        self, model: ModelSpec, tp: int, pp: int, gpu: GpuSku | None, triton_kernels: bool | None = None
    ) -> int:
        """The checkpoint's format as it is."""
        return 0

    def weight_layout_kind(self, gpu: GpuSku | None) -> Hashable:
        """One kind: no GPU changes the layout."""
        return None

    def engine_generation_notes(self, deployment: DeploymentSpec) -> list[str]:
        """VLLM_USE_V1 is vLLM's variable: another engine ignores it."""
        return [f"VLLM_USE_V1=0 is vLLM's: ignored for {self.engine.value}"] if deployment.vllm_v0_engine else []

    def overhead_link_kind(self, tp: int, nvlink_multicast: bool, peer_link_gpus: int | None) -> Hashable:
        """Both link facts, as `overhead` is given them (a profile that reads less says so)."""
        return nvlink_multicast, peer_link_gpus

    def start_check_kind(self, gpu: GpuSku | None) -> Hashable:
        """The compute capability: the quantization minimum and the pre-Ampere KV checks read nothing else
        of the GPU (`capacity.engines.start_checks`)."""
        return gpu.compute_capability if gpu is not None else None

    def weight_copy_bytes(self, model: ModelSpec, tp: int, pp: int, weight_format: str) -> int:
        """No copies beside the loaded weights."""
        return 0

    # the overhead reads whether the GPU is an AMD one (`OverheadInputs.rocm`): the grid computes it per vendor
    overhead_reads_rocm: ClassVar[bool] = False

    def kv_budget(
        self,
        total_bytes: Num,
        utilization: Num,
        weights_bytes: Num,
        overhead_bytes: Num,
        other_bytes: Num = 0,
        device_bound_bytes: Num = 0,
    ) -> Num:
        """Usable memory (total x utilization) minus everything that is not KV, and minus the share of other
        processes' memory the engine's accounting takes off (`other_process_charge`); no overhead here is bound by
        the device alone (`device_bound_bytes` is vLLM 0.34's)."""
        others = self.other_process_charge(other_bytes, utilization)
        return truncate(total_bytes * utilization) - weights_bytes - overhead_bytes - others

    def other_process_charge(self, other_bytes: Num, utilization: Num) -> Num:
        """What other processes' memory takes from the budget: all of it for the plain formula (usable
        memory is what they leave)."""
        return other_bytes

    def start_memory_problem(self, total_bytes: int, utilization: float, other_bytes: int) -> str | None:
        """No check of the free memory at start: a pool too small shows as no budget."""
        return None

    def max_in_flight_tokens(self, max_num_batched_tokens: int, pp: int, async_scheduling: bool | None) -> int:
        return max_num_batched_tokens

    def kv_cache_tokens(
        self, num_blocks: Num, num_groups: Num, block_size: Num, concurrency: Num, max_model_len: Num
    ) -> Num:
        """The pool's token slots."""
        return num_blocks * block_size

    @property
    def start_reserved_units(self) -> int:
        return 0

    @property
    def refuses_short_pool(self) -> bool:
        return False

    @property
    def budget_is_fraction_of_free(self) -> bool:
        return False

    def context_limit(self, model: ModelSpec) -> int:
        """The parser's limit (vLLM 0.30+'s rule)."""
        return model.context_limit_tokens

    def start_refusal(self, request: StartRequest) -> str | None:
        """TensorRT-LLM and the plain reading: no start check read (none refused)."""
        return None

    def weights_refusal(self, model: ModelSpec, weight_format: str, expert_intermediate_ranks: int) -> str | None:
        """No weight-loading check read (none refused)."""
        return None

    def kv_dtype_problem(self, kv_dtype: str) -> str | None:
        return None

    def resolved_kv_dtype(self, model: ModelSpec, kv_dtype: str) -> str:
        return kv_dtype

    @property
    def conv_state_without_current(self) -> bool:
        """transformers caches the whole conv window (`kernel` columns)."""
        return False

    def unmodelled(self, model: ModelSpec) -> str | None:
        return None

    @property
    def assumed_off(self) -> frozenset[str]:
        """A serving engine loads adapters and offloads weights on request; neither is sized."""
        return ADAPTER_FEATURES

    def sequence_cap(self, kv_cache_tokens: Num, max_model_len: Num, state_slots: Num, slots_per_request: Num) -> Num:
        """No sequence cap derived from the pool (0)."""
        return 0

    def assumption_notes(self, context: AssumptionContext) -> list[str]:
        return []

    def utilization_notes(self, context: AssumptionContext) -> list[str]:
        """The release default, against 0.05 less."""
        c = context
        if c.deployment.gpu_memory_utilization is not None or c.total_bytes * 0.05 <= ASSUMPTION_SHARE * c.budget_bytes:
            return []
        return [
            f"assumed gpu_memory_utilization {c.utilization} (the release default); 0.05 less takes "
            f"{format_gib(c.total_bytes * 0.05)} ({c.total_bytes * 0.05 / c.budget_bytes:.0%}) from the KV budget"
        ]

    @property
    def overhead_era(self) -> str:
        return self.engine.value

    def observed_version(self, version: str | None, generation: str | None) -> str | None:
        return version
