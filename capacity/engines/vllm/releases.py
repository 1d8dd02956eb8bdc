"""vLLM's release-dependent defaults: batch limits, block sizes, batches in flight, GDN prefill checkpoints.

Rules followed, by upstream function (vLLM 0.33.0 unless a release row says otherwise):
`engine/arg_utils.py` get_batch_defaults (by device memory and name; from 0.22 a prefix-LM multimodal model's
floor, `multimodal_batched_floor`), `platforms/cuda.py` block sizes
(16; MLA backends' kernel blocks by release and GPU, `block_size`), V0 MLA's padded cache entry
(`vllm_page_bytes_per_token`), `config/vllm.py`
VllmConfig.max_concurrent_batches; other processes' memory by release (`OtherProcessRule`, read in the
0.4.0.post1, 0.6.1-0.6.5, 0.7.0, 0.7.3, 0.8.0, 0.8.5, 0.9.0-0.9.2, 0.10.0, 0.15.0, 0.33.0 and 0.34.0 wheels).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from capacity import engine_constants as ec
from capacity.kv.kinds import LatentAttention, LayerCache
from capacity.memo import per_object
from capacity.numeric import cdiv
from capacity.spec import GpuSku, ModelSpec, StateMixer

if TYPE_CHECKING:
    from capacity.engines.protocol import DefaultsRequest


def max_concurrent_batches(release: ec.VllmRelease, pp: int, async_scheduling: bool | None) -> int:
    """`VllmConfig.max_concurrent_batches`: async scheduling (on by default on GPUs) keeps a second
    batch in flight; the V2 model runner (every model's from 0.29) adds one to PP; off (the CPU build): PP.
    On 0.25-0.28 the dense models already run V2 (ec.VLLM_RUNNER_RULES) while this takes the release's V1
    rule: the PP > 1 windowed charge of those is one batch short (not modelled per model)."""
    if release.in_flight is ec.InFlightRule.ONE_BATCH:
        return 1
    if async_scheduling is False:
        return pp
    if release.in_flight is ec.InFlightRule.V2_RUNNER:
        return pp + 1
    return 2 if pp <= 1 else pp


def _is_gb10(gpu: GpuSku | None) -> bool:
    """DGX Spark (GB10, compute capability 12.1): large memory, small-GPU batch defaults."""
    if gpu is None:
        return False
    return per_object(  # per GPU object: asked for every deployment setting of the grid
        gpu,
        ("vllm/gb10",),
        lambda: any(
            name.lower().replace(" ", "").replace("-", "").startswith(("gb10", "nvidiagb10"))
            and "gb100" not in name.lower()
            for name in (gpu.id, gpu.name, *gpu.aliases)
        ),
    )


def _device_named(gpu: GpuSku | None, names: tuple[str, ...]) -> bool:
    """Whether the GPU's device name holds one of `names` (vLLM tests torch's name, e.g. "NVIDIA H100 80GB HBM3";
    the catalog's id, name and aliases stand for it). An unknown GPU: no (vLLM's fallback on a failed query)."""
    if gpu is None:
        return False
    return any(name in text.lower() for text in (gpu.id, gpu.name, *gpu.aliases) for name in names)


def batch_defaults(
    release: ec.VllmRelease,
    gpu: GpuSku | None,
    gpu_memory_bytes: int,
    max_model_len: int,
    v0_batched_tokens: int | None = None,
) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) that `vllm serve` picks when not given; on a V0 release the
    batch is `v0_batched_tokens` (`v0_batched_tokens`), max(max_model_len, 2048) where it is not given."""
    rule = release.batch_defaults
    huge, big, small = ec.VLLM_BATCH_DEFAULTS[rule]
    is_a100 = gpu is not None and ("a100" in gpu.id.lower() or "a100" in gpu.name.lower())
    if rule in ec.VLLM_BATCH_BY_DEVICE_NAME:
        seqs, batched = big if _device_named(gpu, ec.VLLM_BATCH_DEVICE_NAMES) else small
    elif gpu_memory_bytes >= ec.VLLM_HUGE_GPU_MIN_BYTES:
        seqs, batched = huge
    elif (
        gpu_memory_bytes >= ec.VLLM_BIG_GPU_MIN_BYTES
        and (not is_a100 or rule in ec.VLLM_BATCH_A100_IS_BIG)
        and not (rule is ec.BatchDefaults.V1_BY_GPU_160_GB10 and _is_gb10(gpu))
    ):
        seqs, batched = big
    else:
        seqs, batched = small
    if batched is None:
        batched = v0_batched_tokens if v0_batched_tokens is not None else max(max_model_len, 2048)
    return seqs, batched


