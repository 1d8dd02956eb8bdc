"""SGLang's constants, each read in the release's wheel (python/sglang/srt/...) and named with where it
comes from: 0.5.23 unless a comment names older releases. Pure data; `capacity.engines.sglang` holds the rules
that read them."""

from __future__ import annotations

from dataclasses import dataclass

from capacity.engine_constants import GIB

# SGLang 0.5.23, read in the wheel (sglang-0.5.23-cp311, python/sglang/srt/...); the tables by release below
# name the older wheels they were read in.
SGLANG_VERSION = "0.5.23"
SGLANG_DEFAULT_VERSION = SGLANG_VERSION  # the release the grid plans SGLang at (the one modelled)
SGLANG_PAGE_SIZE = 1  # fields/schedule.py page_size None -> 1 for FA3 (Hopper), FlashInfer, Triton
# overrides.py _mla_backend_page_constraints: trtllm_mha / trtllm_mla, the default backends on SM100
# (model_override_base.get_default_attn_backend; model_overrides/deepseek_v2.py), page None -> 64
SGLANG_SM100_PAGE_SIZE = 64
# SM100 (B200, GB200, B300, GB300) against SM120 (RTX 50xx, RTX PRO 6000: FlashInfer, page 1): the catalog
# names the architecture, not the compute capability; the data-center parts are the ones above this memory
SGLANG_SM100_MIN_BYTES = 100 * GIB
SGLANG_DSA_PAGE_SIZE = 64  # model_overrides/deepseek_v2.py: 64 x index_kpool (1) for DeepSeek DSA on CUDA
# fields/schedule.py swa_full_tokens_ratio fallback; mamba_full_memory_ratio fallback
SGLANG_SWA_FULL_TOKENS_RATIO = 0.8
SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9
# kv_cache_configurator.py MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (no_buffer) and the 2 tracking slots
# of the extra_buffer strategy with the overlap scheduler (allocation_sizing.get_mamba_tracking_slots)
SGLANG_MAMBA_SLOTS_PER_REQUEST = 3
SGLANG_MAMBA_EXTRA_BUFFER_SLOTS = 2
# kv_cache_configurator._profile_available_bytes: (total - ctx) x f - weights - what loading leaves allocated
# = total x f - weights - (ctx x f + leftovers); this stands for the bracket (CUDA context, NCCL, allocator
# slack seen after the weights load), an observed magnitude, not read from the source
SGLANG_CONTEXT_BYTES = int(0.6 * GIB)
# At TP > 1 on an NVLink switch (GpuSku.nvlink_multicast) NCCL's communicators (NVLS buffers) and the custom
# all-reduce hold more before the weights load, and the same formula deducts it x f. Read off two public logs'
# "Load weight begin. avail mem": 8 x H100 80GB HBM3 (grok-2, 0.5.2rc2) 77.43 GB free, one H100 80GB (the
# SGLang docs, 0.4.x) 78.81 GB: 1.38 GiB more in use, deducted at f = 0.9 (the fraction is not an input of
# the overhead; 0.83-0.93 move it by 0.1 GiB). PCIe cards and NVLink bridges: none (the L4 and RTX 4090 TP 4
# logs fit the constant alone). Neither log is a scored row (grok-2 is not in the catalog).
SGLANG_TP_SWITCH_CONTEXT_BYTES = int(1.38 * 0.9 * GIB)
SGLANG_FALLBACK_MEM_FRACTION = 0.95  # memory_hook: gpu_mem unknown
# Releases before 0.4.7.post1 (server_args.py ServerArgs.__post_init__, read in the 0.4.0-0.4.7 wheels): without
# --mem-fraction-static the fraction came from the parallel size: (at least this many ranks, fraction), first
# match wins (the logs of 0.4.3.post4, TP 4: 0.85, agree). From 0.4.6 only on devices up to 80 GiB
# (`SGLANG_LEGACY_TABLE_UP_TO_MIB`, nvidia-smi / rocminfo MiB); larger ones (`legacy_mem_fraction_static`):
# 0.4.6-0.4.6.post1 (gpu - 13 GiB) / gpu; 0.4.6.post2-0.4.7 0.88, above 96 GiB raised to
# min(f + 48 GiB x (1 - f) / gpu, (gpu - 18 GiB) / gpu) (20 GiB with speculative decoding in 0.4.7, which also
# takes x 0.95 below 96 GiB and sets 0.79 on CUDA devices above 180,000 MiB)
SGLANG_LEGACY_RELEASES_BEFORE = (0, 5)
SGLANG_LEGACY_MEM_FRACTION_BY_RANKS: tuple[tuple[int, float], ...] = (
    (16, 0.79),
    (8, 0.81),
    (4, 0.85),
    (2, 0.87),
    (1, 0.88),
)
SGLANG_LEGACY_BY_DEVICE_FROM = (0, 4, 6)
SGLANG_LEGACY_RAISED_FROM = (0, 4, 6, 2)  # 0.4.6.post2: the post release as a fourth part
SGLANG_LEGACY_047_FROM = (0, 4, 7)  # 0.4.7: the CUDA rule above 180,000 MiB and the speculative reserve
SGLANG_LEGACY_TABLE_UP_TO_MIB = 81920
SGLANG_LEGACY_046_RESERVE_MIB = 13 * 1024
SGLANG_LEGACY_LARGE_FRACTION = 0.88
SGLANG_LEGACY_RAISE_ABOVE_MIB = 96 * 1024
SGLANG_LEGACY_RAISE_MIB = 48 * 1024
SGLANG_LEGACY_RAISED_RESERVE_MIB = 18 * 1024
SGLANG_LEGACY_RAISED_RESERVE_SPECULATIVE_MIB = 20 * 1024
SGLANG_LEGACY_SPECULATIVE_FACTOR = 0.95
SGLANG_LEGACY_CUDA_ABOVE_MIB = 180_000
SGLANG_LEGACY_CUDA_LARGE_FRACTION = 0.79
# 0.4.7.post1 to 0.5.2 (server_args.py ServerArgs.__post_init__, read in the 0.4.7.post1, 0.4.8, 0.4.10.post2,
# 0.5.0rc0 and 0.5.2 wheels; 0.5.3 moved to _handle_gpu_memory_settings): without --mem-fraction-static,
# fraction = round((gpu - reserved) / gpu, 3), gpu = nvidia-smi memory.total (MiB) and reserved (MiB) by tier:
# (below this many MiB, base GiB, GiB per rank of TP x PP), first match wins, the last tier flat 32 GiB;
# + the speculative reserve (`SGLANG_SPECULATIVE_RESERVE_MIB`), + 4 GiB with DP attention
SGLANG_TIERED_RELEASES_FROM = (0, 4, 7, 1)
# `--kv-cache-dtype auto` run as fp8_e4m3 where the model's quantization config has kv_cache_quant_algo FP8
# (model_executor/model_runner.py in the 0.5.3 to 0.5.13 wheels, not in 0.5.2; mem_cache/kv_cache_dtype.py
# configure_kv_cache_dtype from 0.5.16 to 0.5.23); earlier `auto` is the model's dtype
SGLANG_KV_DTYPE_FROM_CHECKPOINT_FROM = (0, 5, 3)
SGLANG_TIERED_FIRST_RELEASE = "0.4.7.post1"  # the same release as text (what a tiered rule without a release assumes)
SGLANG_TIERED_DP_ATTENTION_GIB = 4.0
SGLANG_TIERED_RELEASES_BEFORE = (0, 5, 3)
SGLANG_TIERED_RESERVE_GIB: tuple[tuple[int | None, float, float], ...] = (
    (20 * 1024, 2.8, 0.1),  # T4, 4080
    (35 * 1024, 2.8, 0.1),  # A10, L40, 4090, 5090
    (90 * 1024, 9.5, 0.5),  # H100, A100
    (100 * 1024, 12.0, 0.5),  # H20
    (160 * 1024, 12.0, 0.5),  # H200
    (None, 32.0, 0.0),  # B200, MI300
)
# The reserve for speculative decoding by algorithm (server_args.py, read in the 0.4.7.post1, 0.4.8, 0.4.9, 0.4.10,
# 0.5.1, 0.5.1.post3, 0.5.2, 0.5.3 to 0.5.9, 0.5.3.post3, 0.5.10, 0.5.10.post1, 0.5.11 to 0.5.13.post1, 0.5.14 to
# 0.5.19 wheels): (first release, MiB for STANDALONE (a draft model), NGRAM, any other algorithm: EAGLE, EAGLE3,
# NEXTN), read by `engine_constants.by_first_release`. The tiered rule from 0.4.7.post1 (0.4.7 itself takes the legacy
# rule, which never asks this table); from 0.5.3 the term follows the 10 GiB floor; 0.5.14 dropped it
SGLANG_SPECULATIVE_RESERVE_MIB: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ("0.4.7", (2 * 1024, 2 * 1024, 2 * 1024)),
    ("0.5.2", (6 * 1024, 2 * 1024, 2 * 1024)),
    ("0.5.3", (6 * 1024, 0, 2 * 1024)),
    ("0.5.10", (6 * 1024, 0, 4 * 1024)),
    ("0.5.14", (0, 0, 0)),
)


