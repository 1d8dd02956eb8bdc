"""Domain types of the capacity engine: a model as a list of layers, a GPU, a deployment.

Frozen dataclasses, no I/O. Everything downstream (memory math, the grid, the registry rows)
is derived from these, so they carry exactly the facts a config.json or a SKU sheet states.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from capacity.features.prefix_caching import NO_PREFIX_CACHING_STATED, PrefixCaching

# KVKind and StateMixer are re-exported: the kinds' enums, named where the domain types are
from capacity.features.speculative import SpecMethod, SpeculativeSpec
from capacity.kv.kinds import KVKind as KVKind
from capacity.kv.kinds import LayerCache
from capacity.kv.kinds import StateMixer as StateMixer
from capacity.memo import per_object

if TYPE_CHECKING:  # these feature specs' modules import this module (through capacity.engines or its types)
    from capacity.features.lora_spec import LoraSpec
    from capacity.features.offload import ExpertOffload, KVOffload, WeightOffload


@dataclass(frozen=True, slots=True)
class LayerKVSpec:
    """One decoder layer that has a token mixer: its index and its cache, an instance of its kind's
    class (`capacity.kv.kinds`), which holds that kind's fields and answers its rules."""

    index: int
    cache: LayerCache

    @property
    def kind(self) -> KVKind:
        """The kind's enum value (what the registry's tables and the JSON contract carry)."""
        return self.cache.kind


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameter counts of one decoder layer, split by how they quantize and shard."""

    attention: int = 0  # q/k/v/o (incl. MLA's up-projections, biases) or the SSM/GDN mixer: split by TP
    mlp: int = 0  # dense MLP, or the shared experts of an MoE layer
    experts: int = 0  # routed experts (all of them)
    router: int = 0  # MoE gate (kept in high precision by every quantizer we know)
    norms: int = 0  # layer norms and other 16-bit parts kept whole on every rank (never quantized)
    # attention projections every TP rank keeps whole, quantized like the rest of attention: MLA's q_a / kv_a
    # down-projections and DSA's indexer (vLLM and SGLang build them as ReplicatedLinear)
    replicated_attention: int = 0
    # router parameters the engines keep in fp32 whatever the checkpoint's dtype, whole on every rank (vLLM's and
    # SGLang's noaux_tc score-correction bias; GLM-4.5's and MiniMax-M2's whole gate); not in `router`
    fp32_router: int = 0

    @property
    def total(self) -> int:
        parts = (self.attention, self.mlp, self.experts, self.router, self.fp32_router, self.norms)
        return sum(parts) + self.replicated_attention


class VisionProcessor(StrEnum):
    """Whose processing rules size a tower's largest image and video (vLLM's `*ProcessingInfo`)."""

    QWEN2_VL = "qwen2_vl"  # Qwen2-VL / Qwen2.5-VL: the video at the image's size, frames grown to max_model_len
    QWEN3_VL = "qwen3_vl"  # Qwen3-VL: the video processor's own total-pixel budget


@dataclass(frozen=True, slots=True)
class VisionTower:
    """A multimodal checkpoint's vision encoder as an engine's profiling run exercises it: its size, the
    widths of one encoder layer, and what its processor makes of the largest item (the processor's
    default sizes, from the published preprocessor configs) -- what the encoder cache and the dummy-input
    pass scale with (`capacity.engines.vllm.multimodal` applies each release's rules)."""

    params: int  # tower + projector(s), already inside ModelSpec.extra_params
    hidden_size: int
    num_layers: int
    intermediate_size: int
    gated_mlp: bool  # gate/up projection (2 x intermediate) + SiLU-and-mul, else fc1 + activation
    patch_elements: int  # channels x temporal patch x patch^2: one patch's input values
    patches_per_token: int  # encoder positions per language-model token (spatial merge^2)
    output_width: int  # values per LM token the encoder returns (text hidden, x deepstack levels)
    processor: VisionProcessor
    unit_pixels: int  # patch x spatial merge: the side of one LM token's square
    temporal_patch: int  # frames per temporal patch
    image_max_pixels: int  # the image processor's largest image (max_pixels / size.longest_edge)
    video_max_pixels: int  # the video processor's size.longest_edge (Qwen3-VL: over all frames)


@dataclass(frozen=True, slots=True)
class VisionTowerShape:
    """A multimodal checkpoint's `vision_config` depth and width as an engine's config class reads them
    (the JSON's values, else the transformers class defaults; None where the class has no such attribute):
    SGLang sizes its memory fraction by them."""

    num_layers: int | None
    hidden_size: int | None


@dataclass(frozen=True, slots=True)
class CheckpointQuant:
    """How the published checkpoint stores its weights (from `quantization_config`)."""

    method: str  # fp8 | int8 | awq | gptq | mxfp4 | compressed-tensors | bitsandbytes ...
    weight_format: str  # the capacity engine's weight dtype: fp8 | int8 | int4 | mxfp4
    group_size: int | None = None
    # the KV cache format the checkpoint declares for itself ("fp8": ModelOpt's `kv_cache_quant_algo` FP8, or a static
    # 8-bit float `kv_cache_scheme`), which some engine releases run `--kv-cache-dtype auto` as; None: none declared
    kv_cache_format: str | None = None
    attention_quantized: bool = True  # False when the checkpoint keeps every attention projection 16-bit
    mlp_quantized: bool = True  # False when it keeps the dense MLP and the shared experts 16-bit
    group_zero_points: bool = True  # int4: a packed zero point per group (AWQ, GPTQ, asymmetric compressed-tensors)

    @property
    def experts_only(self) -> bool:
        """Only the routed experts are quantized (gpt-oss's MXFP4, Kimi-K2-Thinking's INT4)."""
        return not self.attention_quantized and not self.mlp_quantized


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Everything capacity planning needs to know about one model, normalized across families."""

    model_type: str
    architecture: str
    family: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    max_position_embeddings: int
    context_limit_tokens: int  # max_position_embeddings, or what rope scaling extends it to (vLLM 0.30+'s rule)
    torch_dtype: str  # bfloat16 | float16 | float32
    tie_word_embeddings: bool
    layers: tuple[LayerKVSpec, ...]
    layer_params: tuple[LayerParams, ...]
    embedding_params: int
    lm_head_params: int  # 0 when tied to the embeddings
    final_norm_params: int
    extra_params: int = 0  # beyond the decoder: MTP modules, vision tower, per-layer embeddings
    loaded_extra_params: int = 0  # the part of extra_params a serving engine loads (not MTP heads)
    num_experts: int = 0
    num_experts_per_token: int = 0
    quantization: CheckpointQuant | None = None
    mamba_ssm_cache_dtype: str = "float32"
    mamba_ssm_dtype_stated: bool = False  # the config says the SSM state dtype (else engines choose)
    is_generic: bool = False  # parsed by the generic path: the model_type was not recognized
    vision_tower: VisionTowerShape | None = None  # the `vision_config` (None: none in the config)
    notes: tuple[str, ...] = field(default_factory=tuple)
    # the vision encoder where the checkpoint has one; `multimodal` with no tower: one the parser cannot size
    vision: VisionTower | None = None
    multimodal: bool = False  # the checkpoint carries a vision_config (sized or not)
    # multi-token-prediction layers (num_nextn_predict_layers / mtp_num_hidden_layers) and the parameters an
    # engine loads for them when speculative decoding runs them (the embedding and lm_head it shares excluded)
    mtp_layers: int = 0
    mtp_params: int = 0
    # the limit vLLM up to 0.29 derived where it differs from `context_limit_tokens` (a YaRN entry: the original
    # length times the factor; None: the same); `EngineProfile.context_limit` answers per release
    context_limit_vllm_029_tokens: int | None = None

    @property
    def total_params(self) -> int:
        return (
            self.embedding_params
            + self.lm_head_params
            + self.final_norm_params
            + self.extra_params
            + sum(p.total for p in self.layer_params)
        )

    @property
    def active_params(self) -> int:
        """Parameters touched per token (MoE: only the routed experts a token uses)."""
        if not self.num_experts:
            return self.total_params
        unused = sum(p.experts - p.experts * self.num_experts_per_token // self.num_experts for p in self.layer_params)
        return self.total_params - unused

    def kind_counts(self) -> dict[KVKind, int]:
        counts: dict[KVKind, int] = {}
        for layer in self.layers:
            counts[layer.kind] = counts.get(layer.kind, 0) + 1
        return counts

    @property
    def is_mla(self) -> bool:
        return _layer_facts(self)[0]

    @property
    def has_state_layers(self) -> bool:
        return _layer_facts(self)[1]

    @property
    def has_window_layers(self) -> bool:
        """Some layer keeps a window of tokens (sliding or chunked-local attention)."""
        return _layer_facts(self)[2]

    @property
    def has_indexer(self) -> bool:
        """Some layer keeps a sparse-attention indexer cache beside its KV (DeepSeek-V3.2's DSA)."""
        return _layer_facts(self)[3]

    @property
    def state_mixers(self) -> frozenset[StateMixer]:
        """The kinds of state mixer the model's state layers run (empty without state layers)."""
        return _layer_facts(self)[4]


def _layer_facts(spec: ModelSpec) -> tuple[bool, bool, bool, bool, frozenset[StateMixer]]:
    """(is_mla, has_state_layers, has_window_layers, has_indexer, state_mixers), read once per spec object: the
    planners ask them per GPU, TP and dtype."""
    return per_object(
        spec,
        ("layer_facts",),
        lambda: (
            any(layer.cache.latent for layer in spec.layers),
            any(layer.cache.holds_state for layer in spec.layers),
            any(layer.cache.windowed for layer in spec.layers),
            any(layer.cache.indexer_bytes_per_token for layer in spec.layers),
            frozenset(layer.cache.state_mixer for layer in spec.layers if layer.cache.state_mixer is not None),
        ),
    )


class PriceBasis(StrEnum):
    """What a GPU's price rests on: procurement buys only what someone can actually pay by default."""

    LIST = "list"  # a provider's published on-demand (or committed) price that can be looked up
    CONTRACT = "contract"  # the user's own quote or negotiated price (their catalog)
    ESTIMATE = "estimate"  # no public list price: a guess, bought only when the workloads file opts in

    @property
    def buyable_by_default(self) -> bool:
        """A price someone can pay (list or contract), so the default plan may buy at it."""
        return self is not PriceBasis.ESTIMATE


# the lowest compute capability of each NVIDIA architecture in the GPU catalog (A10/A40 are 8.6, RTX Ada 8.9,
# RTX Pro Blackwell 12.0: a lower bound is what a minimum-capability check needs)
_NVIDIA_CAPABILITY = {
    "volta": 70,
    "turing": 75,
    "ampere": 80,
    "ada": 89,
    "hopper": 90,
    "blackwell": 100,
    "blackwell_ultra": 103,
}


@dataclass(frozen=True, slots=True)
class GpuSku:
    """One accelerator model as the serving engine sees it."""

    id: str
    name: str
    vendor: str
    memory_total_bytes: int  # what the driver reports to the engine, not the marketing number
    memory_total_mib_smi: int | None = None  # nvidia-smi memory.total (what SGLang sizes its defaults by)
    memory_bandwidth_gbps: float | None = None
    bf16_dense_tflops: float | None = None
    fp8_dense_tflops: float | None = None
    fp4_dense_tflops: float | None = None
    fp8_support: bool = False
    fp4_support: bool = False
    int8_support: bool = True
    gpus_per_node: int = 8
    interconnect: str | None = None
    interconnect_gbps: float | None = None
    price_usd_per_gpu_hour: float | None = None
    architecture: str | None = None
    aliases: tuple[str, ...] = ()
    price_basis: PriceBasis | None = None  # what price_usd_per_gpu_hour rests on (None: no price)
    max_gpus_available: int | None = None  # GPUs obtainable at that price (None: no limit known)

    @property
    def unified_memory(self) -> bool:
        """A GPU that shares the host's memory (DGX Spark's GB10, Jetson Thor / Orin: vLLM 0.12's list of
        sm 12.1 / 11.0 / 8.7, the device's `is_integrated` in later releases): the engines read its free memory
        as the host's available memory. GH200 / GB200 have their own HBM and are not."""
        names = (self.id, self.name, *self.aliases)
        return any(
            token in name.lower().replace(" ", "").replace("-", "")
            for name in names
            for token in ("gb10", "dgxspark", "jetson", "agxthor", "agxorin")
        ) and not any("gb100" in name.lower() for name in names)

    @property
    def priced_to_buy(self) -> bool:
        """Priced at what someone can pay (a list or contract price): what plans buy unless a user opts in to
        estimated prices."""
        return self.price_basis is not None and self.price_basis.buyable_by_default

    @property
    def amd(self) -> bool:
        """An AMD GPU: ROCm's engines, RCCL and HIP graphs instead of CUDA's."""
        return self.vendor.lower() == "amd"

    @property
    def compute_capability(self) -> int | None:
        """The lowest CUDA compute capability of the architecture (major x 10 + minor, as vLLM's
        `DeviceCapability.to_int()`), for the engines' `get_min_capability` checks; None off NVIDIA or
        for an architecture capplan does not know (then nothing is refused on it)."""
        if self.vendor.lower() != "nvidia":
            return None
        return _NVIDIA_CAPABILITY.get((self.architecture or "").lower())

    @property
    def geforce(self) -> bool:
        """A GeForce card: the stock driver refuses GPU peer access over PCIe (patched drivers aside)."""
        return "geforce" in self.name.lower()

    @property
    def nvlink_multicast(self) -> bool:
        """GPUs joined by an NVLink4/5 switch fabric (H100/H200/B200 SXM, GB200/GB300): where NCCL's NVLink
        SHARP (NVLS) buffers and the NVLink all-reduce workspaces are allocated at TP > 1. PCIe cards, NVLink
        bridges and pre-Hopper NVLink have neither, and their TP > 1 non-torch memory stays the TP = 1 figure."""
        link = (self.interconnect or "").lower()
        arch = (self.architecture or "").lower()
        return (
            self.vendor.lower() == "nvidia"
            and arch.startswith(("hopper", "blackwell"))
            and link.startswith("nvlink")
            and "bridge" not in link
            and not link.startswith("nvlink-c2c")
        )

    @property
    def peer_link_gpus(self) -> int:
        """How many GPUs of a node have a direct NVLink (AMD: XGMI) link between every pair of them, read from
        `interconnect`: the whole node on an NVLink switch fabric or an Infinity Fabric mesh (A100/H100/H200/
        B200 SXM, GB200/GB300, MI300-class), 4 on V100 SXM2 (the hybrid cube mesh joins quads), 2 on NVLink-
        bridged pairs sold bridged (H100/H200 NVL), 1 elsewhere: PCIe cards, where a bridge is only optional,
        and NVLink-C2C. PCIe peer access is assumed off: GeForce drivers refuse it and on data-centre cards it
        depends on the host (IOMMU/ACS, VMs); the public L40S TP 2 log says "no P2P". vLLM's custom
        all-reduce needs these links (capacity/engines/vllm/overhead.py custom_all_reduce_on)."""
        link = (self.interconnect or "").lower()
        arch = (self.architecture or "").lower()
        if self.amd:
            return self.gpus_per_node if "infinity fabric" in link else 1
        if self.vendor.lower() != "nvidia" or not link.startswith("nvlink") or link.startswith("nvlink-c2c"):
            return 1
        if "bridge" in link:
            return min(2, self.gpus_per_node)
        return min(4, self.gpus_per_node) if arch == "volta" else self.gpus_per_node


@dataclass(frozen=True, slots=True)
class DeploymentSpec:
    """How a model is served: parallelism, dtypes, engine settings and what-if overrides.

    `None` means "the engine profile's default" everywhere.
    """

    tp: int = 1
    pp: int = 1
    weight_dtype: str = "auto"  # auto | bf16 | fp16 | float32 | fp8 | int8 | int4 | mxfp4
    kv_dtype: str = "auto"  # auto | bf16 | fp16 | float32 | fp8 | fp8_e4m3 | fp8_e5m2 | int8
    engine: str = "vllm"  # vllm | sglang | trtllm | plain
    engine_version: str | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    async_scheduling: bool | None = None  # None: the engine's default (vLLM: on for GPUs; the CPU build: off)
    enforce_eager: bool | None = None  # no CUDA graphs: none captured, none deducted (vLLM --enforce-eager)
    # the largest decode batch CUDA graphs are captured for (SGLang --cuda-graph-max-bs-decode, before 0.5.14
    # --cuda-graph-max-bs, or the largest of --cuda-graph-bs[-decode]); None: the engine's default
    cuda_graph_max_batch: int | None = None
    # LoRA adapters served (--enable-lora and its settings): their slots are sized (capacity/features/lora.py)
    lora: LoraSpec | None = None
    # engine features that move the memory and that capplan does not size: a deployment that declares
    # one is flagged `not_modelled` (sized as if the feature were off), never silently
    weight_offload: WeightOffload | None = None  # --cpu-offload-gb: weights kept in host memory (features.offload)
    expert_offload: ExpertOffload | None = None  # KTransformers (--kt-weight-path): routed experts run on the CPU
    # speculative decoding: the method and draft, sized by `capacity.features.speculative_memory`
    speculative: SpeculativeSpec | None = None
    kv_offload: KVOffload | None = None  # a KV tier behind the GPU pool: vLLM offloading/LMCache, HiCache, TRT-LLM host
    # prefix caching (on by default in vLLM, SGLang, TensorRT-LLM): a shared prefix held once, the hit rate
    prefix_caching: PrefixCaching = NO_PREFIX_CACHING_STATED
    # whether gpt-oss's MXFP4 experts on Hopper run the OAI Triton kernels: the optional `triton_kernels`
    # package installed beside vLLM 0.10.2-0.11.x (bundled from 0.12); False: Marlin (the package missing, or
    # VLLM_MXFP4_USE_MARLIN=1); None: a plain install with default settings
    triton_kernels: bool | None = None
    # vLLM's custom all-reduce at TP > 1 (else the CUDA graphs capture NCCL's all-reduce): off with
    # --disable-custom-all-reduce; at TP 2 on PCIe it runs where the GPUs have peer access (vLLM's P2P test),
    # which capplan does not assume (None: GpuSku.peer_link_gpus decides)
    disable_custom_all_reduce: bool | None = None
    gpu_peer_access: bool | None = None
    # the engine's override for a max_model_len beyond the model's limit is set (vLLM
    # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, SGLang SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1): else it refuses to start
    allow_long_max_model_len: bool = False
    vllm_v0_engine: bool = False  # VLLM_USE_V1=0: the V0 engine vLLM 0.8-0.10 keep beside V1
    # vLLM 0.34+'s extensible KV cache (--enable-extensible-kv-cache / --no-...): None, the release's default (on);
    # False sizes it from the profiling run as before, at the 0.92 default utilization
    extensible_kv_cache: bool | None = None
    # a multimodal model served text-only (vLLM --language-model-only, or --limit-mm-per-prompt 0 for every
    # modality: `mm_limits`): no encoder profiling, and from vLLM 0.11 no tower weights
    mm_text_only: bool | None = None
    mm_limits: tuple[tuple[str, int], ...] = ()  # vLLM --limit-mm-per-prompt: items per prompt by modality
    # DP attention, expert parallel, decode context parallel (`capacity.features.parallel_layout` reads them per
    # engine): attention data-parallel ranks (a KV pool and a scheduler each), the expert-parallel width (1:
    # experts split by tensor parallel), the GPUs one request's KV is split over
    dp: int = 1
    ep: int = 1
    dcp: int = 1
    redundant_experts: int = 0  # EPLB's extra physical experts (vLLM --eplb-config, SGLang --ep-num-redundant-experts)

    def all_reduce_peer_gpus(self, gpu_peer_link_gpus: int | None) -> int | None:
        """The GPUs among which vLLM's custom all-reduce can run for this deployment (the `peer_link_gpus`
        its rule reads): the GPU's NVLink group; 1 (each GPU alone, so never at TP > 1) when disabled or
        without peer access; the pair at TP 2 with peer access over PCIe."""
        if self.disable_custom_all_reduce or self.gpu_peer_access is False:
            return 1
        if self.gpu_peer_access and self.tp == 2 and gpu_peer_link_gpus is not None:
            return max(gpu_peer_link_gpus, 2)
        return gpu_peer_link_gpus

    def unmodelled_features(self) -> tuple[str, ...]:
        """The declared features capplan does not size, as the estimate names them."""
        named = (
            (self.weight_offload, self.weight_offload.unmodelled() if self.weight_offload else None),
            (
                self.speculative is not None and self.speculative.method is SpecMethod.UNKNOWN,
                "speculative decoding of an unstated method (the draft's weights and KV)",
            ),
            (self.kv_offload, self.kv_offload.unmodelled() if self.kv_offload else None),
            (self.expert_offload, self.expert_offload.unmodelled() if self.expert_offload else None),
        )
        return tuple(text for flag, text in named if flag and text)

    gpu_memory_bytes: int | None = None  # override the device total
    weights_bytes_per_gpu: int | None = None  # override the weights
    overhead_bytes_per_gpu: int | None = None  # override every non-KV, non-weight term
    kv_cache_memory_bytes: int | None = None  # use this KV budget per GPU (vLLM --kv-cache-memory-bytes)
    max_total_tokens: int | None = None  # SGLang --max-total-tokens: caps the token pool (features.kv_budget)
    # memory other processes (another engine, a notebook, the host itself on a unified-memory GPU) hold on
    # each GPU when the engine starts: each engine and release counts it its way (`kv_budget`)
    other_process_bytes: int = 0


class SpecError(ValueError):
    """A model, GPU or deployment that cannot be planned, with a one-line reason for the user."""