V0_LONG_CONTEXT_TOKENS = 32768  # arg_utils: `use_long_context = max_model_len > 32768`


def v0_batched_tokens(version: str | None, request: DefaultsRequest) -> int:
    """The batch a V0 `vllm serve` profiles with where the user gives no max_num_batched_tokens nor chunked
    prefill (`ec.VLLM_V0_BATCH_RULES`, read release by release in the wheels): the chunk budget where the
    release turns chunked prefill on (only above 32,768 tokens, never for a model with a sliding window — V0's
    `get_sliding_window()`: the config's window on any layer — speculative decoding or LoRA, nor where the
    release's row keeps it off), else max(max_model_len, 2048); a multimodal model's at least its floor."""
    rule = ec.by_first_release(version, ec.VLLM_V0_BATCH_RULES, ec.VLLM_V0_BATCH_RULES[0][1])
    model, gpu = request.model, request.gpu
    multimodal = model.vision_tower is not None
    chunked = not (
        not rule.long_context_chunked
        or request.max_model_len <= V0_LONG_CONTEXT_TOKENS
        or model.has_window_layers
        or request.speculative is not None
        or request.lora
        or (rule.off_for_multimodal and multimodal)
        or (rule.off_for_mla and model.is_mla)
        or (rule.off_for_state_layers and model.has_state_layers)
        or (rule.off_with_prefix_caching and bool(request.prefix_caching))
        or (rule.off_on_rocm and gpu is not None and gpu.vendor == "amd")
    )
    batched = rule.chunk_tokens if chunked else max(request.max_model_len, 2048)
    return max(batched, rule.multimodal_min_tokens) if multimodal else batched


def multimodal_batched_floor(model: ModelSpec, release: ec.VllmRelease) -> int:
    """The tokens of the largest multimodal item a prefix-LM model must fit in one batch: the default
    max_num_batched_tokens is raised to it (`ec.VLLM_PREFIX_LM_MM_FLOOR_FROM`, 0.22 on). Gemma 4 served with its
    vision tower only (0 otherwise); with --language-model-only vLLM skips it (not an option here)."""
    if ec.parse_version(release.version) < ec.VLLM_PREFIX_LM_MM_FLOOR_FROM:
        return 0
    if model.family != "gemma4" or model.vision_tower is None:
        return 0
    return ec.VLLM_GEMMA4_VIDEO_ITEM_TOKENS


def block_size(model: ModelSpec, gpu: GpuSku | None, kv_dtype: str = "auto", version: str | None = None) -> int:
    """The release's default block (`VllmRelease.default_block_size`: 16, 64 from 0.34), or what the MLA backend's
    kernels need (`ec.VLLM_MLA_BLOCK_RULES`: `platforms/cuda.py` check_and_update_config before 0.18,
    `Platform.update_block_size_for_backend` from 0.18: the backend's `get_preferred_block_size(default)` keeps the
    default where its kernels take it). On ROCm the first non-MLA backend, ROCM_ATTN, prefers 16 whatever the default
    (0.34 `rocm_attn.get_preferred_block_size`, for its native kernel). Not modelled: 0.34's FlashAttention 4 pages
    for 256- and 512-wide heads where FA4 runs."""
    default = ec.vllm_release(version).default_block_size
    if not model.is_mla:
        return ec.VLLM_DEFAULT_BLOCK_SIZE if gpu is not None and gpu.amd else default
    # every MLA backend's kernels take the 0.34 default of 64 but CUTLASS MLA's (128 only)
    return max(_mla_block_size(model, gpu, kv_dtype, version), default)


