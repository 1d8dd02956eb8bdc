"""vLLM: the block pool of the hybrid KV cache manager, per release (capacity/engine_constants.py rows).

Rules followed, by upstream function (vLLM 0.33.0 unless a release row says otherwise):
- budget: `v1/worker/gpu_worker.py` determine_available_memory: total x utilization - weights -
  activation peak - non-torch memory [- CUDA-graph estimate from 0.21];
- defaults: `engine/arg_utils.py` get_batch_defaults (by device memory and name), `platforms/cuda.py`
  block sizes (16; MLA backends force 64 on Hopper and older, 128 on Blackwell);
- in-flight tokens: `config/vllm.py` VllmConfig.max_concurrent_batches x max_num_batched_tokens;
- pools: `v1/core/kv_cache_planning.py` (groups by spec, page unification, num_blocks = budget //
  bytes per block, every rank sized to the tightest), `v1/kv_cache_interface.py` (per-request charges);
- printed size: `v1/core/kv_cache_utils.py` (get_max_concurrency_for_kv_cache_config, the log line);
- start: `kv_cache_planning.get_kv_cache_configs` (`_check_enough_kv_cache_memory` against num_blocks
  minus the null block, `_auto_fit_max_model_len` for max_model_len -1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache

from capacity import engine_constants as ec
from capacity.engines import Engine
from capacity.engines.base import ADAPTER_FEATURES, KV_CONNECTOR, ProfileBase
from capacity.engines.numeric import Num, at_least, truncate
from capacity.engines.vllm_overhead import vllm_overhead
from capacity.engines.vllm_weights import mxfp4_expert_extra_bytes
from capacity.memory import (
    EngineDefaults,
    KVGroup,
    KVPool,
    LayerKVSpec,
    Overhead,
    OverheadInputs,
    cdiv,
    layer_kv_bytes_per_token,
    layer_state_bytes,
    stage_layers,
)
from capacity.spec import GpuSku, KVKind, ModelSpec, SpecError, StateMixer

# `--kv-cache-dtype` values vLLM 0.33 accepts (config/cache.py CacheDType): no plain int8 or float32,
# and 16-bit types spelled out; the ones whose page capplan sizes, and the packed / scaled layouts
# (per-token-head scales, NVFP4, TurboQuant...) it does not model
VLLM_KV_DTYPES_SIZED = frozenset({"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
                                  "fp8_ds_mla"})  # fmt: skip
VLLM_KV_DTYPES_ACCEPTED = VLLM_KV_DTYPES_SIZED | frozenset({
    "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
    "octave_k3v4", "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head",
    "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
})  # fmt: skip
_SPELLED_OUT = {"bf16": "bfloat16", "fp16": "float16", "half": "float16"}


@dataclass(frozen=True, slots=True)
class VllmProfile(ProfileBase):
    """One vLLM release's accounting."""

    release: ec.VllmRelease
    requested_version: str | None = None
    engine: Engine = Engine.VLLM

    @classmethod
    def for_version(cls, version: str | None) -> VllmProfile:
        return _profile(version)

    @property
    def version(self) -> str | None:
        return self.requested_version or ec.VLLM_DEFAULT_VERSION

    def ssm_cache_dtype(self, model: ModelSpec, act_dtype: str) -> str:
        """`--mamba-ssm-cache-dtype auto`: the model dtype (mamba_utils._mamba_state_dtype), except
        where a model config class overrides it (model_executor/models/config.py): Nemotron-H takes
        the config's value, else float32; Qwen3.5 the config's `mamba_ssm_dtype`."""
        if model.family == "nemotron_h":
            return model.mamba_ssm_cache_dtype if model.mamba_ssm_dtype_stated else "float32"
        if model.family.startswith("qwen3_5") and model.mamba_ssm_dtype_stated:
            return model.mamba_ssm_cache_dtype
        return act_dtype

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
        seqs, batched = batch_defaults(self.release, gpu, gpu_memory_bytes, max_model_len)
        return EngineDefaults(
            self.release.default_gpu_memory_utilization,
            seqs,
            batched,
            block_size(model, gpu, kv_dtype, self.release),
            gdn_prefill_checkpoints(model, gpu, self.release),
        )

    @property
    def assumed_off(self) -> frozenset[str]:
        """LoRA and CPU offload, and a KV connector (--kv-transfer-config): its GPU buffers are not sized."""
        return ADAPTER_FEATURES | {KV_CONNECTOR}

    def overhead(self, inputs: OverheadInputs) -> Overhead:
        """The profiling run as vLLM executes it, each buffer named (capacity/engines/vllm_overhead.py)."""
        i = inputs
        return vllm_overhead(i.model, i.tp, i.pp, max(i.max_num_batched_tokens, 1), i.max_num_seqs or 256, self.release,
                             i.act_bytes, nvlink_multicast=i.nvlink_multicast, version=self.version,
                             flashinfer_sampler=i.flashinfer_sampler, peer_link_gpus=i.peer_link_gpus)  # fmt: skip

    def weight_layout_extra_bytes(self, model: ModelSpec, tp: int, pp: int, gpu: GpuSku | None,
                                  triton_kernels: bool | None = None) -> int:  # fmt: skip
        """MXFP4 experts as the release's fused-MoE backend lays them out (capacity/engines/vllm_weights.py)."""
        return mxfp4_expert_extra_bytes(model, tp, pp, gpu, self.version or ec.VLLM_DEFAULT_VERSION, triton_kernels)

    def kv_budget(self, total_bytes: Num, utilization: Num, weights_bytes: Num, overhead_bytes: Num) -> Num:
        """requested memory (total x utilization) minus everything that is not KV."""
        return truncate(total_bytes * utilization) - weights_bytes - overhead_bytes

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
        return stage_pools(
            model, budget_bytes, kv_bytes, ssm_bytes, act_bytes, tp, pp, block_size, max_num_batched_tokens,
            max_in_flight_tokens, self.release, gdn_checkpoints=state_checkpoints,
        )  # fmt: skip

    def max_in_flight_tokens(self, max_num_batched_tokens: int, pp: int, async_scheduling: bool | None) -> int:
        return max_concurrent_batches(self.release, pp, async_scheduling) * max_num_batched_tokens

    def kv_cache_tokens(
        self, num_blocks: Num, num_groups: Num, block_size: Num, concurrency: Num, max_model_len: Num
    ) -> Num:
        """"GPU KV cache size: N tokens" as the release prints it."""
        if self.release.kv_cache_size_tokens_rule is ec.KVCacheSizeRule.CONCURRENCY:
            return truncate(concurrency * max_model_len)
        return num_blocks // at_least(num_groups, 1) * block_size

    @property
    def start_reserved_units(self) -> int:
        return 1 if self.release.start_reserves_null_block else 0

    @property
    def refuses_short_pool(self) -> bool:
        return True

    def kv_dtype_problem(self, kv_dtype: str) -> str | None:
        name = kv_dtype.lower()
        if name in VLLM_KV_DTYPES_SIZED:
            return None
        if name in VLLM_KV_DTYPES_ACCEPTED:
            return f"vLLM accepts --kv-cache-dtype {kv_dtype}, but capplan does not model its packed / scaled page"
        if name in _SPELLED_OUT:
            return f"vLLM does not accept --kv-cache-dtype {kv_dtype}: it spells it {_SPELLED_OUT[name]}"
        return f"vLLM does not accept --kv-cache-dtype {kv_dtype} (it takes: {', '.join(sorted(VLLM_KV_DTYPES_SIZED))})"

    @property
    def conv_state_without_current(self) -> bool:
        """mamba_utils.MambaStateShapeCalculator: (conv_dim, kernel - 1)"""
        return True

    def unmodelled(self, model: ModelSpec) -> str | None:
        return None

    @property
    def overhead_era(self) -> str:
        return self.release.overhead_profile

    def observed_version(self, version: str | None, generation: str | None) -> str | None:
        """The stated version, else a representative release of the generation (V0 -> 0.4, V1 -> 0.11:
        most undated V1 logs in the public set are from the 0.11-0.16 era)."""
        if version:
            try:
                ec.parse_version(version)
                return version
            except ValueError:
                pass
        return "0.4" if (generation or "").lower() == "v0" else "0.11"


