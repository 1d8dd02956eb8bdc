"""TensorRT-LLM (PyTorch backend): fixed 32-token blocks over every layer, a fraction of the free memory.

Rules followed (tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator): the KV budget is
(total - weights - profiled peak) x free_gpu_memory_fraction; one pool of fixed-size blocks over all
layers. Through 1.3 (`ec.TRTLLM_VSWA_OPT_IN_THROUGH`, the V1 manager's releases) windowed layers keep the full
length unless kv_cache_config.max_attention_window is given, which is what this sizes. Not modelled: one pool per
attention window (variable sliding window attention: `KVCacheManager.adjust_window_sizes_for_vswa`, and the V2
manager's pools) where a release, a model family (`ec.TRTLLM_DERIVED_WINDOW_FAMILIES`) or the user turns it on.
State models: through 1.2 (`ec.TRTLLM_SLOT_STATE_FIRST` / `_LAST`: Nemotron-H from 1.0, Qwen3-Next from 1.2)
hold a Mamba state slot per max_batch_size up front, during the profiling run, so it comes off before the fraction
(`state_slot_bytes`); other state families and releases are not modelled. An architecture the stated release has
no model class for (`ec.TRTLLM_MODEL_CLASS_FIRST`: Jamba in none, Gemma 4 / Qwen3.5 before 1.3, Qwen3-Next before
1.2) does not start: refused with that reason (`missing_model_class`) rather than sized.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import ClassVar

from capacity import engine_constants as ec
from capacity.engines.base import UNSIZED_FEATURES, ProfileBase, declares_fp8_kv_cache
from capacity.engines.kinds import Engine
from capacity.engines.protocol import AssumptionContext, DefaultsRequest, PoolRequest, StartRequest
from capacity.kv_bytes import kv_bytes_per_token_per_gpu, state_bytes_per_sequence_per_gpu
from capacity.numeric import Num, truncate
from capacity.overhead import EngineDefaults, Overhead, OverheadInputs, transformer_overhead
from capacity.pool import KVGroup, KVPool, PoolUnit
from capacity.spec import KVKind, ModelSpec


@dataclass(frozen=True, slots=True)
class TrtllmProfile(ProfileBase):
    requested_version: str | None = None
    engine: Engine = Engine.TRTLLM
    # the memory fraction, batch size, token budget and tokens per block are fixed defaults
    defaults_read_kv_dtype: ClassVar[bool] = False

    def defaults(self, request: DefaultsRequest) -> EngineDefaults:
        return EngineDefaults(
            ec.TRTLLM_FREE_GPU_MEMORY_FRACTION,
            ec.TRTLLM_DEFAULT_MAX_BATCH_SIZE,
            ec.TRTLLM_DEFAULT_MAX_NUM_TOKENS,
            ec.TRTLLM_TOKENS_PER_BLOCK,
        )

    def resolved_kv_dtype(self, model: ModelSpec, kv_dtype: str) -> str:
        """`auto` keeps the checkpoint's own KV quantization: `validate_and_set_kv_cache_quant` (pyexecutor) returns
        on "auto" ("Using checkpoint KV quantization"), leaving hf_quant_config.json's `kv_cache_quant_algo` in the
        model's QuantConfig, which sizes the cache; the same in every release read, so no release gate."""
        return "fp8_e4m3" if kv_dtype == "auto" and declares_fp8_kv_cache(model) else kv_dtype

    def overhead_link_kind(self, tp: int, nvlink_multicast: bool, peer_link_gpus: int | None) -> Hashable:
        """None: the profiling-pass model reads no link (its non-torch term follows TP alone)."""
        return None

    def overhead(self, inputs: OverheadInputs) -> Overhead:
        """vLLM's profiling-pass model without CUDA graphs (captured after the KV allocation), plus the Mamba state
        slots the estimation pass's cache manager holds while the peak is measured (`state_slot_bytes`)."""
        base = transformer_overhead(inputs, ec.vllm_release(None), graphs=False)
        slots = self.state_slot_bytes(inputs.model, inputs.act_bytes, inputs.tp, inputs.pp, inputs.max_num_seqs)
        if not slots:
            return base
        return replace(
            base,
            activation_peak_bytes=base.activation_peak_bytes + slots,
            buffers=(*base.buffers, ("Mamba state slots (max_batch_size x conv + SSM state)", slots)),
        )

    def slot_states(self, model: ModelSpec) -> bool:
        """A stated release through 1.2 serving a hybrid it has a model for (Nemotron-H from 1.0, Qwen3-Next from 1.2):
        the Python MambaCacheManager's flat state slots."""
        first, line = ec.TRTLLM_SLOT_STATE_FIRST.get(model.family), self.release_line
        return bool(model.has_state_layers and first and line and first <= line <= ec.TRTLLM_SLOT_STATE_LAST)

    def state_slot_bytes(self, model: ModelSpec, model_bytes: int, tp: int, pp: int, max_batch_size: int | None) -> int:
        """MambaCacheManager.__init__'s conv and SSM state tensors on the most loaded GPU: max_batch_size slots of
        `d_conv - 1` conv columns and the SSM state, both in the model dtype; they exist before KvCacheCreator
        profiles, so the KV budget is (total - peak, states included) x fraction. 0 where `slot_states` is not."""
        if not self.slot_states(model):
            return 0
        slots = max_batch_size or ec.TRTLLM_DEFAULT_MAX_BATCH_SIZE
        per_slot = state_bytes_per_sequence_per_gpu(model, model_bytes, model_bytes, tp, pp, conv_without_current=True)
        return slots * per_slot

    def ssm_cache_dtype(self, model: ModelSpec, act_dtype: str) -> str:
        """mamba_ssm_cache_dtype 'auto' is the checkpoint's torch_dtype (validate_and_set_mamba_ssm_cache_dtype),
        whatever the config says of the SSM state."""
        return act_dtype

    @property
    def conv_state_without_current(self) -> bool:
        """The conv state keeps `d_conv - 1` columns (MambaCacheManager's conv_states shape)."""
        return True

    def kv_budget(
        self,
        total_bytes: Num,
        utilization: Num,
        weights_bytes: Num,
        overhead_bytes: Num,
        other_bytes: Num = 0,
        device_bound_bytes: Num = 0,
    ) -> Num:
        """free_gpu_memory_fraction of what is free after the profiling run (mem_get_info's free: other
        processes' memory is not free, so all of it comes off before the fraction)."""
        return truncate((total_bytes - other_bytes - weights_bytes - overhead_bytes) * utilization)

    @property
    def budget_is_fraction_of_free(self) -> bool:
        return True

    def stage_pools(self, request: PoolRequest) -> list[KVPool]:
        r = request
        unit = kv_bytes_per_token_per_gpu(r.model, r.kv_bytes, r.tp, r.pp) * r.block_size
        capacity = r.budget_bytes // unit if unit and r.budget_bytes > 0 else 0
        # the attention layers only where state layers have their own manager (MambaHybridCacheManager's layer_mask)
        layers = sum(not layer.cache.holds_state for layer in r.model.layers) if r.model.has_state_layers else None
        group = KVGroup(KVKind.FULL, layers if layers is not None else r.model.num_layers)
        return [KVPool(PoolUnit.BLOCK, capacity, r.block_size, (group,), r.max_num_batched_tokens, unit)]

    def windows_opt_in(self, model: ModelSpec) -> bool:
        """A stated release through 1.3, whose V1 manager keeps windowed layers at the full length by default
        (per-window pools only with kv_cache_config.max_attention_window, which is not an input here), for a model
        whose windows _create_kv_cache_manager does not fill in by itself (Gemma 4's, in releases not dated)."""
        line = self.release_line
        if line is None or model.family in ec.TRTLLM_DERIVED_WINDOW_FAMILIES:
            return False
        return line <= ec.TRTLLM_VSWA_OPT_IN_THROUGH

    @property
    def release_line(self) -> tuple[int, ...] | None:
        """The stated release's (major, minor); None where none is stated or it does not read as a version, which
        the release-bound rules treat as unknown."""
        if not self.requested_version:
            return None
        try:
            return ec.parse_version(self.requested_version)[:2]
        except ValueError:
            return None

    def assumption_notes(self, context: AssumptionContext) -> list[str]:
        """Windowed layers sized at the full length, as the release does without max_attention_window; the Mamba
        state slots, which follow max_batch_size rather than the KV budget."""
        i = context.inputs
        notes = []
        if self.windows_opt_in(i.model) and i.model.has_window_layers:
            notes.append(
                f"TensorRT-LLM {self.requested_version}: windowed layers keep the full length's KV (variable sliding "
                "window attention is opt-in through kv_cache_config.max_attention_window, which would size one pool "
                "per window: not modelled)"
            )
        slots = self.state_slot_bytes(i.model, i.act_bytes, i.tp, i.pp, i.max_num_seqs)
        if slots:
            batch = i.max_num_seqs or ec.TRTLLM_DEFAULT_MAX_BATCH_SIZE
            notes.append(
                f"TensorRT-LLM {self.requested_version} allocates the Mamba state for max_batch_size {batch:,} "
                f"sequences up front ({slots / (1 << 30):.2f} GiB per GPU), before the KV cache: a smaller "
                "max_batch_size (--max-num-seqs here) leaves that memory to the KV pool"
            )
        return notes

    @property
    def assumed_off(self) -> frozenset[str]:
        """Speculative decoding (a draft model and its KV pool) besides LoRA and CPU offload: none of them sized
        here (attention DP and MoE EP are refused with the reason: `capacity.features.parallel_layout`)."""
        return UNSIZED_FEATURES

    def missing_model_class(self, model: ModelSpec) -> str | None:
        """Why the stated release has no implementation of the architecture (`ec.TRTLLM_MODEL_CLASS_FIRST`: its
        model class came later, or never). None where the class exists, its first release is not read, or no release
        is stated (unknown: a check must not refuse what the engine may run)."""
        first, where = ec.TRTLLM_MODEL_CLASS_FIRST.get(model.family, ((0, 0), ""))
        line = self.release_line
        if first is not None and (line is None or line >= first):
            return None
        since = "in no release read" if first is None else f"first in {'.'.join(map(str, first))}"
        engine = " ".join(filter(None, ("TensorRT-LLM", self.requested_version)))
        return (
            f"{engine} has no implementation of {model.architecture} ({since}: {where}); it does not serve this model"
        )

    def start_refusal(self, request: StartRequest) -> str | None:
        """An architecture the release has no model class for (`missing_model_class`); no other start check read."""
        return self.missing_model_class(request.model)

    def unmodelled(self, model: ModelSpec) -> str | None:
        """What this profile does not reproduce for a model the release serves (a refused one is not sized)."""
        if self.missing_model_class(model):
            return None
        if model.has_window_layers and not self.windows_opt_in(model):
            return (
                "TensorRT-LLM keeps one KV pool per attention window (variable sliding window attention, "
                "a static split): not modelled, windowed layers sized as full attention"
            )
        if model.has_state_layers and not self.slot_states(model):
            return (
                "TensorRT-LLM's state managers for Mamba / linear-attention layers are not modelled for this model "
                "and release (sized: Nemotron-H on a stated 1.0-1.2, Qwen3-Next on 1.2)"
            )
        return None
