"""TensorRT-LLM's LoRA cache (PyTorch backend): a paged PEFT cache on the GPU and in host memory, not slots.

Read from NVIDIA/TensorRT-LLM (the 1.x PyTorch backend; the same lines in every stored `_util.py` version):

* `tensorrt_llm/_torch/pyexecutor/_util.py` create_py_executor_instance: the modules are
  `LoraModule.create_lora_modules(lora_target_modules, ...)`; with `lora_config.max_loras` set,
  `peft_cache_config.num_device_module_layer = max_lora_rank x num_hidden_layers x len(targets + missing q/k/v)
  x max_loras` (`max_cpu_loras` sets `num_host_module_layer` alike); without it the device cache is
  `PeftCacheConfig.device_cache_percent` (0.02, `llmapi/llm_args.py`) of the free memory and the host cache
  `host_cache_size` (1 GiB).
* `cpp/tensorrt_llm/runtime/loraModule.cpp` LoraModule::createLoraModules and `loraModule.h` localInDim /
  localOutDim: each module's (in, out) on one TP rank; attn_q/k/v and the MLP's up projections split the output
  by TP, attn_dense and mlp_4h_to_h the input.
* `cpp/tensorrt_llm/batch_manager/peftCacheManager.cpp` PeftCacheManager::getPageManagerConfig / getMaxNumSlots:
  a slot is `pageWidth` = the smallest module's in + out elements; a page holds
  max(optimal_adapter_size x sum(ceil(in + out / pageWidth)) x local layers, ceil(max_adapter_size x largest
  in + out / pageWidth)) slots (optimal 8, max 64, each at most max_lora_rank); the cache is whole pages of the
  model dtype; fewer slots than one adapter of max_adapter_size fails the start ("Not enough space allocated to
  device LoRA cache to hold 1 max sized LoRA").

The layers on a rank (getNbAttentionLayers) follow capplan's pipeline split (`pp_partition`), its most loaded
stage. KvCacheCreator.configure_kv_cache_capacity measures the memory in use after its estimation run with the
executor (and so this cache, allocated outside torch) alive: the cache comes off before free_gpu_memory_fraction,
like the weights, which is where `charge_lora` puts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from capacity.dtypes import GIB
from capacity.features.lora_spec import LINEAR_TARGETS, LoraMemory, LoraSpec, LoraTarget
from capacity.numeric import cdiv
from capacity.parallel import pp_partition
from capacity.spec import ModelSpec, SpecError

DEFAULT_RANK = 64  # tensorrt_llm/lora_helper.py LoraConfig.max_lora_rank
DEVICE_CACHE_PERCENT = 0.02  # llmapi/llm_args.py PeftCacheConfig.device_cache_percent
HOST_CACHE_BYTES = 1 << 30  # PeftCacheConfig.host_cache_size
OPTIMAL_ADAPTER_SIZE, MAX_ADAPTER_SIZE = 8, 64  # PeftCacheConfig.optimal_adapter_size / max_adapter_size


class TrtllmLoraModule(StrEnum):
    """TensorRT-LLM's LoRA module names (lora_helper.py get_default_trtllm_modules_to_hf_modules)."""

    ATTN_Q = "attn_q"
    ATTN_K = "attn_k"
    ATTN_V = "attn_v"
    ATTN_DENSE = "attn_dense"
    MLP_H_TO_4H = "mlp_h_to_4h"  # gate_proj
    MLP_GATE = "mlp_gate"  # up_proj
    MLP_4H_TO_H = "mlp_4h_to_h"  # down_proj

    def local_width(self, model: ModelSpec, tp: int) -> int:
        """localInDim + localOutDim on one TP rank. The bindings config holds per-rank sizes, floored
        (_torch/model_config.py get_bindings_model_config: hidden, heads, KV heads and intermediate // TP);
        createLoraModules multiplies them back by TP and splits one side again (loraModule.cpp / .h)."""
        hidden = model.hidden_size // tp * tp
        q_local = model.num_attention_heads // tp * model.head_dim
        kv_local = model.num_kv_heads // tp * model.head_dim  # 0 where TP exceeds the KV heads, as the source floors
        mlp_local = model.intermediate_size // tp
        widths = {
            TrtllmLoraModule.ATTN_Q: hidden + q_local,
            TrtllmLoraModule.ATTN_K: hidden + kv_local,
            TrtllmLoraModule.ATTN_V: hidden + kv_local,
            TrtllmLoraModule.ATTN_DENSE: hidden // tp + hidden,
            TrtllmLoraModule.MLP_H_TO_4H: hidden + mlp_local,
            TrtllmLoraModule.MLP_GATE: hidden + mlp_local,
            TrtllmLoraModule.MLP_4H_TO_H: mlp_local + hidden,
        }
        return widths[self]