@cache
def _profile(version: str | None) -> VllmProfile:
    return VllmProfile(ec.vllm_release(version), version)


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
    names = (gpu.id, gpu.name, *gpu.aliases)
    return any(name.lower().replace(" ", "").replace("-", "").startswith(("gb10", "nvidiagb10")) and "gb100" not in
               name.lower() for name in names)  # fmt: skip


def batch_defaults(
    release: ec.VllmRelease, gpu: GpuSku | None, gpu_memory_bytes: int, max_model_len: int
) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) that `vllm serve` picks when not given."""
    huge, big, small = ec.VLLM_BATCH_DEFAULTS[release.batch_defaults]
    is_a100 = gpu is not None and ("a100" in gpu.id.lower() or "a100" in gpu.name.lower())
    if gpu_memory_bytes >= ec.VLLM_HUGE_GPU_MIN_BYTES:
        seqs, batched = huge
    elif (gpu_memory_bytes >= ec.VLLM_BIG_GPU_MIN_BYTES and not is_a100
          and not (release.batch_defaults is ec.BatchDefaults.V1_BY_GPU_160_GB10 and _is_gb10(gpu))):  # fmt: skip
        seqs, batched = big
    else:
        seqs, batched = small
    if batched is None:
        batched = max(max_model_len, 2048) if max_model_len <= 32768 else 2048
    return seqs, batched


def block_size(
    model: ModelSpec, gpu: GpuSku | None, kv_dtype: str = "auto", release: ec.VllmRelease | None = None
) -> int:
    """CUDA platform block-size rules: 16, or what the MLA backend's kernels need."""
    if not model.is_mla:
        return ec.VLLM_DEFAULT_BLOCK_SIZE
    arch = (gpu.architecture or "").lower() if gpu is not None else "hopper"
    rule = (release or ec.vllm_release(None)).mla_block
    if rule is ec.MlaBlockRule.FLASHMLA:
        return ec.VLLM_MLA_BLOCK_SIZE_BLACKWELL if arch == "blackwell" else ec.VLLM_MLA_BLOCK_SIZE_HOPPER
    if any(layer.indexer_head_dim for layer in model.layers):
        # DSA: DeepseekV32IndexerBackend takes kernel blocks of 64 on CUDA, the sparse MLA backends
        # multiples of 64 (or 32): the common block is 64
        return ec.VLLM_DSA_BLOCK_SIZE
    if arch == "hopper":  # SM90: FLASH_ATTN_MLA (bf16/fp16 KV only, any multiple of 16), else FLASHMLA (64)
        return ec.VLLM_MLA_BLOCK_SIZE_HOPPER if kv_dtype.lower().startswith("fp8") else ec.VLLM_DEFAULT_BLOCK_SIZE
    if arch == "blackwell" and not _is_sm120(gpu):  # SM100: FLASHINFER_MLA (32 or 64)
        return ec.VLLM_FLASHINFER_MLA_BLOCK_SIZE
    return ec.VLLM_DEFAULT_BLOCK_SIZE  # TRITON_MLA (SM120, Ampere, Ada) and ROCm AITER MLA take 16


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
    if not any(layer.mixer is StateMixer.GATED_DELTA_NET for layer in model.layers):
        return False
    return (gpu.architecture or "").lower() in ("hopper", "blackwell")