def _mla_block_size(model: ModelSpec, gpu: GpuSku | None, kv_dtype: str, version: str | None) -> int:
    """The MLA backend's block at the 16 default (`block_size`)."""
    arch = (gpu.architecture or "").lower() if gpu is not None else "hopper"
    rule = ec.by_first_release(version, ec.VLLM_MLA_BLOCK_RULES, ec.MlaBlockRule.TRITON_ONLY)
    sm100 = arch == "blackwell" and not _is_sm120(gpu)
    dsa = model.has_indexer
    if model.has_state_layers and (hybrid_alignment := ec.by_first_release(version, ec.VLLM_MLA_HYBRID_ALIGNMENT, 0)):
        return hybrid_alignment  # the base the hybrid alignment (grouping.stage_pools) grows in steps of
    if rule is ec.MlaBlockRule.BACKEND_PRIORITY:
        return _backend_priority_block(arch, sm100, dsa, kv_dtype)
    if rule is ec.MlaBlockRule.TRITON_ONLY:  # 0.7.x `get_attn_backend_cls`: TritonMLABackend, block 16
        return ec.VLLM_DEFAULT_BLOCK_SIZE
    if dsa:  # 0.11-0.17 `use_sparse` (hf_config.index_topk) forces 64 after the backend's own block
        return ec.VLLM_DSA_BLOCK_SIZE
    if arch == "hopper":  # `is_flashmla_supported` (attention/ops/flashmla.py): capability 9.x only
        return ec.VLLM_MLA_BLOCK_SIZE_HOPPER
    if (
        sm100
        and rule is ec.MlaBlockRule.FLASHINFER_SM100
        and _qk_nope_head_dim(model) == ec.VLLM_MLA_SM100_FLASHINFER_NOPE_DIM
    ):
        return ec.VLLM_MLA_BLOCK_SIZE_HOPPER  # FlashInfer MLA: a block not 32 nor a multiple of 64 -> 64
    if sm100 and rule is not ec.MlaBlockRule.FLASHMLA_HOPPER:
        return ec.VLLM_MLA_BLOCK_SIZE_BLACKWELL  # CUTLASS_MLA: 128
    return ec.VLLM_DEFAULT_BLOCK_SIZE  # FlashMLA unsupported, no SM100 default: Triton MLA on 16


def _backend_priority_block(arch: str, sm100: bool, dsa: bool, kv_dtype: str) -> int:
    """0.18 on: the first backend of `_get_backend_priorities` that takes the layer, at its preferred block."""
    if dsa:
        # DSA: DeepseekV32IndexerBackend takes kernel blocks of 64 on CUDA, the sparse MLA backends
        # multiples of 64 (or 32): the common block is 64
        return ec.VLLM_DSA_BLOCK_SIZE
    if arch == "hopper":  # SM90: FLASH_ATTN_MLA (bf16/fp16 KV only, any multiple of 16), else FLASHMLA (64)
        return ec.VLLM_MLA_BLOCK_SIZE_HOPPER if kv_dtype.lower().startswith("fp8") else ec.VLLM_DEFAULT_BLOCK_SIZE
    if sm100:  # SM100: FLASHINFER_MLA (32 or 64)
        return ec.VLLM_FLASHINFER_MLA_BLOCK_SIZE
    return ec.VLLM_DEFAULT_BLOCK_SIZE  # TRITON_MLA (SM120, Ampere, Ada) and ROCm AITER MLA take 16


def _qk_nope_head_dim(model: ModelSpec) -> int:
    """The MLA layers' qk_nope_head_dim (0: not read)."""
    return max(
        (layer.cache.nope_head_dim for layer in model.layers if isinstance(layer.cache, LatentAttention)), default=0
    )


