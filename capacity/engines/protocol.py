"""What capplan asks a serving engine (`EngineProfile`), and the requests it asks with.

The requests are frozen dataclasses, so a new input is one field, not an eleventh positional parameter
copied into every profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Hashable

    from capacity.engines.kinds import Engine
    from capacity.features.speculative import SpecMethod
    from capacity.hf_config.overrides import OverrideRule
    from capacity.numeric import Num
    from capacity.overhead import EngineDefaults, Overhead, OverheadInputs
    from capacity.pool import KVPool
    from capacity.spec import DeploymentSpec, GpuSku, ModelSpec

ASSUMPTION_SHARE = 0.05  # an unstated input is named when its plausible range moves the KV budget by more


@dataclass(frozen=True, slots=True)
class DefaultsRequest:
    """What an engine's defaults depend on: the model, the GPU, the length and layout served, the KV dtype."""

    model: ModelSpec
    gpu: GpuSku | None
    gpu_memory_bytes: int
    max_model_len: int
    tp: int
    pp: int
    kv_dtype: str = "auto"
    # the features whose presence an engine's defaults read (vLLM V0 keeps chunked prefill off with them)
    lora: bool = False
    speculative: SpecMethod | None = None  # the speculative method (None: off); SGLang's reserve reads which
    prefix_caching: bool | None = None  # None: the engine's default
    attention_dp: int = 1  # attention data-parallel ranks (SGLang reserves graph padding per rank)
    cuda_graphs: bool = True  # False: none captured (vLLM --enforce-eager, SGLang --disable-cuda-graph)
    max_num_seqs: int | None = None  # the deployment's cap on running sequences (None: the engine's default)
    cuda_graph_max_batch: int | None = None  # the largest decode batch graphs are captured for (None: the default)


@dataclass(frozen=True, slots=True)
class PoolRequest:
    """What a pipeline stage's KV pool is built from: the budget, the element sizes, the layout and
    batch limits. `state_checkpoints`: what `EngineProfile.defaults` says for the GPU."""

    model: ModelSpec
    budget_bytes: int
    kv_bytes: int
    ssm_bytes: int
    act_bytes: int
    tp: int
    pp: int
    block_size: int
    max_num_batched_tokens: int
    max_in_flight_tokens: int
    state_checkpoints: bool = False
    hybrid_manager_allowed: bool = True  # False: a KV connector without HMA support turns vLLM's off (features.offload)
    # each pipeline stage's own budget where the stages' weights or activations differ (vLLM profiles every worker
    # and sizes each from its own free memory: `stage_budgets`); empty: `budget_bytes` on every stage
    stage_budget_bytes: tuple[int, ...] = ()

    def stage_budget(self, stage: int) -> int:
        """The KV budget of pipeline stage `stage` (never negative: a negative budget builds an empty pool)."""
        if stage < len(self.stage_budget_bytes):
            return max(self.stage_budget_bytes[stage], 0)
        return self.budget_bytes


@dataclass(frozen=True, slots=True)
class StartRequest:
    """What an engine checks before it sizes anything: the model, the GPU, the weight format it runs
    (`WeightsEstimate.format_name`), the max_model_len asked, whether the long-length override is set, the KV dtype."""

    model: ModelSpec
    gpu: GpuSku | None
    weight_format: str
    max_model_len: int
    allow_long_max_model_len: bool = False
    kv_dtype: str = "auto"  # the `--kv-cache-dtype` asked, lower case


@dataclass(frozen=True, slots=True)
class AssumptionContext:
    """What the estimate resolved, for the notes that name an input the deployment leaves unstated
    when its plausible range moves the KV budget by more than `ASSUMPTION_SHARE`."""

    deployment: DeploymentSpec
    gpu: GpuSku | None
    total_bytes: int
    utilization: float
    overhead: Overhead
    budget_bytes: int
    inputs: OverheadInputs
    weight_format: str