def _state_checkpoint_blocks(layer: LayerKVSpec, gdn_checkpoints: bool, release: ec.VllmRelease) -> int:
    """`num_prefill_checkpoint_blocks` of a state layer's MambaSpec: Mamba-2 mixers export one from 0.32
    (mamba_mixer2.get_kv_cache_spec), GDN mixers when FlashInfer's prefill runs, Mamba-1 none."""
    if layer.mixer is StateMixer.MAMBA2:
        return 1 if release.mamba2_prefill_checkpoints else 0
    if layer.mixer is StateMixer.GATED_DELTA_NET and gdn_checkpoints:
        return 1
    return 0


def page_bytes_per_token(layer: LayerKVSpec, kv_bytes: int, tp: int) -> int:
    """Bytes one token takes in a layer's page. DSA layers with an 8-bit KV cache are served by the
    sparse FlashMLA backend in its packed fp8_ds_mla layout (mla_attention: 656 B per token: 512 fp8
    latent, 4 fp32 scales, 64 bf16 rope) rather than 576 B; B200-class GPUs pick FlashInfer's sparse
    MLA with plain fp8 there, which this does not model (an over-charge of 80 B per token and layer)."""
    plain = layer_kv_bytes_per_token(layer, kv_bytes, tp)
    if layer.indexer_head_dim and kv_bytes == 1 and layer.kind is KVKind.MLA:
        return plain + ec.VLLM_FP8_DS_MLA_BYTES - (layer.k_head_dim + layer.v_head_dim)
    return plain