# capplan's module groups -> TensorRT-LLM's modules; a Hugging Face adapter's q/k/v targets become attn_q/k/v, and
# any one of them brings the other two (lora_helper.py get_missing_qkv_modules_from_lora_modules)
_GROUP_MODULES = {
    LoraTarget.QKV: (TrtllmLoraModule.ATTN_Q, TrtllmLoraModule.ATTN_K, TrtllmLoraModule.ATTN_V),
    LoraTarget.OUT: (TrtllmLoraModule.ATTN_DENSE,),
    LoraTarget.GATE_UP: (TrtllmLoraModule.MLP_H_TO_4H, TrtllmLoraModule.MLP_GATE),
    LoraTarget.DOWN: (TrtllmLoraModule.MLP_4H_TO_H,),
}


def _refusal(model: ModelSpec, targets: frozenset[LoraTarget]) -> str | None:
    """Why TensorRT-LLM's cache cannot be sized for these targets on this model, None where it can."""
    unsupported = sorted(t.value for t in targets if t not in _GROUP_MODULES)
    if unsupported:
        return f"TensorRT-LLM has no LoRA module for {', '.join(unsupported)} (loraModule.cpp createLoraModules)"
    if model.num_experts and targets & {LoraTarget.GATE_UP, LoraTarget.DOWN}:
        return (
            "TensorRT-LLM's LoRA on MoE expert MLPs is not sized (loraModule.cpp sizes moe_* modules as hidden x "
            "num_experts, marked TODO(TRTLLM-379)); target the attention only (--lora-target-modules q_proj,k_proj,"
            "v_proj,o_proj)"
        )
    if model.is_mla and targets & {LoraTarget.QKV, LoraTarget.OUT}:
        return "TensorRT-LLM's LoRA on MLA attention is not sized (its attn_kv_a_mqa / attn_kv_b_proj modules)"
    if model.has_state_layers:  # the cache counts attention layers (getNbAttentionLayers), the request every layer
        return (
            "TensorRT-LLM's LoRA on hybrid state-space models is not sized (attention and Mamba layers counted apart)"
        )
    return None