@dataclass(frozen=True, slots=True)
class SglangMemoryTier:
    """arg_groups/memory_hook.py handle_gpu_memory_settings: defaults by device memory (MiB, nvidia-smi)."""

    below_mib: int | None  # the tier applies below this much memory (None: the largest tier)
    chunked_prefill_size: int
    cuda_graph_max_bs: int  # decode graphs, TP < 4
    cuda_graph_max_bs_tp4: int  # decode graphs, TP >= 4


SGLANG_MEMORY_TIERS: tuple[SglangMemoryTier, ...] = (
    SglangMemoryTier(20 * 1024, 2048, 8, 8),  # T4, 4080
    SglangMemoryTier(35 * 1024, 4096, 48, 160),  # A10, 4090, 5090
    SglangMemoryTier(60 * 1024, 4096, 32, 160),  # A100 40GB, L40
    SglangMemoryTier(90 * 1024, 8192, 256, 512),  # H100, A100 80GB
    SglangMemoryTier(160 * 1024, 8192, 256, 512),  # H20, H200
    SglangMemoryTier(None, 16384, 512, 512),  # B200, MI300
)
# Older 0.5.x releases (server_args.py _handle_gpu_memory_settings, read in the 0.5.3 to 0.5.19 wheels): the
# < 35 GiB tier took chunked_prefill_size 2048 and 16 (0.5.3-0.5.4) / 24 (0.5.5-0.5.19) decode graphs below TP 4,
# 80 from TP 4 (0.5.20 on: the tier above); the prefill (piecewise) CUDA graphs were reserved for only from 0.5.10,
# when they became the default (disable_piecewise_cuda_graph = False); the rest of the reserve is the same
SGLANG_TIER35_OLD_BEFORE = (0, 5, 20)
SGLANG_TIER35_BS16_BEFORE = (0, 5, 5)
SGLANG_TIER35_OLD = (2048, 24, 80)  # chunked_prefill_size, decode max bs below TP 4 / from TP 4
SGLANG_TIER35_OLD_BS_BEFORE_0_5_5 = 16
SGLANG_PREFILL_GRAPH_RESERVE_FROM = (0, 5, 10)
# from 0.5.14 (the per-phase cuda_graph_config) the reserve leaves out the graphs a disabled backend does not capture
# (`--disable-cuda-graph`: decode and prefill); 0.5.3-0.5.13 reserved cuda_graph_max_bs x 2 MiB whatever the flag
# (read in the 0.5.9, 0.5.13, 0.5.14 and 0.5.23 wheels); the DP-attention padding stays either way
SGLANG_GRAPH_RESERVE_FOLLOWS_BACKENDS_FROM = (0, 5, 14)
# the prefill CUDA graphs (reserved for from 0.5.10) are turned off for a model served multimodal, and with them
# their reserve: 0.5.10-0.5.13 `_handle_piecewise_cuda_graph` ("is_multimodal"), 0.5.14 on the graph cascade
# ("multimodal model"), unless, from 0.5.19 (breakable prefill graphs the CUDA default), the architecture is on
# `configs/model_config.py` multimodal_breakable_cuda_graph_supported_model_archs (0.5.23's list here; Qwen3.5's is
# on it from 0.5.19); read in the 0.5.10-0.5.15, 0.5.19, 0.5.21, 0.5.22 and 0.5.23 wheels. 0.5.10-0.5.13 also
# turned them off with DP attention, PP > 1, LoRA, on ROCm, and in 0.5.10 with speculative decoding
SGLANG_MULTIMODAL_PREFILL_GRAPHS_LISTED_FROM = (0, 5, 19)
SGLANG_PIECEWISE_SPECULATIVE_OFF_BEFORE = (0, 5, 11)
# from 0.5.22 a --max-running-requests below the default decode CUDA-graph batch lowers it (memory_hook.py:
# `decode_max_bs_is_default and max_running_requests < max_bs`), and the reserve follows (read in the 0.5.21, 0.5.22
# and 0.5.23 wheels: 0.5.21 does not)
SGLANG_DECODE_GRAPHS_CAPPED_BY_RUNNING_FROM = (0, 5, 22)
SGLANG_MULTIMODAL_PREFILL_GRAPH_ARCHITECTURES = frozenset({
    "MiniMaxM3SparseForConditionalGeneration", "Cohere2VisionForConditionalGeneration",
    "Glm5NextForConditionalGeneration", "InternS2MobiusForConditionalGeneration", "PaddleOCRVLForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForConditionalGeneration",
    "MuseGlimmerForConditionalGeneration", "MuseSparkForConditionalGeneration", "KimiK3ForConditionalGeneration",
    "KimiK25ForConditionalGeneration", "MiniMaxM3SparseForCausalLM",
})
# memory_hook.py reserved_mem (MiB): 512 + 1.5 x max(chunked_prefill_size, 2048) + TP x PP / 8 x 1024
# + reserve_for_graph_mb (2 per decode graph batch size; 8 per prefill graph size, or 1536 with MLA),
# at least 10 GiB on devices above 60 GiB; mem_fraction_static = round((gpu - reserved) / gpu, 3)
SGLANG_RESERVE_BASE_MIB = 512
SGLANG_RESERVE_PER_ACTIVATION_TOKEN_MIB = 1.5
SGLANG_RESERVE_MIN_ACTIVATION_TOKENS = 2048
SGLANG_RESERVE_PER_8_RANKS_MIB = 1024
SGLANG_RESERVE_PER_DECODE_GRAPH_BS_MIB = 2
SGLANG_RESERVE_PER_PREFILL_GRAPH_MIB = 8
SGLANG_RESERVE_MLA_PREFILL_GRAPHS_MIB = 1536
SGLANG_RESERVE_FLOOR_MIB = 10 * 1024
SGLANG_RESERVE_FLOOR_ABOVE_MIB = 60 * 1024
# reserve_for_graph_mb with DP attention (0.5.3 on, read in the 0.5.3, 0.5.10, 0.5.19 and 0.5.23 wheels): 3 MiB
# per decode graph batch size per attention-DP rank, 1.5 more above 300 batch sizes, before the floor
SGLANG_RESERVE_DP_ATTENTION_PER_BS_MIB = 3
SGLANG_RESERVE_DP_ATTENTION_LARGE_BS_MIB = 1.5
SGLANG_RESERVE_DP_ATTENTION_LARGE_BS_ABOVE = 300
# memory_hook.adjust_mem_fraction_for_vlm: 0.95 x a factor from the vision tower against ViT-L/14 (24 x 1024)
SGLANG_VLM_MEM_FRACTION_BASE = 0.95
SGLANG_VIT_BASELINE_LAYERS = 24
SGLANG_VIT_BASELINE_HIDDEN = 1024
# configs/model_config.py (0.5.23) `multimodal_model_archs` (MiMoV2ForCausalLM left out: multimodal only with both
# vision_config and audio_config); `ModelConfig.__init__` turns multimodal off by default for the OFF_BY_DEFAULT ones
SGLANG_MULTIMODAL_ARCHITECTURES = frozenset({
    "BailingMM2NativeForConditionalGeneration", "BailingMMNativeForConditionalGeneration",
    "BailingMoeV3VLForConditionalGeneration", "CLIPModel", "Cohere2VisionForConditionalGeneration",
    "Cosmos3EdgeForConditionalGeneration", "DeepseekOCRForCausalLM", "DeepseekVL2ForCausalLM",
    "DiffusionGemmaForBlockDiffusion", "Dots3NoteForCausalLM", "DotsOCRForCausalLM", "DotsVLMForCausalLM",
    "EmbeddingGemma2Model", "Ernie4_5_VLMoeForConditionalGeneration", "Gemma3ForConditionalGeneration",
    "Gemma3nForConditionalGeneration", "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration",
    "Glm4vForConditionalGeneration", "Glm4vMoeForConditionalGeneration", "Glm5NextForConditionalGeneration",
    "GlmAsrForConditionalGeneration", "GlmImageForConditionalGeneration", "GlmOcrForConditionalGeneration",
    "Grok1AForCausalLM", "Grok1VForCausalLM", "InternS1ForConditionalGeneration",
    "InternS1ProForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration", "InternVLChatModel", "JetVLMForConditionalGeneration",
    "KimiK25ForConditionalGeneration", "KimiVLForConditionalGeneration", "Lfm2VlForConditionalGeneration",
    "LightOnOCRForConditionalGeneration", "Llama4ForConditionalGeneration", "LlavaForConditionalGeneration",
    "LlavaLlamaForCausalLM", "LlavaMistralForCausalLM", "LlavaQwenForCausalLM", "LlavaVidForCausalLM",
    "LocateAnythingForConditionalGeneration", "MiDashengLMModel", "MiMoV2ASRForCausalLM", "MiniCPMO", "MiniCPMV",
    "MiniMaxM3SparseForConditionalGeneration", "Mistral3ForConditionalGeneration",
    "MllamaForConditionalGeneration", "MossVLForConditionalGeneration", "MultiModalityCausalLM",
    "MuseGlimmerForConditionalGeneration", "MuseSparkForConditionalGeneration", "NVILAForConditionalGeneration",
    "NVILALiteForConditionalGeneration", "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL_V2",
    "NemotronH_Omni_Reasoning_V3", "POINTSV15ChatModel", "PaddleOCRVLForConditionalGeneration",
    "Phi4MMForCausalLM", "PixtralForConditionalGeneration", "Qwen2AudioForConditionalGeneration",
    "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration", "Qwen3ASRForConditionalGeneration",
    "Qwen3OmniMoeForConditionalGeneration", "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen4ExpForConditionalGeneration", "Sarashina2VisionForCausalLM", "Step3VLForConditionalGeneration",
    "Step3p7ForConditionalGeneration", "StepVLForConditionalGeneration", "UnlimitedOCRForCausalLM",
    "VoxtralForConditionalGeneration", "WhisperForConditionalGeneration",
})
SGLANG_MULTIMODAL_OFF_BY_DEFAULT = frozenset({
    "Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration", "Step3VLForConditionalGeneration",
    "InklingForConditionalGeneration",
})
SGLANG_PP_PREFILL_GRAPH_MAX_TOKENS = 8192  # memory_hook _DEFAULT_PP_PREFILL_CUDA_GRAPH_MAX_TOKENS (PP > 1)
# attention_hook.py: the aiter backend (AMD, non-MLA) scales mem_fraction_static by 0.85 above 8192 tokens
SGLANG_AITER_MEM_FRACTION_FACTOR = 0.85
SGLANG_AITER_LONG_CONTEXT_TOKENS = 8192
# kv_cache_configurator.py resolve_max_num_reqs: int(tokens / context_len x 512) clamped to [2048, 4096],
# at most tokens // 2
SGLANG_RUNNING_REQUESTS_PER_CONTEXT = 512
SGLANG_MIN_RUNNING_REQUESTS = 2048
SGLANG_MAX_RUNNING_REQUESTS = 4096