def _layer_bucket(layer: LayerKVSpec, hybrid_manager: bool) -> tuple[KVKind, int | None]:
    """The spec type a layer's cache has in vLLM's grouping (windowed kinds collapse to full
    attention without the hybrid manager: `unify_hybrid_kv_cache_specs`; MLA keeps its own spec)."""
    if layer.kind in (KVKind.STATE, KVKind.MLA):
        return (layer.kind, None)
    if hybrid_manager and layer.kind in (KVKind.SLIDING, KVKind.CHUNKED) and layer.window_tokens:
        return (layer.kind, layer.window_tokens)
    return (KVKind.FULL, None)


def hybrid_manager_on(model: ModelSpec, release: ec.VllmRelease) -> bool:
    """Whether the release runs this model with the hybrid KV cache manager."""
    if not release.hybrid_kv_cache_manager:
        return False
    has_chunked = any(layer.kind is KVKind.CHUNKED for layer in model.layers)
    return release.hybrid_chunked_local or not has_chunked


def stage_pools(
    model: ModelSpec,
    kv_budget_bytes: int,
    kv_bytes: int,
    ssm_bytes: int,
    model_bytes: int,
    tp: int,
    pp: int,
    block_size: int,
    max_num_batched_tokens: int,
    max_in_flight_tokens: int,
    release: ec.VllmRelease,
    *,
    gdn_checkpoints: bool = False,
) -> list[KVPool]:
    """The pool each pipeline stage would build from the budget, in stage order.

    Groups are planned once for the whole model and projected onto each stage
    (`get_global_kv_cache_groups`, `_project_kv_cache_groups_to_worker`). One spec type (every layer
    full, or every layer the same window): one group over all layers (`UniformTypeKVCacheSpecs`), each
    layer its own page. Otherwise (`_get_kv_cache_groups_uniform_page_size` after
    `unify_kv_cache_spec_page_size`): layers bucketed by their exact spec; pages unified to the largest
    by multiplying a smaller page's block size when it divides (else padding it; Mamba pages are
    padded); buckets split into groups of equal size (the smallest bucket, or the largest when it is
    under 1.5x the smallest), layer i of a bucket in group i mod n, short groups padded; a stage's
    bytes per block are its fullest group's layers x page. Layouts whose backend packs blocks
    outermost take vLLM's packed path, which is not modelled."""
    hybrid = hybrid_manager_on(model, release)
    align_mode = release.mamba_align_with_prefix_caching  # MambaSpec: 2 (+ checkpoint) blocks, else 1
    stages = [
        [layer for layer in stage if layer.stores_per_token_kv or layer.kind is KVKind.STATE]
        for stage in stage_layers(model, pp)
    ]
    layers = [layer for stage in stages for layer in stage]
    if not layers:
        return []
    stage_of = {layer.index: s for s, stage in enumerate(stages) for layer in stage}
    attn_page_per_token = max(
        (page_bytes_per_token(layer, kv_bytes, tp) for layer in layers if layer.stores_per_token_kv), default=0
    )
    state_layers = [layer for layer in layers if layer.kind is KVKind.STATE]
    state_page = max(
        (layer_state_bytes(layer, model_bytes, ssm_bytes, tp, conv_without_current=True) for layer in state_layers),
        default=0,
    )
    bs = block_size
    checkpoints = max((_state_checkpoint_blocks(layer, gdn_checkpoints, release) for layer in state_layers), default=0)
    if state_page and attn_page_per_token:
        # Platform._align_hybrid_block_size: the attention block grows, in steps of the kernel
        # alignment (its smallest kernel block or the cache block size, and in "align" mode the
        # checkpoint grid: FlashInfer GDN's 64), until its page holds the state
        align = max(ec.VLLM_HYBRID_BLOCK_ALIGN, block_size)
        if align_mode and gdn_checkpoints and any(layer.mixer is StateMixer.GATED_DELTA_NET for layer in state_layers):
            align = math.lcm(align, ec.VLLM_GDN_CHECKPOINT_ALIGNMENT)
        bs = max(bs, align * cdiv(state_page, align * attn_page_per_token))
    state_blocks = 2 + checkpoints if align_mode else 1
    kinds = {_layer_bucket(layer, hybrid) for layer in layers}

    if len(kinds) == 1 and KVKind.STATE not in {kind for kind, _ in kinds}:
        ((kind, window),) = kinds
        pools: list[KVPool] = []
        for stage in stages:
            if not stage:
                continue  # a stage of KV-shared layers only holds no cache and does not bound the pool
            page_sum = sum(page_bytes_per_token(layer, kv_bytes, tp) for layer in stage) * bs
            group = KVGroup(kind.value, len(stage), window)
            pools.append(KVPool("block", kv_budget_bytes // page_sum if page_sum else 0, bs, (group,),
                                max_num_batched_tokens, page_sum, max_in_flight_tokens=max_in_flight_tokens))  # fmt: skip
        return pools

    # buckets by exact spec: type, window and the bytes of one token (equal specs merge)
    buckets: dict[tuple[KVKind, int | None, int], list[LayerKVSpec]] = {}
    for layer in layers:
        kind, window = _layer_bucket(layer, hybrid)
        per_token = 0 if kind is KVKind.STATE else page_bytes_per_token(layer, kv_bytes, tp)
        buckets.setdefault((kind, window, per_token), []).append(layer)
    if any(not stage for stage in stages) and len({per_token for _, _, per_token in buckets if per_token}) > 1:
        # validate_kv_cache_layout: a worker without cache layers cannot express mixed page sizes
        raise SpecError(
            "vLLM refuses this layout: a pipeline stage holds no cache layer of a model with mixed KV page sizes"
        )
    page = max(attn_page_per_token * bs, state_page)
    sizes = [len(members) for members in buckets.values()]
    smallest, largest = min(sizes), max(sizes)
    group_size = largest if largest < 1.5 * smallest else smallest
    groups: list[KVGroup] = []
    members_per_group: list[list[LayerKVSpec]] = []
    padded = 0
    for (kind, window, per_token), members in buckets.items():
        n_groups = cdiv(len(members), group_size)
        padded += n_groups * group_size - len(members)
        group_bs = None
        if per_token and page % (per_token * bs) == 0 and page // (per_token * bs) > 1:
            group_bs = bs * (page // (per_token * bs))  # a smaller page holds more tokens per block
        held = state_blocks if kind is KVKind.STATE else None
        for i in range(n_groups):
            groups.append(KVGroup(kind.value, group_size, window, held, group_bs))
            members_per_group.append(members[i::n_groups])
    pools = []
    for s, stage in enumerate(stages):
        if not stage:
            continue
        # every group keeps its block table on every stage, holding that stage's share of its layers
        on_stage = [sum(1 for layer in members if stage_of[layer.index] == s) for members in members_per_group]
        unit_bytes = max(on_stage) * page
        capacity = kv_budget_bytes // unit_bytes if unit_bytes else 0
        projected = tuple(replace(group, num_layers=n) for group, n in zip(groups, on_stage, strict=True))
        pools.append(KVPool("block", capacity, bs, projected, max_num_batched_tokens, unit_bytes,
                            max_in_flight_tokens=max_in_flight_tokens, padded_layer_slots=padded))  # fmt: skip
    return pools