@dataclass(frozen=True, slots=True)
class PeftPages:
    """The page geometry of one rank's PEFT cache (peftCacheManager.cpp getPageManagerConfig), from each module's
    in + out elements on the rank, the layers on the rank and the largest rank served."""

    widths: tuple[int, ...]
    local_layers: int
    rank: int

    @property
    def page_width(self) -> int:
        """A slot: the narrowest module's in + out elements."""
        return min(self.widths)

    @property
    def slots_per_page(self) -> int:
        """optimal_adapter_size x every module's slots x the local layers, at least one largest module at
        max_adapter_size."""
        optimal, largest = min(OPTIMAL_ADAPTER_SIZE, self.rank), min(MAX_ADAPTER_SIZE, self.rank)
        per_layer = sum(optimal * cdiv(w, self.page_width) for w in self.widths)
        return max(per_layer * self.local_layers, cdiv(largest * max(self.widths), self.page_width))

    @property
    def adapter_elements(self) -> int:
        """maxLoraSize: one adapter at max_adapter_size over every module and local layer ("Max LoRA size is")."""
        return min(MAX_ADAPTER_SIZE, self.rank) * sum(self.widths) * self.local_layers

    def slots_for(self, adapters: int, num_layers: int) -> int:
        """max_loras (or max_cpu_loras) adapters: `num_*_module_layer` = rank x layers x modules x adapters, each a
        largest module's slots (getMaxNumSlots)."""
        return self.rank * num_layers * len(self.widths) * adapters * cdiv(max(self.widths), self.page_width)

    def slots_in(self, cache_bytes: float, dtype_bytes: int) -> int:
        """A byte size's whole slots (getMaxNumSlots: memory / pageWidthSize)."""
        return int(cache_bytes // (self.page_width * dtype_bytes))

    def cache_bytes(self, slots: int, dtype_bytes: int) -> int:
        """Whole pages of the model dtype: ceil(slots / slotsPerPage) pages."""
        return cdiv(slots, self.slots_per_page) * self.slots_per_page * self.page_width * dtype_bytes

    def adapters_held(self, slots: int) -> int:
        """ "LoRA device Cache can hold N max sized LoRAs": the pages' elements over one adapter's."""
        return cdiv(slots, self.slots_per_page) * self.slots_per_page * self.page_width // self.adapter_elements


def trtllm_peft_cache(
    model: ModelSpec, spec: LoraSpec, tp: int, pp: int, dtype_bytes: int, free_bytes: int
) -> LoraMemory:
    """The PEFT cache `spec` asks TensorRT-LLM for on one rank. `free_bytes`: the memory free when the cache is
    made (weights loaded), which the default device cache takes a share of. SpecError with the engine's reason
    where it cannot be sized or would not start."""
    targets = spec.targets() or frozenset(LINEAR_TARGETS)
    reason = _refusal(model, targets)
    if reason:
        raise SpecError(reason)
    modules = [m for group in sorted(targets) for m in _GROUP_MODULES[group]]
    rank = spec.max_lora_rank or DEFAULT_RANK
    pages = PeftPages(tuple(m.local_width(model, tp) for m in modules), max(pp_partition(model.num_layers, pp)), rank)
    if spec.max_loras:
        device_slots = pages.slots_for(spec.max_loras, model.num_layers)
    else:
        device_slots = pages.slots_in(DEVICE_CACHE_PERCENT * max(free_bytes, 0), dtype_bytes)
    if spec.max_cpu_loras:
        host_slots = pages.slots_for(spec.max_cpu_loras, model.num_layers)
    else:
        host_slots = pages.slots_in(HOST_CACHE_BYTES, dtype_bytes)
    needed = cdiv(pages.adapter_elements, pages.page_width)
    if device_slots < needed:
        raise SpecError(
            f"TensorRT-LLM would not start: its LoRA device cache holds {device_slots:,} slots, fewer than one adapter "
            f"of rank {min(MAX_ADAPTER_SIZE, rank)} needs ({needed:,}; peftCacheManager.cpp getPageManagerConfig)"
        )
    device, host = pages.cache_bytes(device_slots, dtype_bytes), pages.cache_bytes(host_slots, dtype_bytes)
    held = pages.adapters_held(device_slots)
    source = f"max_loras {spec.max_loras}" if spec.max_loras else f"{DEVICE_CACHE_PERCENT:.0%} of the free memory"
    notes = [
        f"LoRA (TensorRT-LLM PEFT cache, {source}): {device / GIB:.3f} GiB per GPU on {', '.join(modules)}, "
        f"counted with the weights (before the KV cache); it holds {held} adapter(s) of rank "
        f"{min(MAX_ADAPTER_SIZE, rank)}; host cache {host / GIB:.3f} GiB"
    ]
    if spec.max_lora_rank is None:
        notes.append(f"LoRA rank {rank}: TensorRT-LLM's LoraConfig.max_lora_rank default")
    if not spec.target_modules:
        notes.append("LoRA targets assumed q/k/v/o and gate/up/down (the engine reads them from the adapters)")
    return LoraMemory(held, rank, dtype_bytes, device, 0, 0, host, tuple(notes))
