"""SGLang 0.5.23: a token pool sized from `mem_fraction_static` of the memory free before the weights load.

Older releases differ in the default `mem_fraction_static` only (`defaults`), each read in that release's
`server_args.py`: before 0.4.7.post1 a table by TP x PP, from 0.4.6 with rules of its own above 80 GiB
(`legacy_mem_fraction_static`); 0.4.7.post1-0.5.2 a reserve per device-memory tier (`tiered_mem_fraction_static`); 0.5.3-0.5.19 the reserve below with a smaller < 35 GiB tier
(`memory_tiers`), and before 0.5.10 no prefill-graph term; from 0.4.7.post1 to 0.5.13 a reserve for speculative
decoding, by algorithm from 0.5.2 (`speculative_reserve_mib`); `profile_max_num_token` sized the pool as below.

Rules followed, each read in the 0.5.23 wheel (python/sglang/srt/...):
- defaults: `arg_groups/memory_hook.py` `handle_gpu_memory_settings` (chunked prefill size and decode
  CUDA-graph batch size by device memory tier; `mem_fraction_static = (gpu - reserved) / gpu` with the
  activation, parallelism and graph reserves, `reserve_for_graph_mb`), `arg_groups/attention_hook.py`
  (aiter on AMD: x 0.85 above 8,192 tokens), the page size of the default attention backend; multimodal
  checkpoints x `adjust_mem_fraction_for_vlm`'s factor (`serves_multimodal`, from 0.5);
- budget: `mem_cache/kv_cache_configurator.py` `_profile_available_bytes`: free memory after the weights
  minus `pre_model_load_memory x (1 - mem_fraction_static)`, i.e. (free before load) x fraction - weights;
- pools: `model_executor/pool_configurator.py` `DefaultPoolConfigurator` (cell = heads x (K + V dims) x
  layers x bytes, MLA one latent per layer; tokens = budget // cell, page-aligned), `HybridSWAPoolConfigurator`
  (only for the architectures of `configs/model_config.py` `is_hybrid_swa_model`: cell = full + ratio x swa;
  the SWA pool is int(full x ratio) page-aligned), the Mamba state pool of hybrids
  (`_handle_max_mamba_cache`: mamba_full_memory_ratio of the budget, K slots + 1 padding slot), kept as
  the pool's second pool (`swa_capacity_units` = K, `swa_window_tokens` = the slots a request holds,
  `_calculate_mamba_ratio`), so `resolve_max_num_reqs`' cap K // slots bounds B_max;
- start: `MemoryPoolConfig.__post_init__` (no tokens), `_profile_available_bytes` (no budget),
  `MemoryPoolConfigurator.validate_swa_pool_size` (SWA pool <= sliding window + page), `_handle_max_mamba_cache`
  and `resolve_max_num_reqs` (no state slot, no running request; without --max-running-requests its cap bounds
  B_max: `max_running_requests`, `SglangProfile.sequence_cap`). A request longer than the pool does not
  stop the server: the scheduler caps request lengths at the pool (`refuses_short_pool` is False).
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from capacity import engine_constants as ec
from capacity.dtypes import format_gib
from capacity.engines import sglang_constants as sc
from capacity.engines.base import UNSIZED_FEATURES, ProfileBase, declares_fp8_kv_cache
from capacity.engines.kinds import Engine
from capacity.engines.protocol import ASSUMPTION_SHARE, AssumptionContext, DefaultsRequest, PoolRequest, StartRequest
from capacity.engines.start_checks import fp8_method, long_length_refusal, quantization_refusal
from capacity.features.speculative import SpecMethod
from capacity.hf_config.overrides import OverrideRule
from capacity.kv_bytes import layer_state_bytes
from capacity.memo import per_object
from capacity.numeric import Num, as_float, at_least, both, choose, minimum, negate, truncate
from capacity.overhead import EngineDefaults, Overhead, OverheadInputs
from capacity.parallel import stage_layer_counts
from capacity.pool import KVGroup, KVPool, PoolUnit
from capacity.spec import GpuSku, KVKind, LayerKVSpec, ModelSpec

GIB_FLOAT = float(1 << 30)


def tp_switch_context_bytes(tp: int, nvlink_multicast: bool) -> int:
    """What NCCL (NVLS) and the custom all-reduce add to the context at TP > 1 on an NVLink switch, as the
    KV formula deducts it (`sc.SGLANG_TP_SWITCH_CONTEXT_BYTES`); 0 at TP 1 and on PCIe or bridged cards. A GPU
    outside the catalog counts as a switch fabric (`OverheadInputs.nvlink_multicast`'s default), as for vLLM."""
    return sc.SGLANG_TP_SWITCH_CONTEXT_BYTES if tp > 1 and nvlink_multicast else 0


@dataclass(frozen=True, slots=True)
class SglangProfile(ProfileBase):
    requested_version: str | None = None
    engine: Engine = Engine.SGLANG

    # `--json-model-override-args` (srt/utils/hf_transformers/config.py get_config)
    config_override_rule: ClassVar[OverrideRule | None] = OverrideRule.SGLANG
    # one budget for every stage: 0.5.23's `_profile_available_bytes` takes the free memory's MIN over all ranks (the
    # world group), then `_apply_token_constraints` the token capacity's MIN over the PP ranks (each its own layers)
    budgets_per_stage: ClassVar[bool] = False
    # mem_fraction_static, the chunk, the request cap and the page size do not follow the KV dtype
    defaults_read_kv_dtype: ClassVar[bool] = False

    def ssm_cache_dtype(self, model: ModelSpec, act_dtype: str) -> str:
        """`configs/mamba_utils.py` `mamba2_state_dtype`: the config's `mamba_ssm_dtype`, else float32."""
        return model.mamba_ssm_cache_dtype if model.mamba_ssm_dtype_stated else "float32"

    def resolved_kv_dtype(self, model: ModelSpec, kv_dtype: str) -> str:
        """`auto` is fp8_e4m3 for a checkpoint that declares an FP8 KV cache from 0.5.3 on
        (`SGLANG_KV_DTYPE_FROM_CHECKPOINT_FROM`)."""
        release = _release(self.requested_version)
        reads = release is None or release >= sc.SGLANG_KV_DTYPE_FROM_CHECKPOINT_FROM
        return "fp8_e4m3" if kv_dtype == "auto" and reads and declares_fp8_kv_cache(model) else kv_dtype

    def defaults(self, request: DefaultsRequest) -> EngineDefaults:
        """`handle_gpu_memory_settings`; max_running_requests is sized from the pool (`resolve_max_num_reqs`,
        at least 2,048 but for Mamba hybrids), so no sequence cap is set here."""
        model, gpu, tp, pp = request.model, request.gpu, request.tp, request.pp
        gpu_memory_bytes = request.gpu_memory_bytes
        device_bytes = device_memory_bytes(gpu, gpu_memory_bytes)
        tier = memory_tier(device_bytes, self.requested_version)
        fraction: float
        version, speculative, dp = self.requested_version, request.speculative, request.attention_dp
        if is_tiered_release(version):
            fraction = tiered_mem_fraction_static(
                device_bytes, tp, pp, speculative=speculative, attention_dp=dp, version=version
            )
        elif is_legacy_release(version):
            cuda = gpu is None or gpu.vendor == "nvidia"
            fraction = legacy_mem_fraction_static(
                tp, pp, device_bytes, version, cuda=cuda, speculative=speculative is not None
            )
        else:
            fraction = mem_fraction_static(
                device_bytes, tp, pp, mla=model.is_mla, version=version, attention_dp=dp, speculative=speculative,
                cuda_graphs=request.cuda_graphs, prefill_graphs=prefill_graphs_allowed(request, version),
                max_running_requests=request.max_num_seqs, decode_max_bs=request.cuda_graph_max_batch,
            )
        if serves_multimodal(model, self.requested_version):
            tower = model.vision_tower
            fraction *= vlm_mem_fraction_factor(tower.num_layers, tower.hidden_size) if tower else 1.0
        if (
            gpu is not None
            and gpu.vendor == "amd"
            and not model.is_mla
            and request.max_model_len > sc.SGLANG_AITER_LONG_CONTEXT_TOKENS
        ):
            fraction *= sc.SGLANG_AITER_MEM_FRACTION_FACTOR
        page = page_size(gpu, gpu_memory_bytes)
        if model.has_indexer:
            page = sc.SGLANG_DSA_PAGE_SIZE  # model_overrides/deepseek_v2.py: 64 x index_kpool for DSA on CUDA
        return EngineDefaults(fraction, 0, tier.chunked_prefill_size, page)

    def overhead_link_kind(self, tp: int, nvlink_multicast: bool, peer_link_gpus: int | None) -> Hashable:
        """Only the switch fabric: the TP > 1 context term (`tp_switch_context_bytes`)."""
        return nvlink_multicast

    def overhead(self, inputs: OverheadInputs) -> Overhead:
        """What SGLang's fraction does not already leave free: `_profile_available_bytes` takes
        free_after_weights - free_before_load x (1 - f) = (total - ctx) x f - weights - load leftovers, i.e.
        total x f - weights - (ctx x f + leftovers); the one observed term stands for the bracket.
        Activations and CUDA graphs live in the 1 - f the fraction leaves free; at TP > 1 on an NVLink
        switch the communicators' share of the context comes on top (`tp_switch_context_bytes`)."""
        return Overhead(0, sc.SGLANG_CONTEXT_BYTES + tp_switch_context_bytes(inputs.tp, inputs.nvlink_multicast), 0)

    def other_process_charge(self, other_bytes: Num, utilization: Num) -> Num:
        """`_profile_available_bytes` (0.5.23; the budget `ProfileBase.kv_budget`: total x mem_fraction_static -
        weights - overhead, see `overhead`) measures free memory: before the weights load (`pre_model_load_memory`,
        `get_available_gpu_memory`: mem_get_info's free) and after; the budget is free after the weights -
        pre x (1 - f). Others' memory O lowers both, so it takes O x f off: (total - O) x f - weights - ..."""
        return truncate(other_bytes * utilization)

    def stage_pools(self, request: PoolRequest) -> list[KVPool]:
        r = request
        c = cells(r.model, r.kv_bytes, r.ssm_bytes, r.tp, r.pp)
        return [pool_from_cells(c, r.budget_bytes, r.block_size, r.max_num_batched_tokens)]

    def kv_cache_tokens(
        self, num_blocks: Num, num_groups: Num, block_size: Num, concurrency: Num, max_model_len: Num
    ) -> Num:
        """`max_total_num_tokens`: the (full) pool's token slots."""
        return num_blocks * block_size

    def sequence_cap(self, kv_cache_tokens: Num, max_model_len: Num, state_slots: Num, slots_per_request: Num) -> Num:
        """max_running_requests as `resolve_max_num_reqs` derives it from the pool (`max_running_requests`)."""
        return max_running_requests(kv_cache_tokens, max_model_len, state_slots, slots_per_request)

    @property
    def refuses_short_pool(self) -> bool:
        """SGLang starts with any non-empty pool; the scheduler caps a request's length at the pool."""
        return False

    def start_refusal(self, request: StartRequest) -> str | None:
        """SGLang 0.5.23: no model class for the family (`sc.SGLANG_UNSERVED_FAMILIES`: the engine does not start it);
        fp8 weights need capability 80 (`Fp8Config.get_min_capability`, not mxfp8); a context length beyond the
        model's limit raises unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (`ModelConfig._derive_context_length`);
        older releases not read."""
        if request.model.family in sc.SGLANG_UNSERVED_FAMILIES:
            return f"SGLang 0.5.23 has no {request.model.architecture} model class: it does not serve this model"
        method = fp8_method(request)
        if method is not None and (refused := quantization_refusal(method, ec.SGLANG_FP8_MIN_CAPABILITY, request)):
            return refused
        return long_length_refusal(
            request, self.context_limit(request.model), "context_length", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
        )

    @property
    def conv_state_without_current(self) -> bool:
        """configs/mamba_utils.py: conv states of (conv_dim / TP, kernel - 1), as vLLM."""
        return True

    @property
    def assumed_off(self) -> frozenset[str]:
        """Speculative decoding (a draft model and its KV pool) besides LoRA and CPU offload: none of them
        sized here."""
        return UNSIZED_FEATURES

    def utilization_notes(self, context: AssumptionContext) -> list[str]:
        """The release default, against 0.05 less; then, without --engine-version, the older releases'
        default `mem_fraction_static` where it moves the KV budget."""
        out = ProfileBase.utilization_notes(self, context)
        c, d = context, context.deployment
        if d.engine_version is not None or d.gpu_memory_utilization is not None:
            return out
        method = d.speculative.method if d.speculative is not None else None
        fractions = release_default_fractions(c.inputs.model, c.gpu, c.total_bytes, d.tp, d.pp, method)
        eras = {era: f for era, f in fractions.items()
                if abs(f - c.utilization) * c.total_bytes > ASSUMPTION_SHARE * c.budget_bytes}
        if eras:
            apart = max(abs(f - c.utilization) for f in eras.values()) * c.total_bytes
            out.append(f"assumed SGLang {sc.SGLANG_VERSION} (no --engine-version): older releases default "
                       f"mem_fraction_static to " + ", ".join(f"{f} ({era})" for era, f in eras.items())
                       + f" at {d.tp * d.pp} rank(s), not {c.utilization}: up to {format_gib(apart)} of KV budget apart")
        return out


# --- defaults -------------------------------------------------------------------------------------


def device_memory_bytes(gpu: GpuSku | None, gpu_memory_bytes: int) -> int:
    """What SGLang sizes its defaults by: `utils/common.py` `get_nvgpu_memory_capacity` reads nvidia-smi's
    memory.total (MiB), a little more than torch's total (H100 SXM: 81,559 against 81,090.56 MiB). The
    catalog's `memory_total_mib_smi` where the SKU carries it and the deployment does not override the
    memory, else the driver total capplan has."""
    smi_mib = gpu.memory_total_mib_smi if gpu is not None else None
    if smi_mib and gpu is not None and gpu_memory_bytes == gpu.memory_total_bytes:
        return int(smi_mib) * ec.MIB
    return gpu_memory_bytes


def _release(version: str | None) -> tuple[int, ...] | None:
    """The release as a tuple (None: not given or unreadable, i.e. the modelled 0.5.23)."""
    if not version:
        return None
    try:
        return ec.parse_version(version)
    except ValueError:
        return None


def _release_post(version: str | None) -> tuple[int, ...] | None:
    """The release with its post number as a fourth part ('0.4.6.post2' -> (0, 4, 6, 2), '0.4.6' -> (0, 4, 6)):
    the default fraction changed between post releases of 0.4.6 and 0.4.7."""
    release = _release(version)
    post = _POST_RELEASE.search(version or "")
    if release is None or post is None:
        return release
    major, minor, patch = (*release, 0, 0)[:3]
    return (major, minor, patch, int(post.group(1)))


_POST_RELEASE = re.compile(r"\.post(\d+)")


def memory_tiers(version: str | None = None) -> tuple[sc.SglangMemoryTier, ...]:
    """`_handle_gpu_memory_settings`'s tiers of the release: 0.5.3-0.5.19 had a smaller < 35 GiB tier (chunked
    prefill 2048, decode graphs to 16 / 24 below TP 4 and 80 from TP 4) than 0.5.20 on (4096, 48 / 160)."""
    release = _release(version)
    if release is None or release >= sc.SGLANG_TIER35_OLD_BEFORE:
        return sc.SGLANG_MEMORY_TIERS
    chunked, bs, bs_tp4 = sc.SGLANG_TIER35_OLD
    if release < sc.SGLANG_TIER35_BS16_BEFORE:
        bs = sc.SGLANG_TIER35_OLD_BS_BEFORE_0_5_5
    return tuple(sc.SglangMemoryTier(t.below_mib, chunked, bs, bs_tp4) if t.below_mib == 35 * 1024 else t
                 for t in sc.SGLANG_MEMORY_TIERS)  # fmt: skip


def memory_tier(gpu_memory_bytes: int, version: str | None = None) -> sc.SglangMemoryTier:
    """`handle_gpu_memory_settings`: the tier of a device by its memory in MiB (nvidia-smi memory.total)."""
    gpu_mib = gpu_memory_bytes / ec.MIB
    tiers = memory_tiers(version)
    for tier in tiers:
        if tier.below_mib is None or gpu_mib < tier.below_mib:
            return tier
    return tiers[-1]


def chunked_prefill_size(gpu_memory_bytes: int, version: str | None = None) -> int:
    return memory_tier(gpu_memory_bytes, version).chunked_prefill_size


def decode_cuda_graph_max_bs(gpu_memory_bytes: int, tp: int, version: str | None = None) -> int:
    tier = memory_tier(gpu_memory_bytes, version)
    return tier.cuda_graph_max_bs if tp < 4 else tier.cuda_graph_max_bs_tp4


def prefill_cuda_graph_sizes(max_tokens: int) -> list[int]:
    """`cuda_graph_hook.generate_prefill_cuda_graph_batch_sizes`: the token counts prefill graphs capture."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_tokens + 1, 512))
    )
    return [s for s in sizes if s <= max_tokens]


def reserved_mib(
    gpu_memory_bytes: int, tp: int, pp: int, *, mla: bool, version: str | None = None, attention_dp: int = 1,
    cuda_graphs: bool = True, prefill_graphs: bool = True, max_running_requests: int | None = None,
    decode_max_bs: int | None = None,
) -> float:
    """`handle_gpu_memory_settings` reserved_mem (MiB) with the default graphs (decode: full; prefill:
    breakable on CUDA, `cuda_graph_config.default_prefill_backend`), `attention_dp` DP-attention ranks and no
    DeepEP; for a 0.5.3-0.5.19 `version` that release's tiers (`memory_tiers`), before 0.5.10 no prefill-graph
    term (piecewise graphs off). `cuda_graphs` False (`--disable-cuda-graph`): from 0.5.14 neither graph term;
    `prefill_graphs` False (the model's, `prefill_graphs_allowed`): no prefill-graph term; `max_running_requests`
    (--max-running-requests) below the default decode graph batch lowers it from 0.5.22; `decode_max_bs` (the
    decode graphs' largest batch, given) replaces the default and is never lowered."""
    chunked = chunked_prefill_size(gpu_memory_bytes, version)
    reserved: float = sc.SGLANG_RESERVE_BASE_MIB
    reserved += max(chunked, sc.SGLANG_RESERVE_MIN_ACTIVATION_TOKENS) * sc.SGLANG_RESERVE_PER_ACTIVATION_TOKEN_MIB
    reserved += tp * pp / 8 * sc.SGLANG_RESERVE_PER_8_RANKS_MIB
    # reserve_for_graph_mb: decode graphs (padding per DP-attention rank on top), then prefill graphs
    # (non-torch memory only; MLA a flat 1.5 GiB)
    max_bs = decode_max_bs or decode_cuda_graph_max_bs(gpu_memory_bytes, tp, version)
    release = _release(version)
    capped = release is None or release >= sc.SGLANG_DECODE_GRAPHS_CAPPED_BY_RUNNING_FROM
    if max_running_requests and capped and decode_max_bs is None:
        max_bs = min(max_bs, max_running_requests)
    follows_backends = release is None or release >= sc.SGLANG_GRAPH_RESERVE_FOLLOWS_BACKENDS_FROM
    captured = cuda_graphs or not follows_backends  # what the reserve counts as captured
    if captured:
        reserved += max_bs * sc.SGLANG_RESERVE_PER_DECODE_GRAPH_BS_MIB
    if attention_dp > 1:
        reserved += max_bs * attention_dp * sc.SGLANG_RESERVE_DP_ATTENTION_PER_BS_MIB
        if max_bs > sc.SGLANG_RESERVE_DP_ATTENTION_LARGE_BS_ABOVE:
            reserved += max_bs * attention_dp * sc.SGLANG_RESERVE_DP_ATTENTION_LARGE_BS_MIB
    prefill_era = release is None or release >= sc.SGLANG_PREFILL_GRAPH_RESERVE_FROM  # 0.5.3-0.5.9: no prefill graphs
    prefill_captured = captured and prefill_graphs and prefill_era
    if prefill_captured and mla:
        reserved += sc.SGLANG_RESERVE_MLA_PREFILL_GRAPHS_MIB
    elif prefill_captured:
        # prefill graphs up to the chunked prefill size; with PP the breakable graphs stop at 8,192 tokens
        prefill_max = min(chunked, sc.SGLANG_PP_PREFILL_GRAPH_MAX_TOKENS) if pp > 1 else chunked
        reserved += len(prefill_cuda_graph_sizes(prefill_max)) * sc.SGLANG_RESERVE_PER_PREFILL_GRAPH_MIB
    if gpu_memory_bytes / ec.MIB > sc.SGLANG_RESERVE_FLOOR_ABOVE_MIB:
        reserved = max(reserved, sc.SGLANG_RESERVE_FLOOR_MIB)
    return reserved


@lru_cache(maxsize=4096)  # pure; the grid asks it per model class, GPU, TP, PP and KV dtype
def mem_fraction_static(gpu_memory_bytes: int, tp: int, pp: int, *, mla: bool = False, version: str | None = None,
                        attention_dp: int = 1, speculative: SpecMethod | None = None,
                        cuda_graphs: bool = True, prefill_graphs: bool = True,
                        max_running_requests: int | None = None, decode_max_bs: int | None = None) -> float:  # fmt: skip
    """`handle_gpu_memory_settings`: round((gpu - reserved) / gpu, 3) in MiB, the text model's fraction (`defaults`
    applies the VLM factor, `vlm_mem_fraction_factor`, to multimodal checkpoints); with speculative decoding the
    release's reserve for its algorithm after the floor (`speculative_reserve_mib`)."""
    if gpu_memory_bytes <= 0:
        return sc.SGLANG_FALLBACK_MEM_FRACTION
    gpu_mib = gpu_memory_bytes / ec.MIB
    reserved = reserved_mib(
        gpu_memory_bytes, tp, pp, mla=mla, version=version, attention_dp=attention_dp, cuda_graphs=cuda_graphs,
        prefill_graphs=prefill_graphs, max_running_requests=max_running_requests, decode_max_bs=decode_max_bs,
    )
    reserved += speculative_reserve_mib(speculative, version)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def speculative_reserve_mib(method: SpecMethod | None, version: str | None) -> float:
    """MiB the release's default fraction reserves for speculative decoding with `method` (None: off), by release
    (`sc.SGLANG_SPECULATIVE_RESERVE_MIB`; None: the modelled 0.5.23): 0.4.7.post1-0.5.1 2 GiB for any algorithm; from
    0.5.2 a draft model (STANDALONE) 6 GiB, NGRAM 2 GiB in 0.5.2 and none from 0.5.3, the EAGLE family and NEXTN
    2 GiB, 4 GiB from 0.5.10; none from 0.5.14. `SpecMethod.UNKNOWN` (a log that names no algorithm) takes the EAGLE
    branch, the source's `else`."""
    if method is None:
        return 0.0
    release = version if _release(version) is not None else sc.SGLANG_VERSION  # unreadable: as the modelled release
    draft_model, ngram, other = ec.by_first_release(release, sc.SGLANG_SPECULATIVE_RESERVE_MIB, (0, 0, 0))
    if method is SpecMethod.DRAFT_MODEL:
        return float(draft_model)
    return float(ngram if method is SpecMethod.NGRAM else other)


def is_legacy_release(version: str | None) -> bool:
    """A release before 0.5 (None: the modelled 0.5.23); before 0.4.7.post1 its default fraction followed the
    parallel-size table (`legacy_mem_fraction_static`), from 0.4.7.post1 the device tier (`is_tiered_release`)."""
    release = _release(version)
    return release is not None and release < sc.SGLANG_LEGACY_RELEASES_BEFORE


def is_tiered_release(version: str | None) -> bool:
    """0.4.7.post1 <= release < 0.5.3: the default fraction reserved a fixed amount per device-memory tier
    (`SGLANG_TIERED_RESERVE_GIB`); earlier releases used the parallel-size table (`legacy_mem_fraction_static`),
    0.5.3 on `_handle_gpu_memory_settings`."""
    release = _release_post(version)
    return release is not None and sc.SGLANG_TIERED_RELEASES_FROM <= release < sc.SGLANG_TIERED_RELEASES_BEFORE


def tiered_mem_fraction_static(
    gpu_memory_bytes: int,
    tp: int,
    pp: int,
    *,
    speculative: SpecMethod | None = None,
    attention_dp: int = 1,
    version: str | None = None,
) -> float:
    """0.4.7.post1-0.5.2 `ServerArgs.__post_init__`: round((gpu - reserved) / gpu, 3) in nvidia-smi MiB, reserved =
    (base + TP x PP x per rank) GiB of the device's tier, more with speculative decoding (`speculative_reserve_mib`:
    2 GiB, 6 GiB for a draft model in 0.5.2), 4 GiB with DP attention; `version` None: a release before 0.5.2."""
    if gpu_memory_bytes <= 0:
        return sc.SGLANG_LEGACY_MEM_FRACTION_BY_RANKS[-1][1]  # gpu_mem unknown: 0.88
    gpu_mib = gpu_memory_bytes / ec.MIB
    ranks = tp * pp
    base_gib, per_rank_gib = next((base, per) for below, base, per in sc.SGLANG_TIERED_RESERVE_GIB
                                  if below is None or gpu_mib < below)  # fmt: skip
    reserved_gib = base_gib + ranks * per_rank_gib
    # the first tiered release stands in for an unnamed one: the same 2 GiB for any algorithm as up to 0.5.1
    reserved_gib += speculative_reserve_mib(speculative, version or sc.SGLANG_TIERED_FIRST_RELEASE) / 1024
    reserved_gib += sc.SGLANG_TIERED_DP_ATTENTION_GIB if attention_dp > 1 else 0.0
    return round((gpu_mib - reserved_gib * 1024) / gpu_mib, 3)


# the releases whose default fraction rules differ (the fraction's own and the speculative reserve's, by algorithm):
# (first release of the era, its last release, which is the one asked for it; None: from the oldest), oldest first
RELEASE_ERAS = (
    (None, "0.4.7"),
    ("0.4.7.post1", "0.5.1"),
    ("0.5.2", "0.5.2"),
    ("0.5.3", "0.5.4"),
    ("0.5.5", "0.5.9"),
    ("0.5.10", "0.5.13"),
    ("0.5.14", "0.5.19"),
)


def release_default_fractions(model: ModelSpec, gpu: GpuSku | None, gpu_memory_bytes: int, tp: int, pp: int,
                              speculative: SpecMethod | None = None) -> dict[str, float]:  # fmt: skip
    """The default `mem_fraction_static` of each older release era on this deployment (with speculative decoding by
    `speculative`, None: off), by era name: what an estimate without --engine-version (0.5.23's rules) should say it
    assumed where they differ. Neighbouring eras that give this deployment the same fraction are named as one."""
    merged: list[tuple[int, int, float]] = []  # (first era, last era, fraction)
    for i, (_, version) in enumerate(RELEASE_ERAS):
        profile = SglangProfile(requested_version=version)
        asked = DefaultsRequest(model, gpu, gpu_memory_bytes, 0, tp, pp, speculative=speculative)
        fraction = profile.defaults(asked).gpu_memory_utilization
        if merged and merged[-1][2] == fraction:
            merged[-1] = (merged[-1][0], i, fraction)
        else:
            merged.append((i, i, fraction))
    return {_era_name(first, last): fraction for first, last, fraction in merged}


def _era_name(first: int, last: int) -> str:
    """Eras `first`..`last` of RELEASE_ERAS as one name: "before <the next era's first release>" from the oldest,
    else "<first release>-<last release>" (one release: its name)."""
    start, end = RELEASE_ERAS[first][0], RELEASE_ERAS[last][1]
    if start is None:
        return f"before {RELEASE_ERAS[last + 1][0]}" if last + 1 < len(RELEASE_ERAS) else f"up to {end}"
    return start if start == end else f"{start}-{end}"


def legacy_mem_fraction_static(
    tp: int, pp: int, gpu_memory_bytes: int = 0, version: str | None = None, *, cuda: bool = True, speculative: bool = False
) -> float:
    """0.4.0-0.4.7 `ServerArgs.__post_init__`: 0.88 on one GPU down to 0.79 from 16 ranks (the tables counted
    `tp_size`, later TP x PP; the two agree at PP 1); from 0.4.6 only on devices up to 80 GiB, larger ones by the
    release's rule (`sc.SGLANG_LEGACY_BY_DEVICE_FROM` and the constants after it). `gpu_memory_bytes` 0 or no
    `version`: the table."""
    ranks = tp * pp
    fraction = next(f for at_least, f in sc.SGLANG_LEGACY_MEM_FRACTION_BY_RANKS if ranks >= at_least)
    release = _release_post(version)
    if release is None or release < sc.SGLANG_LEGACY_BY_DEVICE_FROM or gpu_memory_bytes <= 0:
        return fraction
    gpu_mib = gpu_memory_bytes / ec.MIB
    large = gpu_mib > sc.SGLANG_LEGACY_TABLE_UP_TO_MIB
    if release < sc.SGLANG_LEGACY_RAISED_FROM:  # 0.4.6, 0.4.6.post1
        return (gpu_mib - sc.SGLANG_LEGACY_046_RESERVE_MIB) / gpu_mib if large else fraction
    fraction = sc.SGLANG_LEGACY_LARGE_FRACTION if large else fraction
    rules_047 = release >= sc.SGLANG_LEGACY_047_FROM  # the CUDA fraction above 180,000 MiB and the draft's reserve
    speculative = speculative and rules_047
    if cuda and rules_047 and gpu_mib > sc.SGLANG_LEGACY_CUDA_ABOVE_MIB:
        return sc.SGLANG_LEGACY_CUDA_LARGE_FRACTION
    if gpu_mib > sc.SGLANG_LEGACY_RAISE_ABOVE_MIB:
        reserve = sc.SGLANG_LEGACY_RAISED_RESERVE_SPECULATIVE_MIB if speculative else sc.SGLANG_LEGACY_RAISED_RESERVE_MIB
        return min(fraction + sc.SGLANG_LEGACY_RAISE_MIB * (1 - fraction) / gpu_mib, (gpu_mib - reserve) / gpu_mib)
    return fraction * sc.SGLANG_LEGACY_SPECULATIVE_FACTOR if speculative else fraction


def serves_multimodal(model: ModelSpec, version: str | None) -> bool:
    """`ModelConfig.is_multimodal` with the default flags: a listed multimodal architecture
    (`sc.SGLANG_MULTIMODAL_ARCHITECTURES`) with a `vision_config`, except the ones SGLang serves text-only unless
    --enable-multimodal (Gemma 3, Llama 4: `sc.SGLANG_MULTIMODAL_OFF_BY_DEFAULT`). Read in the 0.5.2, 0.5.10 and
    0.5.23 wheels; 0.4.6 has no VLM adjustment, so releases before 0.5 get none. Not modelled: 0.5.23's
    `text_config` heuristic for unlisted architectures, and --language-only (which skips the adjustment)."""
    if model.vision_tower is None or is_legacy_release(version):
        return False
    arch = model.architecture
    return arch in sc.SGLANG_MULTIMODAL_ARCHITECTURES and arch not in sc.SGLANG_MULTIMODAL_OFF_BY_DEFAULT


def prefill_graphs_allowed(request: DefaultsRequest, version: str | None) -> bool:
    """Whether the release keeps its default prefill CUDA graphs for the deployment (and reserves for them): not
    for a model served multimodal (`serves_multimodal`) unless, from 0.5.19, its architecture is on SGLang's list
    validated with breakable prefill graphs; in 0.5.10-0.5.13 not with DP attention, PP > 1, LoRA, on ROCm, nor
    in 0.5.10 with speculative decoding (`_handle_piecewise_cuda_graph`)."""
    release = _release(version)
    model = request.model
    listed = model.architecture in sc.SGLANG_MULTIMODAL_PREFILL_GRAPH_ARCHITECTURES and (
        release is None or release >= sc.SGLANG_MULTIMODAL_PREFILL_GRAPHS_LISTED_FROM
    )
    if serves_multimodal(model, version) and not listed:
        return False
    if release is None or not sc.SGLANG_PREFILL_GRAPH_RESERVE_FROM <= release < sc.SGLANG_GRAPH_RESERVE_FOLLOWS_BACKENDS_FROM:
        return True
    rocm = request.gpu is not None and request.gpu.vendor == "amd"
    speculative = request.speculative is not None and release < sc.SGLANG_PIECEWISE_SPECULATIVE_OFF_BEFORE
    return not (request.attention_dp > 1 or request.pp > 1 or request.lora or rocm or speculative)


def vlm_mem_fraction_factor(vision_num_layers: int | None, vision_hidden_size: int | None) -> float:
    """`memory_hook.adjust_mem_fraction_for_vlm` (0.5.23; `ServerArgs.adjust_mem_fraction_for_vlm` in 0.5.2 and
    0.5.10, the same arithmetic): multimodal models keep 0.95 x (1 - 0.1 x (c - 1)) of the fraction, clamped to
    [0.8, 1.05], c = layers x hidden^2 of the vision tower over ViT-L/14's 24 x 1024^2 (SGLang's getattr
    defaults where the vision config class has no such attribute). `defaults` applies it where
    `serves_multimodal`."""
    layers = sc.SGLANG_VIT_BASELINE_LAYERS if vision_num_layers is None else vision_num_layers
    hidden = sc.SGLANG_VIT_BASELINE_HIDDEN if vision_hidden_size is None else vision_hidden_size
    ratio = layers * hidden**2 / (sc.SGLANG_VIT_BASELINE_LAYERS * sc.SGLANG_VIT_BASELINE_HIDDEN**2)
    adjustment = max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return sc.SGLANG_VLM_MEM_FRACTION_BASE * adjustment


def page_size(gpu: GpuSku | None, gpu_memory_bytes: int) -> int:
    """1 for FA3 / FlashInfer / Triton; 64 on SM100 (trtllm_mha, trtllm_mla: `_mla_backend_page_constraints`)."""
    if gpu is not None and gpu.architecture == "blackwell" and gpu_memory_bytes >= sc.SGLANG_SM100_MIN_BYTES:
        return sc.SGLANG_SM100_PAGE_SIZE
    return sc.SGLANG_PAGE_SIZE


def max_running_requests(max_total_num_tokens: Num, context_len: Num, mamba_slots: Num | None = None,
                         slots_per_request: Num = sc.SGLANG_MAMBA_SLOTS_PER_REQUEST) -> Num:  # fmt: skip
    """`KVCacheConfigurator.resolve_max_num_reqs` (0.5.23) without --max-running-requests: int(tokens / context x
    512) clamped to [2048, 4096], at most tokens // 2, and for Mamba hybrids (`mamba_slots` > 0) at most slots //
    slots per request. Over `Num`: the estimate and the grid ask the same rule (`SglangProfile.sequence_cap`)."""
    estimated = truncate(as_float(max_total_num_tokens) / at_least(context_len, 1) * sc.SGLANG_RUNNING_REQUESTS_PER_CONTEXT)
    estimated = at_least(minimum(estimated, sc.SGLANG_MAX_RUNNING_REQUESTS), sc.SGLANG_MIN_RUNNING_REQUESTS)
    requests = minimum(estimated, max_total_num_tokens // 2)
    if mamba_slots is None:
        return requests
    return choose(mamba_slots > 0, minimum(requests, mamba_slots // at_least(slots_per_request, 1)), requests)


def mamba_slots_per_request(model: ModelSpec) -> int:
    """`_calculate_mamba_ratio`: 3, plus 2 tracking slots where the radix cache takes extra_buffer."""
    extra = sc.SGLANG_MAMBA_EXTRA_BUFFER_SLOTS if model.family in sc.SGLANG_MAMBA_EXTRA_BUFFER_FAMILIES else 0
    return sc.SGLANG_MAMBA_SLOTS_PER_REQUEST + extra


# --- pools ----------------------------------------------------------------------------------------


def is_hybrid_swa(model: ModelSpec) -> bool:
    """`configs/model_config.py` `is_hybrid_swa_model`: an allow-list of architectures, not any model with
    sliding layers (Gemma 2 / 3 and Mistral keep their sliding layers in the full pool)."""
    return model.architecture in sc.SGLANG_HYBRID_SWA_ARCHITECTURES or model.family in sc.SGLANG_HYBRID_SWA_FAMILIES


# conv states are bfloat16 whatever the model (SGLANG_MAMBA_CONV_DTYPE default)
MAMBA_CONV_BYTES = 2


@dataclass(frozen=True, slots=True)
class SglangCells:
    """Bytes per token of SGLang's pools on the tightest stage, and the Mamba state of one slot."""

    full_cell: int
    swa_cell: int
    full_layers: int
    swa_layers: int
    window: int  # the widest window of the SWA pool's layers (0 without a hybrid SWA pool)
    floor_window: int  # the widest sliding (not chunked) window among them: what validate_swa_pool_size checks
    state_bytes: int  # `mamba_cache_per_req` on this stage (0 without state layers)
    state_slots_per_request: int  # `_calculate_mamba_ratio`: state slots one running request holds
    hybrid: bool  # a separate SWA pool (HybridSWAPoolConfigurator)

    @property
    def swa_denominator(self) -> float:
        """`HybridSWAPoolConfigurator._recompute_cell_size`: bytes one full-pool token costs with its
        share of the window pool."""
        return self.full_cell + sc.SGLANG_SWA_FULL_TOKENS_RATIO * self.swa_cell


def layer_cell_bytes(layer: LayerKVSpec, kv_bytes: int, tp: int) -> int:
    """One token of one layer in SGLang's pool (`_compute_cell_size`): heads x (K + V) x bytes, MLA one
    latent replicated on every rank; DSA layers add the indexer key (`_compute_dsa_indexer_cell_size`:
    index_head_dim + 4 per 128, uint8) and, with an fp8 cache, the scaled latent of
    `calculate_mla_kv_cache_dim` (`LatentAttention.page_bytes_per_token`) used by flashmla_kv, the Hopper
    default; SM100's trtllm backend keeps the raw 576 (not told apart here: 80 B per layer over)."""
    return layer.cache.page_bytes_per_token(kv_bytes, tp)


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """`distributed/utils.py` `get_pp_indices`: an even split, the remainder on the LAST stages (vLLM puts
    it on the stages before the last)."""
    base, remainder = divmod(num_layers, pp)
    return [base + (1 if rank >= pp - remainder else 0) for rank in range(pp)]


def cells(model: ModelSpec, kv_bytes: int, ssm_bytes: int, tp: int, pp: int) -> SglangCells:
    """The cell sizes of the most loaded stage (`_compute_cell_size`; MLA latents replicated under TP), per model
    object: the pool of every page size reads them."""
    return per_object(model, ("sglang/cells", kv_bytes, ssm_bytes, tp, pp), lambda: _cells(model, kv_bytes, ssm_bytes, tp, pp))


def _cells(model: ModelSpec, kv_bytes: int, ssm_bytes: int, tp: int, pp: int) -> SglangCells:
    stage = max(
        stage_layer_counts(model, pp, pp_partition),
        key=lambda s: sum(layer_cell_bytes(layer, kv_bytes, tp) * n for layer, n in s),
    )
    hybrid = is_hybrid_swa(model)
    windowed = [(layer, n) for layer, n in stage if layer.cache.window is not None]
    swa = windowed if hybrid else []
    full = [(layer, n) for layer, n in stage if layer.cache.stores_per_token_kv and (layer, n) not in swa]
    # `mamba_cache_per_req`: conv state (channels / TP, kernel - 1) in bfloat16, SSM state in its dtype
    state = max(
        sum(layer_state_bytes(layer, MAMBA_CONV_BYTES, ssm_bytes, tp, conv_without_current=True) * n for layer, n in s)
        for s in stage_layer_counts(model, pp, pp_partition)
    )
    return SglangCells(
        full_cell=sum(layer_cell_bytes(layer, kv_bytes, tp) * n for layer, n in full),
        swa_cell=sum(layer_cell_bytes(layer, kv_bytes, tp) * n for layer, n in swa),
        full_layers=sum(n for _, n in full),
        swa_layers=sum(n for _, n in swa),
        window=max((layer.cache.window or 0 for layer, _ in swa), default=0),
        floor_window=max((layer.cache.window or 0 for layer, _ in swa if not layer.cache.chunked_local), default=0),
        state_bytes=state,
        state_slots_per_request=mamba_slots_per_request(model),
        hybrid=hybrid and bool(swa) and bool(full),
    )


def mamba_state_slots(budget_bytes: Num, state_bytes: Num) -> Num:
    """`_handle_max_mamba_cache` (ratio mode, no speculative decoding): max_mamba_cache_size =
    int((rest x r / (1 + r) - per_req) // per_req), r = mamba_full_memory_ratio (0.9), rest in GiB."""
    r = sc.SGLANG_MAMBA_FULL_MEMORY_RATIO
    mamba_bytes = as_float(budget_bytes) / GIB_FLOAT * r / (1 + r) * GIB_FLOAT
    return _floor((mamba_bytes - state_bytes) / state_bytes)


def mamba_kv_bytes(budget_bytes: Num, state_bytes: Num) -> Num:
    """Bytes left for the KV pool after the state pool of K + 1 slots (the +1: each pool's padding slot)."""
    slots = mamba_state_slots(budget_bytes, state_bytes)
    rest_gib = as_float(budget_bytes) / GIB_FLOAT - (slots + 1) * state_bytes / GIB_FLOAT
    return truncate(rest_gib * GIB_FLOAT)


def _floor(value: Num) -> Num:
    import math

    import polars as pl

    if isinstance(value, pl.Expr):
        return value.floor().cast(pl.Int64)
    return math.floor(value)


def swa_pool_starts(swa_tokens: Num, sliding_window: Num, page: Num) -> Num:
    """`MemoryPoolConfigurator.validate_swa_pool_size`: refused when window + page >= the SWA pool; the window is
    the config's sliding_window (`SglangCells.floor_window`: none for chunked layers, e.g. Llama 4's, unchecked)."""
    return negate(both(sliding_window != 0, sliding_window + page >= swa_tokens))


# The pool sizes below are SGLang's rules written once over `capacity.numeric.Num`: `pool_from_cells` calls
# them with integers, the grid (`capacity.grid.sizing`) with its columns.


def hybrid_full_tokens(budget_bytes: Num, swa_denominator: Num) -> Num:
    """`HybridSWAPoolConfigurator`: the full pool's tokens before page alignment, int(budget / (full cell +
    ratio x SWA cell)) (`SglangCells.swa_denominator`); 0 without a budget."""
    return choose(budget_bytes > 0, truncate(as_float(budget_bytes) / swa_denominator), 0)


def hybrid_swa_pools(full_tokens: Num, sliding_window: Num, page: Num) -> tuple[Num, Num]:
    """(full pool tokens, SWA pool tokens) from the full pool's unaligned tokens (`hybrid_full_tokens`): both
    page-aligned, the SWA pool int(full x `swa_full_tokens_ratio`); (0, 0) where `validate_swa_pool_size`
    refuses to start (`swa_pool_starts`)."""
    full = full_tokens - full_tokens % page
    swa = truncate(as_float(full) * sc.SGLANG_SWA_FULL_TOKENS_RATIO)
    swa = swa - swa % page
    refused = both(full > 0, negate(swa_pool_starts(swa, sliding_window, page)))
    return choose(refused, 0, full), choose(refused, 0, swa)


def mamba_pool_pages(budget_bytes: Num, state_bytes: Num, slots_per_request: Num, page_bytes: Num) -> Num:
    """Pages of the KV pool of a Mamba hybrid: the state pool of K + 1 slots first (`mamba_kv_bytes`), the
    rest in pages of `page_bytes`; 0 where `_handle_max_mamba_cache` (K > 0) or `resolve_max_num_reqs` (K //
    slots per request >= 1 running request) refuses to start."""
    starts = both(budget_bytes > 0, mamba_state_slots(budget_bytes, state_bytes) >= at_least(slots_per_request, 1))
    kv_bytes = mamba_kv_bytes(budget_bytes, state_bytes)
    return choose(both(starts, both(kv_bytes > 0, page_bytes > 0)), kv_bytes // at_least(page_bytes, 1), 0)


def mamba_pool_slots(budget_bytes: Num, state_bytes: Num, pages: Num) -> Num:
    """The state slots K of the pool (SGLang's second pool) where the KV pool has `pages` (`mamba_pool_pages`),
    else 0."""
    return choose(pages > 0, mamba_state_slots(budget_bytes, state_bytes), 0)


def pool_from_cells(c: SglangCells, budget: int, page: int, batched: int) -> KVPool:
    """The pool `calculate_pool_sizes` builds from `budget` bytes (capacity 0 where SGLang refuses to start)."""
    if c.hybrid:
        full = hybrid_full_tokens(budget, c.swa_denominator)
        full_tokens, swa_tokens = hybrid_swa_pools(full, c.floor_window, page)
        return KVPool(PoolUnit.TOKEN, full_tokens, page, (KVGroup(KVKind.FULL, c.full_layers),), batched, c.full_cell,
                      swa_capacity_units=swa_tokens, swa_window_tokens=c.window,
                      swa_bytes_per_full_token=c.swa_denominator, swa_floor_tokens=c.floor_window)  # fmt: skip
    cell = c.full_cell + c.swa_cell
    groups = (KVGroup(KVKind.FULL, c.full_layers + c.swa_layers),)
    if c.state_bytes:
        # the Mamba state pool as SGLang's second pool: K slots, a request holds `slots_per_request` of them
        # (resolve_max_num_reqs: max_running_requests <= K // slots per request), no start below one request
        pages = mamba_pool_pages(budget, c.state_bytes, c.state_slots_per_request, cell * page)
        return KVPool(PoolUnit.TOKEN, pages, page, groups, batched, cell * page,
                      state_bytes_per_sequence=c.state_bytes,
                      swa_capacity_units=mamba_pool_slots(budget, c.state_bytes, pages),
                      swa_window_tokens=c.state_slots_per_request)  # fmt: skip
    tokens = budget // cell if cell and budget > 0 else 0
    tokens -= tokens % page
    return KVPool(PoolUnit.TOKEN, tokens // page, page, groups, batched, cell * page)