class EngineProfile(Protocol):
    """What capplan asks a serving engine (one release of it)."""

    @property
    def engine(self) -> Engine:
        """Which engine this profile speaks for."""

    @property
    def version(self) -> str | None:
        """The release whose rules are in force (None: the engine has no versioned rules here)."""

    @property
    def engine_rules_version(self) -> str | None:
        """The release whose engine internals (worker, profiling run, sampler) apply: `version`, except where a
        release keeps an older engine beside its own (vLLM 0.8-0.10's V0 engine)."""

    @property
    def overhead_calibrated(self) -> bool:
        """Whether fitted overhead coefficients and calibration rows exist for this engine (vLLM only)."""

    def serving_dtype(self, model: ModelSpec) -> str:
        """The dtype activations and `auto` KV use."""

    def ssm_cache_dtype(self, model: ModelSpec, act_dtype: str) -> str:
        """The dtype of a state layer's recurrent (SSM) state."""

    def defaults(self, request: DefaultsRequest) -> EngineDefaults:
        """Utilization, batch limits and block size the engine picks when the deployment does not say."""

    def overhead(self, inputs: OverheadInputs) -> Overhead:
        """Non-KV, non-weight memory per GPU: activation peak, non-torch memory, CUDA graphs. The GPU's
        links (`inputs.nvlink_multicast`, `peer_link_gpus`) may move only what TP > 1 adds."""

    @property
    def overhead_note(self) -> str | None:
        """What the estimate says about the overhead it charges when none is given (plain: none)."""

    @property
    def config_override_rule(self) -> OverrideRule | None:
        """How the engine's config-override flag applies its JSON (None: the engine has no such flag)."""

    @property
    def overhead_reads_moe_dispatch(self) -> bool:
        """Whether `overhead` reads `OverheadInputs.moe_dp_ranks` (the DP ranks' tokens an MoE layer gathers)."""

    @property
    def overhead_reads_rocm(self) -> bool:
        """Whether `overhead` reads `OverheadInputs.rocm` (vLLM 0.34's margin floor is larger on ROCm)."""

    @property
    def defaults_read_kv_dtype(self) -> bool:
        """Whether `defaults` reads `DefaultsRequest.kv_dtype` (vLLM's block size does); where not, a planner asks
        the defaults once for every KV dtype."""

    @property
    def budgets_per_stage(self) -> bool:
        """Whether each pipeline stage's pool is sized from that stage's own budget (its own weights and overhead:
        `PoolRequest.stage_budget_bytes`), every rank then keeping the fewest blocks; else one budget, the most
        loaded stage's, for every stage."""

    def weight_layout_extra_bytes(
        self, model: ModelSpec, tp: int, pp: int, gpu: GpuSku | None, triton_kernels: bool | None = None
    ) -> int:
        """Weight bytes per GPU the engine's kernels keep beyond the checkpoint's format (padding, re-layouts);
        `triton_kernels`: the optional package beside the engine (None: a plain install)."""

    def weight_layout_kind(self, gpu: GpuSku | None) -> Hashable:
        """What of the GPU `weight_layout_extra_bytes` reads (the kernels' layout, without the optional package):
        GPUs of one kind get the same bytes, so a fleet asks once per kind."""

    def engine_generation_notes(self, deployment: DeploymentSpec) -> list[str]:
        """What the deployment's `vllm_v0_engine` (VLLM_USE_V1=0) chose, one line each (none where not asked)."""

    def overhead_link_kind(self, tp: int, nvlink_multicast: bool, peer_link_gpus: int | None) -> Hashable:
        """What of the GPU's links (`OverheadInputs.nvlink_multicast`, `peer_link_gpus`) `overhead` reads at this TP:
        links of one kind give the same overhead, so a fleet asks once per kind."""

    def start_check_kind(self, gpu: GpuSku | None) -> Hashable:
        """What of the GPU `start_refusal` reads to decide (the message may name the GPU): GPUs of one kind
        start or refuse a layout alike, so a fleet asks once per kind."""

    def weight_copy_bytes(self, model: ModelSpec, tp: int, pp: int, weight_format: str) -> int:
        """Weight bytes per GPU the engine derives at load and keeps beside the raw weights (vLLM 0.7.1-0.7.3's
        absorbed MLA matrices), whatever the GPU; `weight_format`: `WeightsEstimate.format_name`."""

    def kv_budget(
        self,
        total_bytes: Num,
        utilization: Num,
        weights_bytes: Num,
        overhead_bytes: Num,
        other_bytes: Num = 0,
        device_bound_bytes: Num = 0,
    ) -> Num:
        """Bytes per GPU left for the KV cache (Python ints or Polars expressions); `other_bytes`: memory
        other processes hold on the GPU when the engine starts (each engine and release counts it its way);
        `device_bound_bytes`: `Overhead.device_bound_bytes`, the part of the overhead only the device's free memory
        charges (0 at the release's default utilization, where the device bound is the tighter one)."""

    def start_memory_problem(self, total_bytes: int, utilization: float, other_bytes: int) -> str | None:
        """The engine's refusal to start when other processes leave less free memory than it asks for
        (None: it starts, or it does not check)."""

    def stage_pools(self, request: PoolRequest) -> list[KVPool]:
        """The pool each pipeline stage builds from `request.budget_bytes`, in stage order (the engine
        sizes every rank to the tightest one). Raises SpecError / ValueError where the engine cannot."""

    def max_in_flight_tokens(self, max_num_batched_tokens: int, pp: int, async_scheduling: bool | None) -> int:
        """Tokens scheduled but not settled that a windowed layer keeps blocks for."""

    def kv_cache_tokens(
        self, num_blocks: Num, num_groups: Num, block_size: Num, concurrency: Num, max_model_len: Num
    ) -> Num:
        """What the engine prints as its KV cache size in tokens."""

    def sequence_cap(self, kv_cache_tokens: Num, max_model_len: Num, state_slots: Num, slots_per_request: Num) -> Num:
        """The running-sequence cap the engine derives from its pool when the user sets none (0: none);
        `state_slots` / `slots_per_request`: a Mamba hybrid's state slots (0 for other models)."""

    @property
    def start_reserved_units(self) -> int:
        """Units of the pool the start check holds back (vLLM 0.33: the null block)."""

    @property
    def refuses_short_pool(self) -> bool:
        """True when the engine refuses to start unless one request of max_model_len fits."""

    @property
    def budget_is_fraction_of_free(self) -> bool:
        """True when `kv_budget` takes the fraction of what is free after weights and overhead (TensorRT-LLM),
        not usable memory (total x fraction) less them: the derivation writes the budget line that way."""

    def context_limit(self, model: ModelSpec) -> int:
        """The longest max_model_len the release derives from the model's config (rope scaling as it reads it)."""

    def start_refusal(self, request: StartRequest) -> str | None:
        """The engine's own one-line message where it refuses to start this layout before sizing any
        memory (a weight format the GPU generation cannot run, a length beyond the model's limit); None: starts."""
        ...

    def weights_refusal(self, model: ModelSpec, weight_format: str, expert_intermediate_ranks: int) -> str | None:
        """The engine's own message where it refuses to load the checkpoint's weights split this way, on any GPU
        (vLLM: compressed-tensors WNA16 experts whose group scales a TP shard would cut); `expert_intermediate_ranks`:
        the ranks the routed experts' intermediate is split over (`RankLayout.expert_ranks // ep`). None: loads."""
        ...

    def kv_dtype_problem(self, kv_dtype: str) -> str | None:
        """Why the engine rejects a KV cache dtype (None: accepted)."""

    def resolved_kv_dtype(self, model: ModelSpec, kv_dtype: str) -> str:
        """The KV cache dtype the engine runs for `--kv-cache-dtype kv_dtype` (lower case): `auto` becomes the KV
        cache the checkpoint declares (`CheckpointQuant.kv_cache_format`) where the release reads it; else as asked."""

    @property
    def conv_state_without_current(self) -> bool:
        """The conv state keeps `kernel - 1` columns (the current token is not stored), not `kernel`."""

    def unmodelled(self, model: ModelSpec) -> str | None:
        """Why this engine's accounting of the model is not modelled (None: it is); the estimate and
        the grid then say so instead of printing a number sized as something else."""

    @property
    def assumed_off(self) -> frozenset[str]:
        """Engine features this profile does not size and the estimate says it assumed off when the
        deployment does not declare them: lora, cpu_offload, speculative."""

    def assumption_notes(self, context: AssumptionContext) -> list[str]:
        """The engine's own assumptions about unstated inputs (release, kernels, links) that move the
        KV budget, or decide whether the engine starts."""

    def utilization_notes(self, context: AssumptionContext) -> list[str]:
        """What the default memory utilization assumed, where 0.05 less (or an older release's
        default) moves the KV budget; asked only when there is a budget."""

    @property
    def overhead_era(self) -> str:
        """Which fitted overhead coefficients apply (vLLM: the release's era, e.g. 'v1-mid')."""

    def observed_version(self, version: str | None, generation: str | None) -> str | None:
        """The release to predict an observed deployment with, from what its log says."""
