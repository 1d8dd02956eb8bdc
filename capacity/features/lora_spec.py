"""The LoRA settings a deployment declares (`DeploymentSpec.lora`) and what they take (`LoraMemory`): types
only, below `capacity.spec`, so the deployment can carry them; the sizing is `capacity.features.lora`'s (and
`lora_trtllm`'s for TensorRT-LLM's PEFT cache)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class LoraTarget(StrEnum):
    """A module group that can carry LoRA, under the names the engines' packed modules use."""

    QKV = "qkv_proj"
    OUT = "o_proj"
    GATE_UP = "gate_up_proj"
    DOWN = "down_proj"
    ROUTER = "gate"
    EMBED = "embed_tokens"
    LM_HEAD = "lm_head"


LINEAR_TARGETS = (LoraTarget.QKV, LoraTarget.OUT, LoraTarget.GATE_UP, LoraTarget.DOWN)
# PEFT / engine spellings -> the group they fall in (SGLang lora/utils.py get_normalized_target_modules; vLLM
# wraps a packed module when any of its parts is targeted, model_manager.py _create_lora_modules)
_ALIASES = {
    **dict.fromkeys(("q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "c_attn", "wqkv"), LoraTarget.QKV),
    **dict.fromkeys(("o_proj", "out_proj", "dense", "c_proj", "wo"), LoraTarget.OUT),
    **dict.fromkeys(("gate_proj", "up_proj", "gate_up_proj", "w1", "w3", "fc1"), LoraTarget.GATE_UP),
    **dict.fromkeys(("down_proj", "w2", "fc2"), LoraTarget.DOWN),
    "gate": LoraTarget.ROUTER,
    **dict.fromkeys(("embed_tokens", "word_embeddings", "embeddings", "wte"), LoraTarget.EMBED),
    **dict.fromkeys(("lm_head", "output"), LoraTarget.LM_HEAD),
}
_ALL = ("all", "all-linear")
LORA_DTYPES = ("auto", "float16", "bfloat16", "fp16", "bf16")  # vLLM config/lora.py LoRADType


@dataclass(frozen=True, slots=True)
class LoraSpec:
    """The LoRA settings a server starts with (None: the engine's default).

    vLLM: --max-loras (slots on the GPU), --max-lora-rank, --max-cpu-loras, --lora-dtype,
    --lora-target-modules, --fully-sharded-loras. SGLang: --max-loras-per-batch (slots), --max-lora-rank,
    --max-loaded-loras (adapters in host memory), --lora-target-modules. A module name no engine knows, or a
    dtype no engine takes, is a ValueError when the spec is built, so a spec that exists can be sized."""

    max_loras: int | None = None
    max_lora_rank: int | None = None
    max_cpu_loras: int | None = None
    lora_dtype: str = "auto"  # auto (the model's dtype) | float16 | bfloat16
    target_modules: tuple[str, ...] = ()  # () : the engine's default (vLLM: every supported module)
    fully_sharded: bool = False  # vLLM --fully-sharded-loras: A's rank (column) / B's output (row) split by TP

    def __post_init__(self) -> None:
        unknown = [name for name in self.target_modules if name not in _ALIASES and name not in _ALL]
        if unknown:
            raise ValueError(f"unknown LoRA target module {unknown[0]!r} (e.g. q_proj, o_proj, gate_proj, all)")
        if self.lora_dtype not in LORA_DTYPES:
            raise ValueError(f"--lora-dtype must be one of {', '.join(LORA_DTYPES)}, got {self.lora_dtype!r}")

    def targets(self) -> frozenset[LoraTarget] | None:
        """The module groups named, None where none is (the engine's default), "all": every linear one plus
        the embedding and head (SGLang's auto-detection)."""
        if not self.target_modules:
            return None
        if any(name in _ALL for name in self.target_modules):
            return frozenset(LoraTarget)
        return frozenset(_ALIASES[name] for name in self.target_modules)


@dataclass(frozen=True, slots=True)
class LoraMemory:
    """What a LoRA spec takes per GPU (the most loaded pipeline stage) and per worker in host memory."""

    slots: int
    rank: int
    dtype_bytes: int
    slot_bytes_per_gpu: int  # the stacked A/B buffers of every targeted module
    metadata_bytes_per_gpu: int  # the punica wrapper's index tensors
    shrink_buffer_bytes_per_gpu: int  # the profiling run's float32 shrink buffer (beside the MLP's activations)
    host_bytes_per_gpu: int  # the adapters a worker keeps in host memory (--max-cpu-loras), whole (unsharded)
    notes: tuple[str, ...]
    not_modelled: str | None = None  # the engine's LoRA cache was not read from its source

    @property
    def charged_bytes_per_gpu(self) -> int:
        """What the KV budget loses before it is formed: the slots and the metadata."""
        return self.slot_bytes_per_gpu + self.metadata_bytes_per_gpu