# configs/model_config.py is_hybrid_swa_model: the architectures with a separate SWA pool. Gemma 2 / 3,
# Exaone and OLMo 2 are not among them (model_overrides/gemma2_gemma3.py disables it besides): their
# sliding layers keep every token in the one full pool.
SGLANG_HYBRID_SWA_ARCHITECTURES = frozenset({
    "BeamForCausalLM", "Llama4ForConditionalGeneration", "GptOssForCausalLM", "GraniteSWAForCausalLM",
    "GraniteMoeSWAForCausalLM", "IQuestQ1ForCausalLM", "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM",
    "Step3p5ForCausalLM", "Step3p7ForConditionalGeneration", "Gemma4ForCausalLM",
    "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration", "LagunaForCausalLM",
    "MellumForCausalLM", "MuseGlimmerForCausalLM", "MuseGlimmerForConditionalGeneration",
    "InklingForConditionalGeneration",
})  # fmt: skip
# the same by capplan family, for specs whose architecture string is not the checkpoint's
SGLANG_HYBRID_SWA_FAMILIES = frozenset({"llama4", "gpt_oss", "gemma4", "mimo_v2", "step3p5"})
# overrides.py _MAMBA_EXTRA_BUFFER_ARCHS: with the overlap scheduler (default) the mamba radix cache takes
# the extra_buffer strategy, 2 more state slots per running request
SGLANG_MAMBA_EXTRA_BUFFER_FAMILIES = frozenset(
    {"qwen3_next", "qwen3_5", "qwen3_5_moe", "nemotron_h", "falcon_h1", "granitemoehybrid", "kimi_linear"}
)
# families with no model class in the 0.5.23 wheel (python/sglang/srt/models/; configs/hybrid_arch.py
# mambaish_config knows no Jamba config)
SGLANG_UNSERVED_FAMILIES = frozenset({"jamba"})