def vllm_page_bytes_per_token(
    cache: LayerCache,
    kv_bytes: int,
    act_bytes: int,
    tp: int,
    release: ec.VllmRelease,
    mla_heads: ec.MlaCacheLayout | None = None,
) -> int:
    """A layer's bytes per token in vLLM's cache: the kind's own page, except for DeepSeek MLA layers on releases
    without the latent cache (`mla_heads`, `mla_heads_layout`: K and V per KV head, `config_kv_heads` // TP heads of
    256 elements on 0.5.1-0.6.6, qk_nope + qk_rope on 0.7.0) and the V0 MLA entry of 0.7.2-0.7.3, padded
    to `release.mla_entry_align_bytes` of the model dtype (`worker/cache_engine.py` get_cache_block_size:
    `align_to_256bytes(num_heads * head_size, model_config.dtype)`, then x the cache dtype's size). DeepSeek-V3:
    576 elements -> 640 (256 B / 2 B = 128 elements a step), 1,280 B a token in bf16. The CUDA rule (`_align_cache`
    asks `current_platform.is_cuda()`): capplan applies it on every GPU, ROCm builds of 0.7.x included."""
    if mla_heads is not None and isinstance(cache, LatentAttention) and cache.config_kv_heads:
        padded = mla_heads is ec.MlaCacheLayout.HEADS_PADDED
        head_size = ec.VLLM_MLA_PADDED_HEAD_SIZE if padded else cache.nope_head_dim + cache.rope_head_dim
        return 2 * max(1, cache.config_kv_heads // tp) * head_size * kv_bytes  # ModelConfig.get_num_kv_heads
    page = cache.page_bytes_per_token(kv_bytes, tp)
    if not (cache.latent and release.mla_entry_align_bytes):
        return page
    step = release.mla_entry_align_bytes // act_bytes
    return cdiv(cache.kv_elements_per_token, step) * step * kv_bytes + cache.indexer_bytes_per_token


def mla_heads_layout(model: ModelSpec, version: str | None) -> ec.MlaCacheLayout | None:
    """How the release caches a DeepSeek model's MLA layers where it has no latent cache yet: K and V per KV head
    (`ec.VLLM_MLA_CACHE_RULES`, for the model types `get_head_size` pads); None: the latent (0.7.1 on, every other
    model, and below 0.5.1, which has no DeepSeek-V2 class: unread)."""
    if not model.is_mla or model.model_type not in ec.VLLM_HEAD_CACHED_MLA_TYPES:
        return None
    layout = ec.by_first_release(version, ec.VLLM_MLA_CACHE_RULES, ec.MlaCacheLayout.LATENT)
    return None if layout is ec.MlaCacheLayout.LATENT else layout


def _is_sm120(gpu: GpuSku | None) -> bool:
    """Workstation Blackwell (RTX PRO 6000, RTX 50xx: compute capability 12.x), not B200/GB200/B300."""
    return gpu is not None and any(word in gpu.id.lower() for word in ("rtx", "gb10"))


def gdn_prefill_checkpoints(model: ModelSpec, gpu: GpuSku | None, release: ec.VllmRelease) -> bool:
    """Gated-delta-net layers export prefill checkpoints in "align" mode when FlashInfer's GDN prefill
    kernel runs (0.33 `qwen_gdn_linear_attn._resolve_gdn_prefill_backend`: CUDA on Hopper, and Blackwell
    SM10.x / SM12.x with 128-dim key heads on CUDA 13; Triton elsewhere). Assumed here: every Blackwell
    GPU qualifies."""
    if not release.gdn_prefill_checkpoints or gpu is None or gpu.vendor.lower() != "nvidia":
        return False
    if (gpu.architecture or "").lower() not in ("hopper", "blackwell"):  # before the scan of the layers
        return False
    return StateMixer.GATED_DELTA_NET in model.state_mixers


class OtherProcessRule(Enum):
    """What memory other processes hold on the GPU when vLLM starts does to its KV pool, by release."""

    # v0 `worker.py` determine_num_available_blocks: 0.4.0-0.6.3 take peak = free at worker init - free after
    # profiling, 0.6.5-0.7.x `memory_profiling(baseline = total - free at init)`: what others held at init
    # is in no term, the pool is total x util - this instance's own use; nothing checks the free memory
    UNCHARGED = "uncharged"
    # v0 0.6.4 `worker.py` and the V1 `gpu_worker.py` of 0.8.0-0.9.0: non-torch memory read device-wide
    # (mem_get_info total - free - torch allocated), others' memory included: it comes off the pool
    CHARGED = "charged"
    # from 0.9.1 the V1 worker measures from a `MemorySnapshot` at init (non-torch increase over it) as
    # UNCHARGED, and refuses to start unless free memory at init >= total x util (0.33: `request_memory`)
    PER_INSTANCE_CHECKED = "per-instance, checked at start"
    # 0.34 with the extensible KV cache (`measure_kv_cache_bytes`): the cache is bounded by the free memory at init
    # too, so others' memory comes off where it leaves less than total x utilization (`VllmProfile.kv_budget`), and
    # `request_memory` no longer refuses to start when free memory is below the requested budget
    BOUNDED_BY_FREE_AT_INIT = "bounded by the free memory at init"


# (first release, rule), oldest first; a version takes the last row at or below it
_OTHER_PROCESS_RULES: tuple[tuple[str, OtherProcessRule], ...] = (
    ("0.4", OtherProcessRule.UNCHARGED),
    ("0.6.4", OtherProcessRule.CHARGED),
    ("0.6.5", OtherProcessRule.UNCHARGED),
    ("0.8", OtherProcessRule.CHARGED),  # the V1 engine is the default from 0.8.0
    ("0.9.1", OtherProcessRule.PER_INSTANCE_CHECKED),
    ("0.34", OtherProcessRule.BOUNDED_BY_FREE_AT_INIT),
)


def other_process_rule(version: str | None) -> OtherProcessRule:
    """How vLLM `version` (None: the newest supported) treats other processes' memory
    (`--gpu-memory-utilization` is a per-instance budget from 0.9.1; 0.6.4 and 0.8.0-0.9.0 took others'
    memory off the pool)."""
    return ec.by_first_release(version, _OTHER_PROCESS_RULES, _OTHER_PROCESS_RULES[0][1])
