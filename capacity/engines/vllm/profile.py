"""vLLM: the block pool of the hybrid KV cache manager, per release (capacity/engine_constants.py rows).

Rules followed, by upstream function (vLLM 0.33.0 unless a release row says otherwise):
- budget: `v1/worker/gpu_worker.py` determine_available_memory: total x utilization - weights -
  activation peak - non-torch memory [- CUDA-graph estimate from 0.21]; other processes' memory by release
  (`releases.OtherProcessRule`), `v1/worker/utils.py` request_memory's refusal at start;
- defaults: `engine/arg_utils.py` get_batch_defaults (by device memory and name), `platforms/cuda.py`
  block sizes (16; MLA backends' kernel blocks by release and GPU, `releases.block_size`);
- in-flight tokens: `config/vllm.py` VllmConfig.max_concurrent_batches x max_num_batched_tokens;
- pools: `v1/core/kv_cache_planning.py` (groups by spec, page unification, num_blocks = budget //
  bytes per block, every rank sized to the tightest), `v1/kv_cache_interface.py` (per-request charges);
- printed size: `v1/core/kv_cache_utils.py` (get_max_concurrency_for_kv_cache_config, the log line);
- start: `kv_cache_planning.get_kv_cache_configs` (`_check_enough_kv_cache_memory` against num_blocks
  minus the null block, `_auto_fit_max_model_len` for max_model_len -1).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, replace
from functools import cache
from typing import ClassVar

from capacity import engine_constants as ec
from capacity.dtypes import format_gib
from capacity.engines.base import ADAPTER_FEATURES, KV_CONNECTOR, ProfileBase, declares_fp8_kv_cache
from capacity.engines.kinds import Engine
from capacity.engines.protocol import ASSUMPTION_SHARE, AssumptionContext, DefaultsRequest, PoolRequest, StartRequest
from capacity.engines.start_checks import fp8_method, long_length_refusal, quantization_refusal, triton_fp8_kv_refusal
from capacity.engines.vllm.grouping import stage_pools
from capacity.engines.vllm.overhead import custom_all_reduce_on, nvls_buffer_bytes, runs_v2_model_runner, vllm_overhead
from capacity.engines.vllm.releases import (
    OtherProcessRule,
    batch_defaults,
    block_size,
    gdn_prefill_checkpoints,
    max_concurrent_batches,
    mla_heads_layout,
    multimodal_batched_floor,
    other_process_rule,
    v0_batched_tokens,
)
from capacity.engines.vllm.weights import (
    expert_layout,
    mla_absorbed_weight_bytes,
    mxfp4_expert_extra_bytes,
    triton_kernels_decides,
    wna16_moe_refusal,
)
from capacity.hf_config.overrides import OverrideRule
from capacity.numeric import Num, at_least, minimum, truncate
from capacity.overhead import EngineDefaults, Overhead, OverheadInputs
from capacity.pool import KVPool
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec

# `--kv-cache-dtype` values vLLM 0.33 accepts (config/cache.py CacheDType): no plain int8 or float32,
# and 16-bit types spelled out; the ones whose page capplan sizes, and the packed / scaled layouts
# (per-token-head scales, NVFP4, TurboQuant...) it does not model
VLLM_KV_DTYPES_SIZED = frozenset(
    {"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"}
)
VLLM_KV_DTYPES_ACCEPTED = VLLM_KV_DTYPES_SIZED | frozenset(
    {
        "nvfp4_ds_mla",
        "turboquant_k8v4",
        "turboquant_4bit_nc",
        "turboquant_k3v4_nc",
        "turboquant_3bit_nc",
        "octave_k3v4",
        "octave_k3v3",
        "octave_k3v3_compact",
        "ultraquant_4bit",
        "int4_per_token_head",
        "int8_per_token_head",
        "fp8_per_token_head",
        "nvfp4",
        "nvfp4_4over6",
    }
)
_SPELLED_OUT = {"bf16": "bfloat16", "fp16": "float16", "half": "float16"}
_GRAPHS_IN_BUDGET_FROM = "0.21"  # the first release whose KV budget deducts the CUDA-graph estimate


@dataclass(frozen=True, slots=True)
class VllmProfile(ProfileBase):
    """One vLLM release's accounting."""

    release: ec.VllmRelease
    requested_version: str | None = None
    engine: Engine = Engine.VLLM
    v0_engine: bool = False  # the V0 engine a 0.8-0.10 release keeps beside V1 (VLLM_USE_V1=0)

    @classmethod
    def for_version(cls, version: str | None, v0_engine: bool = False, extensible_kv_cache: bool | None = None) -> VllmProfile:
        """The release's profile; `v0_engine` asks for its V0 engine, where the release has one beside V1;
        `extensible_kv_cache` False, a release that sizes its cache after warmup with that turned off."""
        return _profile(version, v0_engine, extensible_kv_cache is False)

    @property
    def version(self) -> str:
        """The release asked for: what its arguments, config and platform code decide (defaults, the MLA block
        size, the start checks)."""
        return self.requested_version or ec.VLLM_DEFAULT_VERSION

    @property
    def engine_rules_version(self) -> str:
        """The release whose worker, profiling run and sampler apply: the release's own, or for the V0 engine
        of a 0.8-0.10 release the last V0 default's."""
        return ec.VLLM_V0_RULES_VERSION if self.v0_engine else self.version

    @property
    def label(self) -> str:
        """The release as the estimate names it (its V0 engine said so)."""
        return f"{self.version} (V0 engine)" if self.v0_engine else self.version

    @property
    def overhead_calibrated(self) -> bool:
        """Fitted overhead coefficients and calibration rows exist for vLLM's releases only."""
        return True

    def ssm_cache_dtype(self, model: ModelSpec, act_dtype: str) -> str:
        """`--mamba-ssm-cache-dtype auto`: the model dtype (mamba_utils._mamba_state_dtype), except
        where a model config class overrides it (model_executor/models/config.py): Nemotron-H takes
        the config's value, else float32; Qwen3.5 the config's `mamba_ssm_dtype`."""
        if model.family == "nemotron_h":
            return model.mamba_ssm_cache_dtype if model.mamba_ssm_dtype_stated else "float32"
        if model.family.startswith("qwen3_5") and model.mamba_ssm_dtype_stated:
            return model.mamba_ssm_cache_dtype
        return act_dtype

    def defaults(self, request: DefaultsRequest) -> EngineDefaults:
        r = request
        v0 = v0_batched_tokens(self.version, r) if self.release.batch_defaults is ec.BatchDefaults.V0 else None
        seqs, batched = batch_defaults(self.release, r.gpu, r.gpu_memory_bytes, r.max_model_len, v0)
        floor = multimodal_batched_floor(r.model, self.release)
        if floor > batched:  # arg_utils then caps it at max_num_seqs x max_model_len
            batched = min(floor, seqs * max(r.max_model_len, 1))
        return EngineDefaults(
            self.release.default_gpu_memory_utilization,
            seqs,
            batched,
            block_size(r.model, r.gpu, r.kv_dtype, self.version),
            gdn_prefill_checkpoints(r.model, r.gpu, self.release),
        )

    @property
    def assumed_off(self) -> frozenset[str]:
        """LoRA and CPU offload, and a KV connector (--kv-transfer-config): its GPU buffers are not sized."""
        return ADAPTER_FEATURES | {KV_CONNECTOR}

    def overhead(self, inputs: OverheadInputs) -> Overhead:
        """The profiling run as vLLM executes it, each buffer named (capacity/engines/vllm/overhead.py)."""
        return vllm_overhead(inputs, self.release, version=self.engine_rules_version)

    def overhead_link_kind(self, tp: int, nvlink_multicast: bool, peer_link_gpus: int | None) -> Hashable:
        """The switch fabric (NCCL's non-torch term) and whether the custom all-reduce runs (the graphs' charge)."""
        return nvlink_multicast, custom_all_reduce_on(tp, peer_link_gpus)

    # the MoE layers of the profiling run gather every DP rank's tokens (`vllm_overhead`'s dispatch term)
    overhead_reads_moe_dispatch: ClassVar[bool] = True
    # every worker profiles its own stage (its weights; the sampler on the last stage only) and sizes its blocks from
    # its own free memory; the engine keeps the fewest (0.33 `kv_cache_planning.get_kv_cache_configs`; V0's
    # executors take the min of `determine_num_available_blocks` over the workers)
    budgets_per_stage: ClassVar[bool] = True
    # `--hf-overrides` (config/model.py ModelConfig.__post_init__)
    config_override_rule: ClassVar[OverrideRule | None] = OverrideRule.VLLM

    @property
    def measures_kv_after_warmup(self) -> bool:
        """vLLM 0.34's extensible KV cache: sized from the memory free after warmup and graph capture."""
        return self.release.kv_sizing is ec.KvSizing.MEASURED

    @property
    def overhead_reads_rocm(self) -> bool:  # type: ignore[override]
        """The measured sizing's margin floor is 3 GiB on ROCm, 1 GiB on CUDA (`measured_margin_bytes`)."""
        return self.measures_kv_after_warmup

    def weight_layout_extra_bytes(
        self, model: ModelSpec, tp: int, pp: int, gpu: GpuSku | None, triton_kernels: bool | None = None
    ) -> int:
        """MXFP4 experts as the release's fused-MoE backend lays them out (capacity/engines/vllm/weights.py)."""
        return mxfp4_expert_extra_bytes(model, tp, pp, gpu, self.version, triton_kernels)

    def weight_layout_kind(self, gpu: GpuSku | None) -> Hashable:
        """The MXFP4 expert layout of the release's backend on the GPU: the only thing of it the bytes read."""
        return expert_layout(gpu, self.version)

    def weight_copy_bytes(self, model: ModelSpec, tp: int, pp: int, weight_format: str) -> int:
        """V0 MLA's absorbed decode matrices (0.7.1-0.7.3; capacity/engines/vllm/weights.py)."""
        return mla_absorbed_weight_bytes(model, tp, pp, weight_format, self.release)

    def kv_budget(
        self,
        total_bytes: Num,
        utilization: Num,
        weights_bytes: Num,
        overhead_bytes: Num,
        other_bytes: Num = 0,
        device_bound_bytes: Num = 0,
    ) -> Num:
        """The profiled sizing: usable memory less weights and overhead (`ProfileBase.kv_budget`). The measured one
        (0.34, `overhead._measured_terms`): the smaller of the requested budget (total x utilization less weights
        and the overhead without its device-bound part) and the device's free memory at init (total less others'
        memory) less weights and all of the overhead."""
        if not self.measures_kv_after_warmup:
            return ProfileBase.kv_budget(self, total_bytes, utilization, weights_bytes, overhead_bytes, other_bytes)
        requested = truncate(total_bytes * utilization) - weights_bytes - overhead_bytes + device_bound_bytes
        return minimum(requested, total_bytes - other_bytes - weights_bytes - overhead_bytes)

    def other_process_charge(self, other_bytes: Num, utilization: Num) -> Num:
        """Others' memory comes off the pool only where the release reads non-torch memory device-wide (0.6.4,
        0.8.0-0.9.0: `OtherProcessRule`); elsewhere `--gpu-memory-utilization` is this instance's budget (0.34's
        measured sizing bounds it by the free memory at init instead: `kv_budget`)."""
        return other_bytes if other_process_rule(self.engine_rules_version) is OtherProcessRule.CHARGED else 0

    def start_memory_problem(self, total_bytes: int, utilization: float, other_bytes: int) -> str | None:
        """`v1/worker/utils.py` request_memory (0.33; in `gpu_worker.init_device` from 0.9.1): requested =
        ceil(total x utilization); free memory at init below it raises ValueError. On a unified-memory GPU
        (0.12+) the free memory is the host's available memory, so the host's own use counts here too."""
        if other_process_rule(self.engine_rules_version) is not OtherProcessRule.PER_INSTANCE_CHECKED:
            return None
        free, requested = total_bytes - other_bytes, math.ceil(total_bytes * utilization)
        if free >= requested:
            return None
        return (
            f"vLLM refuses to start: Free memory on device cuda:0 ({_gib2(free)}/{_gib2(total_bytes)} GiB) on "
            f"startup is less than desired GPU memory utilization ({utilization}, {_gib2(requested)} GiB). "
            "Decrease GPU memory utilization or reduce GPU memory used by other processes."
        )

    def stage_pools(self, request: PoolRequest) -> list[KVPool]:
        return stage_pools(request, self.release, mla_heads_layout(request.model, self.version))

    def max_in_flight_tokens(self, max_num_batched_tokens: int, pp: int, async_scheduling: bool | None) -> int:
        return max_concurrent_batches(self.release, pp, async_scheduling) * max_num_batched_tokens

    def kv_cache_tokens(
        self, num_blocks: Num, num_groups: Num, block_size: Num, concurrency: Num, max_model_len: Num
    ) -> Num:
        """ "GPU KV cache size: N tokens" as the release prints it."""
        if self.release.kv_cache_size_tokens_rule is ec.KVCacheSizeRule.CONCURRENCY:
            return truncate(concurrency * max_model_len)
        return num_blocks // at_least(num_groups, 1) * block_size

    @property
    def start_reserved_units(self) -> int:
        return 1 if self.release.start_reserves_null_block else 0

    @property
    def refuses_short_pool(self) -> bool:
        return True

    def start_refusal(self, request: StartRequest) -> str | None:
        """fp8 weights below the release's minimum capability (`vllm_fp8_min_capability`), an fp8 KV cache on a
        pre-Ampere GPU from 0.24 (`triton_fp8_kv_refusal`; 0.13-0.23 ran FlashInfer from 7.5), then a length
        beyond the model's limit (raised in every release read, 0.4.0.post1 to 0.33.0; the override
        VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 exists from 0.6.1, not in 0.4.0.post1, 0.5 not read)."""
        version = self.version
        release = ec.parse_version(version)
        method = fp8_method(request)
        if method is not None and (
            refused := quantization_refusal(method, ec.vllm_fp8_min_capability(version), request)
        ):
            return refused
        if release >= ec.parse_version(ec.VLLM_TRITON_FP8_KV_CHECK) and (refused := triton_fp8_kv_refusal(request)):
            return refused
        if request.allow_long_max_model_len and release < (0, 5):  # no override variable before 0.5
            request = replace(request, allow_long_max_model_len=False)
        return long_length_refusal(request, self.context_limit(request.model), "max_model_len", "VLLM_ALLOW_LONG_MAX_MODEL_LEN")

    def weights_refusal(self, model: ModelSpec, weight_format: str, expert_intermediate_ranks: int) -> str | None:
        """compressed-tensors WNA16 experts whose group scales (or packed zero points) a shard would cut
        (capacity/engines/vllm/weights.py `wna16_moe_refusal`, 0.24 on)."""
        return wna16_moe_refusal(model, weight_format, expert_intermediate_ranks, self.version)

    def engine_generation_notes(self, deployment: DeploymentSpec) -> list[str]:
        """VLLM_USE_V1=0: the V0 engine of a 0.8-0.10 release; before 0.8 V0 is the engine anyway, from 0.11
        there is none to pick (the release's own engine is sized). The extensible KV cache asked of a release
        before 0.34, which has none. A release capplan has no rules for: whose rules size it."""
        out: list[str] = []
        if self.requested_version is not None and not ec.known_vllm_release(self.requested_version):
            out.append(
                f"capplan has no rules for vLLM {self.requested_version}: sized by those of {self.release.version}, "
                f"the newest release before it that it knows (known: {ec.VLLM_SUPPORTED_VERSIONS[0]} to "
                f"{ec.VLLM_SUPPORTED_VERSIONS[-1]})"
            )
        if deployment.extensible_kv_cache is not None and ec.vllm_release(self.version).kv_sizing is ec.KvSizing.PROFILED:
            out.append(f"the extensible KV cache is vLLM 0.34's: vLLM {self.version} has none, so it is not read")
        if not deployment.vllm_v0_engine:
            return out
        if self.v0_engine:
            return [
                *out,
                f"the V0 engine of vLLM {self.version} (VLLM_USE_V1=0): its worker, profiling run and "
                f"sampler as in {ec.VLLM_V0_RULES_VERSION}, the release's own default batch and MLA backend",
            ]
        if ec.parse_version(self.version) < ec.parse_version(ec.VLLM_V0_ENGINE_FROM):
            return out
        return [
            *out,
            f"VLLM_USE_V1=0 picks nothing on vLLM {self.version}: the V0 engine is gone from {ec.VLLM_V0_ENGINE_UNTIL}",
        ]

    def context_limit(self, model: ModelSpec) -> int:
        """The derived max_model_len of the release: a YaRN entry scaled the limit up to 0.29 (original length x
        factor) and leaves the length keys as they are from 0.30 (config/model.py `_get_and_verify_max_len`,
        vllm-project/vllm#56446: in the 0.30.0 wheel, not in 0.29.0)."""
        legacy = model.context_limit_vllm_029_tokens
        if legacy is not None and ec.parse_version(self.version) < ec.parse_version(
            ec.VLLM_YARN_UNSCALED
        ):
            return legacy
        return model.context_limit_tokens

    def resolved_kv_dtype(self, model: ModelSpec, kv_dtype: str) -> str:
        """`auto` is fp8_e4m3 for a checkpoint that declares an FP8 KV cache from 0.14 on (`VLLM_KV_DTYPE_FROM_CHECKPOINT`)."""
        from_checkpoint = ec.by_first_release(self.version, ec.VLLM_KV_DTYPE_FROM_CHECKPOINT, False)
        return "fp8_e4m3" if kv_dtype == "auto" and from_checkpoint and declares_fp8_kv_cache(model) else kv_dtype

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

    def assumption_notes(self, context: AssumptionContext) -> list[str]:
        """ROCm (the overhead terms are CUDA's), the MXFP4 backend where an optional package picks it, and,
        where there is a budget, the release (where releases size the overhead differently), the FlashInfer
        sampler default and GPU peer access where it decides the all-reduce the CUDA graphs capture."""
        c, d, gpu = context, context.deployment, context.gpu
        padded = self._padded_entry_notes(c)
        if d.overhead_bytes_per_gpu is not None:
            return padded + self._mxfp4_backend_notes(c)
        out: list[str] = padded
        if gpu is not None and gpu.amd:
            out.append(
                "ROCm: the overhead terms are vLLM's CUDA rules; HIP graphs and ROCm's memory accounting differ "
                "(public MI300X logs: pools 3-5 % below these estimates, graph estimates several times CUDA's)"
            )
        out += self._mxfp4_backend_notes(c)
        if c.budget_bytes <= 0:  # the rest are shares of a budget; the one above can decide whether vLLM starts
            return out
        return (
            out
            + self._graph_margin_notes(c)
            + self._release_notes(c)
            + self._sampler_notes(c)
            + self._peer_access_notes(c)
            + self._nvls_notes(c)
        )

    def utilization_notes(self, context: AssumptionContext) -> list[str]:
        """The profiled sizing: the release default against 0.05 less (`ProfileBase`). The measured one: what 0.05
        less takes where the utilization is the release's, and where the user set one below 1.0 that keeps at least
        1 GiB of free memory out of the cache, what it keeps out (vLLM 0.34 logs a warning then,
        `measure_kv_cache_blocks`: the measured sizing needs no headroom for vLLM's own use)."""
        if not self.measures_kv_after_warmup:
            return ProfileBase.utilization_notes(self, context)
        c = context
        withheld = self._requested_shortfall_bytes(c, c.utilization)
        if c.deployment.gpu_memory_utilization is not None:
            if not 0.7 < c.utilization < 1.0 or withheld < ec.GIB:
                return []
            return [
                f"gpu_memory_utilization {c.utilization} keeps {format_gib(withheld)} of free memory out of the KV "
                f"cache: vLLM {self.version} sizes the cache from the memory measured after warmup (the extensible KV "
                "cache) and warns that its own use needs no headroom below 1.0; leave it unset unless other "
                "processes, the CPU of a unified-memory GPU or a KV connector's buffers need that memory"
            ]
        lower = self._requested_shortfall_bytes(c, c.utilization - 0.05) - withheld
        if lower <= ASSUMPTION_SHARE * c.budget_bytes:
            return []
        return [
            f"assumed gpu_memory_utilization {c.utilization:g} (the release default with the extensible KV cache); "
            f"0.05 less takes {format_gib(lower)} ({lower / c.budget_bytes:.0%}) from the KV budget"
        ]

    def _requested_shortfall_bytes(self, c: AssumptionContext, utilization: float) -> int:
        """How far the requested budget (total x utilization) falls below the device bound of the measured sizing
        (`kv_budget`): what the utilization keeps out of the cache (0 where the device bound is the tighter). The
        weights and the overhead are on both sides, so they cancel."""
        others = c.deployment.other_process_bytes
        device_side = c.total_bytes - others
        requested_side = math.trunc(c.total_bytes * utilization) + c.overhead.device_bound_bytes
        return max(0, device_side - requested_side)

    def _nvls_notes(self, c: AssumptionContext) -> list[str]:
        """NCCL's NVLink-SHARP buffers above 2 ranks on an NVLink switch board, which the reference logs (TP <= 4)
        do not show: three blind TP 8 logs on 8x H200 keep 3.6-5.3 GiB a GPU more outside the KV cache than this
        estimate charges, and vllm#9699 measured about 4.9 GiB of KV lost to NVLS at TP 8 (NCCL sizes the buffers
        by the ranks; evaluation/data/README-memory-holdout.md, "TP 8 on NVSwitch boards"). Charged where the release
        takes its memory baseline before the communicators (`VllmRelease.baseline_before_nccl`) and by 0.34's measured
        sizing (a note says how much); a note only from 0.11 to 0.33, whose baseline follows them."""
        gpu, tp = c.gpu, c.deployment.tp
        at_most = nvls_buffer_bytes(tp, gpu.nvlink_multicast) if gpu is not None else 0
        if at_most <= ASSUMPTION_SHARE * c.budget_bytes:
            return []
        if self.release.baseline_before_nccl:  # charged: created after the release's memory baseline
            return []
        if self.measures_kv_after_warmup:  # the measured sizing charges them: free memory at init lacks them
            return [
                f"TP {tp} on an NVLink switch board: {format_gib(at_most)} a GPU of NCCL's NVLS buffers is charged as "
                "missing at init (a public TP 8 measurement scaled by the ranks; the size depends on the NCCL release): "
                "with NCCL_NVLS_ENABLE=0 the pool is about that much larger"
            ]
        scaled = "" if tp == 8 else f" (about {format_gib(at_most)} at TP {tp} if it scales with the ranks, as NCCL's buffers do)"
        return [
            f"TP {tp} on an NVLink switch board: NCCL's NVLS buffers (on above 2 GPUs unless NCCL_NVLS_ENABLE=0) are "
            f"not charged here; public TP 8 logs on 8x H200 keep up to about {format_gib(ec.VLLM_NVLS_TP8_BYTES)} a GPU "
            f"more outside the KV cache than this estimate{scaled}: the pool may be that much smaller"
        ]

    def _graph_margin_notes(self, c: AssumptionContext) -> list[str]:
        """Before 0.21 the CUDA graphs are captured after the KV pool is allocated, outside the utilization
        budget (0.11.0 `v1/worker/gpu_worker.py`: initialize_from_config allocates the pool, line 307-318, then
        compile_or_warm_up_model captures, line 320-344; 0.7.3 V0 `worker/worker.py` initialize_cache, line
        306-307): what is left outside the budget must hold them. Weighed with 0.21's graph estimate (the same
        computation 0.18-0.20 print without deducting it); a note, never a refusal: graph memory before 0.18 is
        not measured, the estimate's held-out error is 0.2-2.5 GiB, and the growth of non-torch memory and of
        the allocator's reserve after the pool is not modelled."""
        if self.release.cudagraph_memory_in_budget or c.deployment.enforce_eager:
            return []
        graphs = vllm_overhead(c.inputs, ec.vllm_release(_GRAPHS_IN_BUDGET_FROM), version=_GRAPHS_IN_BUDGET_FROM)
        others = c.deployment.other_process_bytes
        outside = c.total_bytes - math.ceil(c.total_bytes * c.utilization) - others
        outside += int(self.other_process_charge(others, c.utilization))  # charged: inside the budget already
        if graphs.cuda_graph_bytes <= outside:
            return []
        return [
            f"may run out of memory capturing CUDA graphs: vLLM {self.label} captures them after allocating the "
            f"KV pool, outside --gpu-memory-utilization, and they take about {format_gib(graphs.cuda_graph_bytes)} "
            f"(0.21's estimate) against {format_gib(max(outside, 0))} left outside the budget; not refused "
            "(the graph memory of this release is not measured): lower the utilization, or --enforce-eager"
        ]

    def _padded_entry_notes(self, c: AssumptionContext) -> list[str]:
        """Why the pool's block bytes exceed the bytes per token on 0.7.2-0.7.3, or before 0.7.1 for DeepSeek's MLA
        (`releases.vllm_page_bytes_per_token`)."""
        model = c.inputs.model
        layout = mla_heads_layout(model, self.version)
        if layout is not None:
            head = "padded to 256" if layout is ec.MlaCacheLayout.HEADS_PADDED else "qk_nope + qk_rope"
            return [
                f"vLLM {self.version} has no MLA cache (from 0.7.1): it caches K and V for each KV head ({head} "
                "elements a head, config.py get_head_size), several times the latent's bytes per token shown"
            ]
        if not (self.release.mla_entry_align_bytes and model.is_mla):
            return []
        return [
            f"vLLM {self.version} pads each MLA cache entry to a multiple of {self.release.mla_entry_align_bytes} B "
            "of the model dtype (V0 worker/cache_engine.py get_cache_block_size): a block takes more than its "
            "tokens x the bytes per token"
        ]

    def _mxfp4_backend_notes(self, c: AssumptionContext) -> list[str]:
        d, version = c.deployment, self.version
        if d.triton_kernels is not None or c.weight_format != "mxfp4" or not triton_kernels_decides(c.gpu, version):
            return []
        model = c.inputs.model
        marlin, triton = (self.weight_layout_extra_bytes(model, d.tp, d.pp, c.gpu, on) for on in (False, True))
        if marlin == triton or (c.budget_bytes > 0 and abs(marlin - triton) <= ASSUMPTION_SHARE * c.budget_bytes):
            return []
        return [
            f"assumed vLLM {version} without the triton_kernels package (a pip install): the MXFP4 "
            "experts run Marlin on this GPU; with it installed by hand (--triton-kernels) "
            f"they run the OAI Triton kernels and the weights take {format_gib(marlin - triton)} "
            "less per GPU"
        ]

    def _release_notes(self, c: AssumptionContext) -> list[str]:
        if c.deployment.engine_version is not None:
            return []
        older = _profile("0.11").overhead(c.inputs)
        if abs(older.total_bytes - c.overhead.total_bytes) <= ASSUMPTION_SHARE * c.budget_bytes:
            return []
        return [
            f"assumed {self.engine.value} {self.version} (no --engine-version): on 0.11-0.16 the "
            f"overhead would be {format_gib(older.total_bytes)} instead of "
            f"{format_gib(c.overhead.total_bytes)}"
        ]

    def _sampler_notes(self, c: AssumptionContext) -> list[str]:
        version = self.engine_rules_version
        rule = ec.vllm_sampler_rule(version, runs_v2_model_runner(c.inputs.model, version))
        if rule is None or rule.flashinfer_units == rule.native_units:
            return []
        flipped = self.overhead(replace(c.inputs, flashinfer_sampler=not rule.flashinfer_default))
        if abs(flipped.total_bytes - c.overhead.total_bytes) <= ASSUMPTION_SHARE * c.budget_bytes:
            return []
        state, other = ("on", "off") if rule.flashinfer_default else ("off", "on")
        return [
            f"assumed the FlashInfer sampler {state}, vLLM {version}'s default with "
            "VLLM_USE_FLASHINFER_SAMPLER unset (0.9-0.11.0 take it wherever FlashInfer is installed); "
            f"{other}, the overhead would be {format_gib(flipped.total_bytes)} "
            f"instead of {format_gib(c.overhead.total_bytes)}"
        ]

    def _peer_access_notes(self, c: AssumptionContext) -> list[str]:
        d, gpu = c.deployment, c.gpu
        geforce = gpu is not None and gpu.geforce  # peer access refused by the stock driver: nothing to assume
        if not c.overhead.cuda_graph_bytes or d.gpu_peer_access is not None or d.disable_custom_all_reduce or geforce:
            return []
        # what --gpu-peer-access would give (DeploymentSpec's rule: it moves only TP 2 over PCIe)
        with_access = replace(d, gpu_peer_access=True).all_reduce_peer_gpus(gpu.peer_link_gpus if gpu else None)
        if with_access == c.inputs.peer_link_gpus:
            return []
        peer = self.overhead(replace(c.inputs, peer_link_gpus=with_access))
        if abs(peer.cuda_graph_bytes - c.overhead.cuda_graph_bytes) <= ASSUMPTION_SHARE * c.budget_bytes:
            return []
        with_peer, without = format_gib(peer.cuda_graph_bytes), format_gib(c.overhead.cuda_graph_bytes)
        return [
            "assumed no GPU peer access between the 2 GPUs (PCIe: vLLM's P2P test fails on many "
            "hosts): custom all-reduce off, the CUDA graphs capture NCCL's; where the test passes "
            f"(--gpu-peer-access), the graph estimate is {with_peer} instead of {without}"
        ]

    @property
    def overhead_era(self) -> str:
        return self.release.overhead_profile

    def observed_version(self, version: str | None, generation: str | None) -> str | None:
        """The stated version, else a representative release of the generation (V0 -> 0.7.3, the last
        release V0 was the default of: MLA and the chunked-prefill defaults of the late V0 logs; V1 -> 0.11:
        most undated V1 logs in the public set are from the 0.11-0.16 era)."""
        if version:
            try:
                ec.parse_version(version)
                return version
            except ValueError:
                pass
        return ec.VLLM_V0_RULES_VERSION if (generation or "").lower() == "v0" else "0.11"


@cache
def _profile(version: str | None, v0_engine: bool = False, profiled_sizing: bool = False) -> VllmProfile:
    v0_release = ec.vllm_v0_engine_release(version) if v0_engine and version is not None else None
    if v0_release is not None:
        return VllmProfile(v0_release, version, v0_engine=True)
    release = ec.vllm_release(version)
    if profiled_sizing and release.kv_sizing is ec.KvSizing.MEASURED:
        # --no-enable-extensible-kv-cache (0.34 config/vllm.py _resolve_extensible_kv_cache): the profiling run's
        # sizing, and config/cache.py resolved_gpu_memory_utilization's other default
        release = replace(
            release,
            kv_sizing=ec.KvSizing.PROFILED,
            default_gpu_memory_utilization=ec.VLLM_PROFILED_DEFAULT_UTILIZATION,
        )
    return VllmProfile(release, version)


def _gib2(n_bytes: int) -> float:
    """vLLM's `format_gib`: GiB rounded to 2 places, as its messages print them."""
    return round(n_bytes / (1 << 30), 2)
