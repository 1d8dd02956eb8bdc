"""The per-layout part, in Python: the scalar helpers called once per distinct input (engine settings
per model class x GPU x TP x PP, the KV side of a KV structure, pool shapes, weights and their
per-GPU variants, overheads), gathered as rows for the frames (`_Tables`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import product
from typing import cast

import polars as pl

from capacity.dtypes import element_bytes, kv_element_bytes
from capacity.engines import DefaultsRequest, EngineProfile, PoolRequest
from capacity.engines.base import declares_fp8_kv_cache
from capacity.engines.protocol import StartRequest
from capacity.engines.registry import engine_profile
from capacity.features.parallel_layout import RankLayout, dp_candidates, rank_layout
from capacity.grid.options import GridModel, GridOptions, grid_contexts, weight_dtype_choices
from capacity.grid.speed import _perf_kv_row, _perf_weight_row
from capacity.kv_bytes import kv_bytes_per_token, kv_bytes_per_token_per_gpu, state_bytes_per_sequence_per_gpu
from capacity.overhead import EngineDefaults, OverheadInputs
from capacity.parallel import valid_tp_sizes
from capacity.performance import efficiency_for
from capacity.pool import KVPool, PoolUnit
from capacity.serving.closed_loop import wave_share
from capacity.spec import GpuSku, ModelSpec, SpecError, StateMixer
from capacity.weights import (
    WeightFormat,
    WeightsEstimate,
    estimate_weights,
    weight_format,
    with_layout_extra,
    with_weight_copies,
)

# --- the per-layout part: the scalar helpers, called once per distinct input ----------------------


# (shape id, bytes per unit, SGLang SWA denominator, SGLang Mamba state bytes per slot and slots per
# request, the pipeline stage whose budget sizes it) per stage
_Candidate = tuple[int, int, float | None, int | None, int | None, int]
_Candidates = list[_Candidate]
# bytes per token (whole model, per GPU), state bytes per sequence, (base block size, state checkpoints, candidates) or None
_KVSide = tuple[int, int, int, list[tuple[int, bool, _Candidates]] | None]
# a pool's shape: block size, fixed units, per-block groups, group count, SGLang SWA window and floor, window terms
_Shape = tuple[int, int, int, int, int, int, tuple[tuple[int, int, int], ...]]
# a model's DP-attention x expert-parallel layouts: (engine index, tp, dp, ep) -> the GPUs (by node size) they are on
_DPPlan = dict[tuple[int, int, int, int], tuple[int, ...]]
# the (`GpuSku.nvlink_multicast`, `GpuSku.peer_link_gpus`) pairs of some GPUs, sorted
_LinkPairs = tuple[tuple[bool, int, bool], ...]  # (NVLink multicast, peer-link GPUs, AMD)


@dataclass(slots=True)
class _Registry:
    """What every model of a build shares, whichever chunk of the fleet it is planned in: the engine
    settings per (engine, model class, TP, PP, GPU), the pool shapes and the KV side of layouts."""

    options: GridOptions
    profiles: tuple[EngineProfile, ...]  # one per options.engines
    gpus: Sequence[GpuSku]
    # the per-stage shortfall columns of a layout whose stages are alike: one 0 per stage a layout can have
    no_shortfall: tuple[int, ...] = (0,)
    model_class: list[int] = field(default_factory=list)  # per model of the build
    plans: list[tuple[list[tuple[int, int]], dict[int, int | None]]] = field(default_factory=list)
    dp_plans: list[_DPPlan] = field(default_factory=list)  # per model of the build
    settings: list[tuple[object, ...]] = field(default_factory=list)
    # per (engine index, model class, TP, PP): each batch setting (max_num_seqs, max_num_batched_tokens) of the GPUs
    # that serve it, with the (`GpuSku.nvlink_multicast`, `GpuSku.peer_link_gpus`) pairs of those GPUs (the overhead
    # differs by them at TP > 1: non-torch memory, the custom all-reduce's CUDA-graph charge): the overheads a
    # deployment can ask for
    overhead_cases: dict[tuple[int, int, int, int], dict[tuple[int, int], _LinkPairs]] = field(default_factory=dict)
    block_sizes: dict[tuple[str, int], set[tuple[int, bool]]] = field(default_factory=dict)
    shapes: list[tuple[int, int, int, int, int, int, int, tuple[tuple[int, int, int], ...]]] = field(default_factory=list)
    shape_ids: dict[_Shape, int] = field(default_factory=dict)
    # the KV side of a layout depends on the model's layers only (not its parameter counts): models
    # that share them (fine-tunes, re-quantizations) share these results, keyed by `kv_view` id
    kv_views: dict[ModelSpec, int] = field(default_factory=dict)
    kv_specs: list[ModelSpec] = field(default_factory=list)
    kv_cache: dict[tuple[object, ...], object] = field(default_factory=dict)
    kv_sides: dict[tuple[int, str, int, int, int, int], _KVSide] = field(default_factory=dict)
    # the speed terms of the cached tokens per (view id, attention TP, PP, KV element bytes): `speed._perf_kv_row`
    perf_kv: dict[tuple[int, int, int, int], tuple[float, ...]] = field(default_factory=dict)
    # the GPUs an engine starts a KV view on, per (view id, engine index, weight format, KV dtype): `_starting_gpus`
    starting: dict[tuple[int, int, str, str], tuple[int, ...] | None] = field(default_factory=dict)
    # per engine profile: the GPUs grouped by the kind of weight layout its kernels give them (`_weight_variants`)
    weight_layout_kinds: dict[EngineProfile, list[tuple[GpuSku, list[int]]]] = field(default_factory=dict)
    # per engine profile: the GPUs grouped by what its start check reads of them (`_starting_gpus`)
    start_check_kinds: dict[EngineProfile, list[tuple[GpuSku, list[int]]]] = field(default_factory=dict)
    # the distinct sets of GPUs a layout is served on when not on all of them, numbered (`gpu_set`)
    gpu_sets: dict[tuple[int, ...], int] = field(default_factory=dict)
    # held while rows are built from, or added to, the registry (chunks are planned in two threads)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # the GPU frame and the settings served per GPU (`frames.served_frames`), built once per build
    served: tuple[pl.DataFrame, pl.DataFrame] | None = None
    # the engine settings a context view keeps (`tables._view_tables`): fixed once the registry is built, built once
    view_settings: pl.DataFrame | None = None
    # what of a GPU's links an engine's overhead reads at a TP and DP (`EngineProfile.overhead_link_kind`), numbered:
    # a deployment's settings row names its GPU's (`overhead_link`), an overhead row the one it was computed for
    link_ids: dict[Hashable, int] = field(default_factory=dict)
    # `overhead_link`'s answers, per (engine index, TP, DP, multicast, peer GPUs, AMD)
    link_memo: dict[tuple[int, int, int, bool, int, bool], int] = field(default_factory=dict)
    # `overhead_links`' answers, per (engine index, TP, DP, GPU link pairs)
    links_memo: dict[tuple[int, int, int, _LinkPairs], list[tuple[int, tuple[bool, int, bool]]]] = field(default_factory=dict)

    def overhead_dp(self, e: int, dp: int) -> int:
        """The DP size engine `e`'s overhead reads of a layout at DP `dp` (1 where it reads none)."""
        return dp if self.profiles[e].overhead_reads_moe_dispatch else 1

    def overhead_link(self, e: int, tp: int, dp: int, multicast: bool, peers: int, amd: bool = False) -> int:
        """The id of what engine `e`'s overhead reads at TP x DP: the DP size and, of a GPU's links, what the
        multi-GPU terms read, and whether it is a ROCm GPU where the profile reads that (a link id names one
        overhead per model, TP x PP and batch setting)."""
        key = (e, tp, dp, multicast, peers, amd)
        found = self.link_memo.get(key)
        if found is None:
            asked = self.overhead_dp(e, dp)
            profile = self.profiles[e]
            # the GPU's links move only the multi-GPU terms, and only what of them the profile reads
            kind = (
                asked,
                profile.overhead_link_kind(tp, multicast, peers) if tp * asked > 1 else None,
                amd and profile.overhead_reads_rocm,
            )
            found = self.link_memo[key] = self.link_ids.setdefault(kind, len(self.link_ids))
        return found

    def overhead_links(self, e: int, tp: int, dp: int, pairs: _LinkPairs) -> list[tuple[int, tuple[bool, int, bool]]]:
        """The link ids (`overhead_link`) engine `e`'s overhead tells apart at TP x DP among GPUs of these link
        `pairs`, each with a pair of its kind."""
        key = (e, tp, dp, pairs)
        found = self.links_memo.get(key)
        if found is None:
            kinds = {self.overhead_link(e, tp, dp, *pair): pair for pair in pairs}
            found = self.links_memo[key] = sorted(kinds.items())
        return found

    def gpu_set(self, gpu_idxs: tuple[int, ...] | None) -> int | None:
        """Id of a set of GPU indices (None: every GPU, no set)."""
        if gpu_idxs is None:
            return None
        return self.gpu_sets.setdefault(gpu_idxs, len(self.gpu_sets))

    @property
    def stage_slots(self) -> int:
        """The pipeline stages a layout of the build can have: the per-stage columns' count."""
        return len(self.no_shortfall)

    def kv_view(self, spec: ModelSpec) -> tuple[int, ModelSpec]:
        """(id, spec) of the model's KV structure: the spec without its parameter counts, one object
        per distinct structure. The KV helpers are called with this view, never with the spec, so a
        helper that ever read a parameter count would disagree with `estimate` in the tests."""
        view = replace(
            spec, layer_params=(), embedding_params=0, lm_head_params=0, final_norm_params=0, extra_params=0, notes=()
        )
        found = self.kv_views.get(view)
        if found is None:
            found = self.kv_views[view] = len(self.kv_views)
            self.kv_specs.append(view)
        return found, self.kv_specs[found]

    def shape(self, pool: KVPool, swa_window: int) -> int:
        """Id of a pool shape: block size and charge terms (what a sequence of T tokens takes)."""
        t = pool.charge_terms()
        floor = pool.swa_floor_tokens  # SGLang's validate_swa_pool_size window (0: unchecked)
        groups = len(pool.groups)
        return self.shape_id((pool.block_size, t.fixed_units, t.per_block_groups, groups, swa_window, floor, t.windowed))

    def shape_id(self, shape: _Shape) -> int:
        """Id of a pool shape given as `_Shape` (numbered in the order shapes are first met)."""
        found = self.shape_ids.get(shape)
        if found is None:
            found = self.shape_ids[shape] = len(self.shape_ids)
            self.shapes.append((found, *shape))
        return found


@dataclass(slots=True)
class _Tables:
    """Rows of the small frames built in Python for some models of a build; the deployment frame is
    their join (with the registry's settings and shapes)."""

    reg: _Registry
    rank_base: int = 0  # the first layout's `_rank`
    kv_base: int = 0  # the first KV layout's `kv_id`
    models: list[tuple[object, ...]] = field(default_factory=list)
    node: list[tuple[object, ...]] = field(default_factory=list)
    kv_layouts: list[tuple[object, ...]] = field(default_factory=list)
    # per KV layout's group (model, TP, PP, engine, DP x EP layout): its weight dtypes and their per-GPU variants
    weights: list[tuple[object, ...]] = field(default_factory=list)
    # a layout: (`_rank`, KV layout, weight row, GPU set), a KV layout x a weight row of its group served somewhere
    layouts: list[tuple[int, int, int, int | None]] = field(default_factory=list)
    # (set id, gpu_idx) of the GPU sets that GPU-specific layouts are served on (a layout row names its set):
    # the registry's sets as the build left them, copied while its lock is held
    allowed: list[tuple[int, int]] = field(default_factory=list)
    overheads: list[tuple[object, ...]] = field(default_factory=list)
    candidates: list[tuple[int, int, bool, _Candidates]] = field(
        default_factory=list
    )

    @property
    def max_limit(self) -> int:
        """The largest context limit among `models` (their max_model_len before any fitting)."""
        return max((cast(int, row[3]) for row in self.models), default=1)


def _pool_candidates(
    t: _Registry,
    profile: EngineProfile,
    spec: ModelSpec,
    kv_bytes: int,
    ssm_bytes: int,
    act_bytes: int,
    tp: int,
    pp: int,
    base_block_size: int,
    state_checkpoints: bool,
) -> list[_Candidate]:
    """(shape id, bytes per unit, SGLang SWA denominator, SGLang Mamba state bytes and slots, the pipeline stage
    whose budget sizes it) of each stage's pool, first occurrences in stage order: the deployment's budgets
    decide which stage is the tightest. Stages alike share a candidate unless the engine budgets them apart."""
    found: list[_Candidate] = []
    pools = profile.stage_pools(
        PoolRequest(spec, 0, kv_bytes, ssm_bytes, act_bytes, tp, pp, base_block_size, 0, 0, state_checkpoints)
    )
    for pool in pools:
        state = pool.state_bytes_per_sequence if pool.unit is PoolUnit.TOKEN and pool.state_bytes_per_sequence else None
        slots = pool.swa_window_tokens if state is not None else None  # state slots a request holds
        stage = pool.stage if profile.budgets_per_stage else 0
        candidate = (t.shape(pool, pool.swa_window_tokens), pool.unit_bytes, pool.swa_bytes_per_full_token, state,
                     slots, stage)  # fmt: skip
        if candidate not in found:
            found.append(candidate)
    return found


def _kv_side(
    t: _Registry,
    vid: int,
    spec: ModelSpec,
    profile: EngineProfile,
    kv_bytes: int,
    ssm_bytes: int,
    act_bytes: int,
    tp: int,
    pp: int,
    bases: list[tuple[int, bool]],
) -> _KVSide:
    """Bytes per token (whole model, per GPU), state bytes per sequence and, per base block size,
    the pool candidates of one KV layout of the KV view `vid` (`spec`); None for the candidates
    where the scalar engine refuses the layout (it raises)."""
    memo = t.kv_cache
    key: tuple[object, ...] = ("token", vid, kv_bytes)
    per_token = memo.get(key)
    if per_token is None:
        per_token = memo[key] = kv_bytes_per_token(spec, kv_bytes)
    key = ("token_gpu", vid, kv_bytes, tp, pp)
    per_token_gpu = memo.get(key)
    if per_token_gpu is None:
        per_token_gpu = memo[key] = kv_bytes_per_token_per_gpu(spec, kv_bytes, tp, pp)
    without_current = profile.conv_state_without_current
    key = ("state", vid, act_bytes, ssm_bytes, tp, pp, without_current)
    state = memo.get(key)
    if state is None:
        state = memo[key] = state_bytes_per_sequence_per_gpu(
            spec, act_bytes, ssm_bytes, tp, pp, conv_without_current=without_current
        )
    assert isinstance(per_token, int) and isinstance(per_token_gpu, int) and isinstance(state, int)
    try:
        found = [
            (
                base,
                checkpoints,
                _pool_candidates(t, profile, spec, kv_bytes, ssm_bytes, act_bytes, tp, pp, base, checkpoints),
            )
            for base, checkpoints in bases
        ]
    except (ValueError, SpecError):
        return per_token, per_token_gpu, state, None
    return per_token, per_token_gpu, state, found


def _vision(spec: ModelSpec) -> object:
    """The multimodal facts the defaults read (None for a model without a vision tower)."""
    return None if spec.vision_tower is None else (spec.architecture, spec.family, spec.vision_tower)


def _profiles(options: GridOptions) -> tuple[EngineProfile, ...]:
    return tuple(
        engine_profile(engine, options.engine_version(engine)) for engine in options.engines
    )


def _registry(models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions) -> _Registry:
    reg = _Registry(options, _profiles(options), gpus, (0,) * max((1, *options.pp_sizes)))
    gpns = sorted({gpu.gpus_per_node for gpu in gpus})
    # the engines' defaults read seven facts of a model (its context limit and whether a layer keeps a
    # window, for vLLM's v0 batch rule; whether it is MLA and whether it has a sparse-attention indexer,
    # for the block size; its state mixers, for prefill checkpoints and the v0 rule; its vision tower with
    # the architecture and family, for SGLang's VLM fraction and vLLM's multimodal batch floor and v0
    # rule; whether its checkpoint declares an FP8 KV cache, for the KV dtype `auto` runs as): one
    # representative per combination of facts is asked
    classes: dict[tuple[int, bool, frozenset[StateMixer], bool, object, bool, bool], int] = {}
    representative: list[ModelSpec] = []
    # (class, GPUs per node): the TP x PP a model of the class can be served at on such a GPU (`served_frames`
    # keeps TP within the node; PP > 1 is planned only at the node's TP): the engine settings asked for
    served_at: dict[tuple[int, int], set[tuple[int, int]]] = {}
    class_dps: dict[tuple[int, int, int], set[int]] = {}  # (engine, class, TP): the DP widths of its DP layouts
    for gm in models:
        spec = gm.spec
        key = (
            spec.context_limit_tokens,
            spec.is_mla,
            spec.state_mixers,
            spec.has_indexer,
            _vision(spec),
            spec.has_window_layers,
            declares_fp8_kv_cache(spec),
        )
        if key not in classes:
            classes[key] = len(classes)
            representative.append(gm.spec)
        reg.model_class.append(classes[key])
        valid = valid_tp_sizes(gm.spec, options.tp_sizes)
        node = {gpn: max((tp for tp in valid if tp <= gpn), default=None) for gpn in gpns}
        combos = [(tp, 1) for tp in valid]
        stages = [pp for pp in options.pp_sizes if pp <= gm.spec.num_layers]
        for tp in sorted({tp for tp in node.values() if tp is not None}):
            combos += [(tp, pp) for pp in stages]
        reg.plans.append((combos, node))
        reg.dp_plans.append(_dp_plan(reg, spec, valid) if options.dp_layouts else {})
        for e, tp, dp, _ in reg.dp_plans[-1]:
            class_dps.setdefault((e, classes[key], tp), set()).add(dp)
        for gpn, node_tp in node.items():
            at = served_at.setdefault((classes[key], gpn), set())
            at.update((tp, 1) for tp in valid if tp <= gpn)
            at.update((node_tp, pp) for pp in stages if node_tp is not None)

    link_pairs = [(gpu.nvlink_multicast, gpu.peer_link_gpus, gpu.amd) for gpu in gpus]
    for e, (engine, profile) in enumerate(zip(options.engines, reg.profiles, strict=True)):
        efficiency = [efficiency_for(engine, gpu) for gpu in gpus]  # by engine and GPU only
        share = wave_share(engine)
        cases: dict[tuple[int, int, int, int], dict[tuple[int, int], set[tuple[bool, int, bool]]]] = {}
        for cid, rep in enumerate(representative):
            for g, gpu in enumerate(gpus):
                eff, link_pair = efficiency[g], link_pairs[g]
                served_here = sorted(served_at.get((cid, gpu.gpus_per_node), ()))
                asked: dict[tuple[int, int, int, str | None], EngineDefaults] = {}
                for (tp, pp), (k, kv_dtype) in product(served_here, enumerate(options.kv_dtypes)):
                    # the DP layouts' own rows (SGLang reserves per DP-attention rank): at PP 1, their widths
                    for dp in (1, *sorted(class_dps.get((e, cid, tp), ()) if pp == 1 else ())):
                        link = reg.overhead_link(e, tp, dp, *link_pair)
                        asked_as = (tp, pp, dp, kv_dtype if profile.defaults_read_kv_dtype else None)
                        found = asked.get(asked_as)
                        if found is None:
                            limit = rep.context_limit_tokens
                            run_as = profile.resolved_kv_dtype(rep, kv_dtype)
                            request = DefaultsRequest(rep, gpu, gpu.memory_total_bytes, limit, tp, pp, run_as, attention_dp=dp)
                            found = asked[asked_as] = profile.defaults(request)
                        d = found
                        seqs = d.max_num_seqs or None
                        batched = d.max_num_batched_tokens
                        in_flight = profile.max_in_flight_tokens(batched, pp, None)
                        reg.settings.append(
                            (e, cid, tp, pp, dp, k, g, d.gpu_memory_utilization, seqs, batched, in_flight,
                             d.block_size, d.state_checkpoints, eff.memory_bandwidth, eff.compute, eff.step_overhead_s,
                             eff.allreduce_latency_s, share, link)
                        )
                        batches = cases.setdefault((e, cid, tp, pp), {})
                        batches.setdefault((d.max_num_seqs, batched), set()).add(link_pair)
                    reg.block_sizes.setdefault((engine, cid), set()).add((d.block_size, d.state_checkpoints))
        for case, batches in cases.items():
            reg.overhead_cases[case] = {batch: tuple(sorted(pairs)) for batch, pairs in sorted(batches.items())}
    return reg


# what `_registry` computes from the models, GPUs and options: another build of the same fleet can take it as is
_REGISTRY_STATE = ("model_class", "plans", "dp_plans", "settings", "overhead_cases", "block_sizes", "link_ids")
RegistryState = tuple[object, ...]


def _registry_state(reg: _Registry) -> RegistryState:
    """What `_registry` computed (the engine settings and the model classes and plans), picklable."""
    return tuple(getattr(reg, name) for name in _REGISTRY_STATE)


def _registry_from_state(gpus: Sequence[GpuSku], options: GridOptions, state: RegistryState) -> _Registry:
    """The registry `_registry` would build for the fleet whose `_registry_state` this is."""
    reg = _Registry(options, _profiles(options), gpus, (0,) * max((1, *options.pp_sizes)))
    for name, value in zip(_REGISTRY_STATE, state, strict=True):
        setattr(reg, name, value)
    return reg


def _dp_plan(reg: _Registry, spec: ModelSpec, valid: Sequence[int]) -> _DPPlan:
    """The DP x EP layouts of an MoE model per engine, each on the GPUs whose node it fills (`dp_candidates`: the
    placement's candidates, so grid rows and placements are the same layouts)."""
    plan: dict[tuple[int, int, int, int], list[int]] = {}
    for gpn in sorted({gpu.gpus_per_node for gpu in reg.gpus}):
        on = [g for g, gpu in enumerate(reg.gpus) if gpu.gpus_per_node == gpn]
        for e, profile in enumerate(reg.profiles):
            for c in dp_candidates(profile.engine, spec, [tp for tp in valid if tp <= gpn], gpn):
                plan.setdefault((e, c.tp, c.dp, c.ep), []).extend(on)
    return {key: tuple(sorted(gpus)) for key, gpus in plan.items()}


def _layouts_at(plan: _DPPlan, e: int, tp: int, pp: int) -> list[tuple[int, int, tuple[int, ...] | None]]:
    """(dp, ep, GPUs or None: every GPU) of the layouts at TP x PP on engine `e`: the TP layout, then the DP x EP
    ones at PP = 1."""
    dps = [(dp, ep, gpus) for (pe, ptp, dp, ep), gpus in plan.items() if pe == e and ptp == tp] if pp == 1 else []
    return [(1, 1, None), *sorted(dps)]


# for the PP > 1 layouts planned after the PP = 1 deployments are sized: per model (index in the
# chunk), the node TPs and the (engine, KV dtype, weight dtype) indices where PP = 1 does not fit
_PPGroups = Mapping[int, tuple[set[int], set[tuple[int, int, int]]]]


def _build_tables(
    reg: _Registry,
    models: Sequence[GridModel],
    first: int = 0,
    *,
    pp1_only: bool = False,
    pp_groups: _PPGroups | None = None,
    rank_base: int = 0,
    kv_base: int = 0,
) -> _Tables:
    """The rows of `models`, models first..first + len(models) - 1 of the registry's build: every
    layout, only the PP = 1 ones (`pp1_only`) or only the PP > 1 ones of `pp_groups`."""
    t = _build_rows(reg, models, first, pp1_only, pp_groups, _Tables(reg, rank_base, kv_base))
    with reg.lock:
        t.allowed = [(set_id, g) for gpu_idxs, set_id in reg.gpu_sets.items() for g in gpu_idxs]
    return t


def _build_rows(
    reg: _Registry,
    models: Sequence[GridModel],
    first: int,
    pp1_only: bool,
    pp_groups: _PPGroups | None,
    t: _Tables,
) -> _Tables:
    wanted: set[tuple[int, int, int]] | None = None
    for m, gm in enumerate(models):
        combos, node = reg.plans[first + m]
        if pp1_only:
            combos = [(tp, pp) for tp, pp in combos if pp == 1]
        elif pp_groups is not None:
            if m not in pp_groups:
                continue
            tps, wanted = pp_groups[m]
            combos = [(tp, pp) for tp, pp in combos if pp > 1 and tp in tps]
        with reg.lock:  # per model: a chunk's planning lets other threads use the registry between its models
            _model_rows(reg, t, m, gm, first, combos, node, wanted)
    return t


def _model_rows(
    reg: _Registry,
    t: _Tables,
    m: int,
    gm: GridModel,
    first: int,
    combos: Sequence[tuple[int, int]],
    node: Mapping[int, int | None],
    wanted: set[tuple[int, int, int]] | None,
) -> None:
    """The rows of model `m` of the chunk (`first + m` of the build) at the TP x PP `combos`: its model and node
    rows, overheads, KV layouts and layouts (only the (engine, KV dtype, weight dtype) groups `wanted`, where given)."""
    options, spec = reg.options, gm.spec
    block_sizes = reg.block_sizes
    cid = reg.model_class[first + m]
    contexts = grid_contexts(spec.context_limit_tokens, options.min_context)
    t.models.append((m, gm.repo_id, spec.family, spec.context_limit_tokens, contexts[0], contexts))
    t.node.extend((m, gpn, tp) for gpn, tp in node.items())
    vid, kv_spec = reg.kv_view(spec)
    work = _ModelWork(gm, weight_dtype_choices(spec, options.weight_dtypes), wanted, vid, kv_spec)
    # per engine, the KV dtypes asked as the engine runs them (a checkpoint's declared KV cache for `auto`)
    kv_dtypes = [[profile.resolved_kv_dtype(spec, kv) for kv in options.kv_dtypes] for profile in reg.profiles]
    for profile in reg.profiles:
        act_dtype = profile.serving_dtype(spec)
        ssm_bytes = element_bytes(profile.ssm_cache_dtype(spec, act_dtype))
        work.served_as.append((act_dtype, element_bytes(act_dtype), ssm_bytes, profile.unmodelled(spec)))
    for tp, pp in combos:
        for e, (engine, profile) in enumerate(zip(options.engines, reg.profiles, strict=True)):
            if wanted is not None and not any(g[0] == e for g in wanted):
                continue
            act_dtype, act_bytes, ssm_bytes, unmodelled = work.served_as[e]
            # the same layout objects `estimate` sizes with (`capacity.features.parallel_layout`)
            layouts_here = [
                (dp_gpus, rank_layout(profile.engine, spec, tp, dp, ep))
                for dp, ep, dp_gpus in _layouts_at(reg.dp_plans[first + m], e, tp, pp)
            ]
            dps = sorted({layout.moe_dispatch_ranks for _, layout in layouts_here})
            _overhead_rows(t, m, e, profile, spec, tp, pp, act_bytes, reg.overhead_cases.get((e, cid, tp, pp), {}), dps)
            bases = sorted(block_sizes.get((engine, cid), ()))
            for dp_gpus, layout in layouts_here:
                dp, ep = layout.dp, layout.ep
                atp = layout.attention_tp  # the TP that splits attention and its KV
                kv_rows: list[tuple[int, int, str]] = []
                for k, asked_kv in enumerate(options.kv_dtypes):
                    if wanted is not None and not any(g[:2] == (e, k) for g in wanted):
                        continue
                    kv_dtype = kv_dtypes[e][k]  # as the engine runs it (`EngineProfile.resolved_kv_dtype`)
                    kv_bytes = kv_element_bytes(kv_dtype, act_dtype)
                    side_key = (vid, engine, kv_bytes, act_bytes, atp, pp)
                    side = reg.kv_sides.get(side_key)
                    if side is None:
                        side = reg.kv_sides[side_key] = _kv_side(
                            reg, vid, kv_spec, profile, kv_bytes, ssm_bytes, act_bytes, atp, pp, bases
                        )
                    per_token, per_token_gpu, state, found = side
                    if found is None:
                        # the scalar engine cannot size this layout either (e.g. a pipeline stage
                        # that holds only KV-shared layers): no rows rather than rows it would not give
                        continue
                    perf_key = (vid, atp, pp, kv_bytes)
                    perf_kv = reg.perf_kv.get(perf_key)
                    if perf_kv is None:
                        perf_kv = reg.perf_kv[perf_key] = _perf_kv_row(kv_spec, atp, pp, kv_bytes)
                    kv_id = t.kv_base + len(t.kv_layouts)
                    candidates = [(kv_id, base, checkpoints, stages) for base, checkpoints, stages in found]
                    t.candidates.extend(candidates)
                    t.kv_layouts.append(
                        (kv_id, m, cid, e, k, engine, profile.version, asked_kv, tp, pp, dp, ep,
                         layout.dp_ranks_add_gpus, kv_dtype.startswith("fp8"),
                         act_dtype if kv_dtype == "auto" else kv_dtype,
                         per_token, per_token_gpu, state, unmodelled,
                         spec.num_experts, spec.num_experts_per_token, spec.hidden_size, *perf_kv)
                    )  # fmt: skip
                    kv_rows.append((kv_id, k, kv_dtype))
                if kv_rows:
                    _layout_rows(t, work, e, profile, layout, pp, dp_gpus, kv_rows)


@dataclass(slots=True)
class _ModelWork:
    """What the layouts of one model share while its rows are built: its weight dtypes, the (engine, KV dtype,
    weight dtype) groups wanted (None: all), and the weights and starting GPUs computed so far."""

    gm: GridModel
    dtypes: list[tuple[str, bool, bool]]
    wanted: set[tuple[int, int, int]] | None
    kv_view_id: int  # `_Registry.kv_view` of the model: its layers without parameter counts
    kv_view: ModelSpec
    # per engine: the serving dtype, its and the state cache's element bytes, what the profile does not model
    served_as: list[tuple[str, int, int, str | None]] = field(default_factory=list)
    weights: dict[tuple[object, ...], WeightsEstimate] = field(default_factory=dict)
    # the weights' speed terms of a layout (`speed._perf_weight_row`), keyed by what they read of it: the engine only
    # through the weight format and the serving dtype it resolves, so engines that resolve them alike share the row
    perf: dict[tuple[object, ...], tuple[object, ...]] = field(default_factory=dict)
    # the distinct weight formats the engines resolve the model's dtypes to, and each (dtype, engine)'s index there
    formats: list[WeightFormat] = field(default_factory=list)
    format_ids: dict[tuple[str, str], int] = field(default_factory=dict)

    def format_id(self, spec: ModelSpec, weight_dtype: str, profile: EngineProfile) -> int:
        """The index of `weight_format(spec, weight_dtype, engine)` among the formats met: engines that resolve a dtype
        to equal formats get one index (a key that hashes no Fraction)."""
        key = (weight_dtype, profile.engine)
        found = self.format_ids.get(key)
        if found is None:
            fmt = weight_format(spec, weight_dtype, profile.engine)
            found = self.format_ids[key] = next((i for i, f in enumerate(self.formats) if f == fmt), len(self.formats))
            if found == len(self.formats):
                self.formats.append(fmt)
        return found


def _layout_rows(
    t: _Tables,
    work: _ModelWork,
    e: int,
    profile: EngineProfile,
    layout: RankLayout,
    pp: int,
    dp_gpus: tuple[int, ...] | None,
    kv_rows: Sequence[tuple[int, int, str]],
) -> None:
    """The layouts of one group of KV layouts (`kv_rows`: id, KV dtype index and name; one per KV dtype of a model,
    TP x PP, engine and DP x EP layout): its weight rows (one per weight dtype and per group of GPUs whose weights
    differ, whatever the KV dtype), then one layout per KV layout and weight row, on the GPUs the engine starts
    it on (and, for a DP x EP layout, whose node it fills)."""
    reg, gm, spec, tp, starting, wanted = t.reg, work.gm, work.gm.spec, layout.tp, t.reg.starting, work.wanted
    shards = None if layout.plain else layout.weight_shards(spec)
    act_dtype = work.served_as[e][0]
    weight_rows: list[tuple[int, int, str, tuple[int, ...] | None]] = []  # (weight index, row, format, GPUs)
    for weight_dtype, w_fp8, w_fp4 in work.dtypes:
        w_idx = reg.options.weight_dtypes.index(weight_dtype)
        if wanted is not None and not any((e, k, w_idx) in wanted for _, k, _ in kv_rows):
            continue
        wkey = (weight_dtype, tp, pp, act_dtype, layout.dp, layout.ep)
        w = work.weights.get(wkey)
        if w is None:
            # `engine` reaches the weights only through the serving dtype
            w = work.weights[wkey] = estimate_weights(
                spec, weight_dtype, tp, pp, gm.checkpoint_bytes, profile.engine, shards
            )
        if profile.weights_refusal(spec, w.format_name, layout.expert_ranks // layout.ep) is not None:
            continue  # the engine refuses to load these weights split this way, whatever the GPU
        fmt = work.format_id(spec, weight_dtype, profile)  # what the speed terms read of the engine
        for per_gpu_bytes, gpu_idxs in _weight_variants(reg, profile, spec, tp, pp, w):
            gpu_idxs = _within(gpu_idxs, dp_gpus)
            if gpu_idxs == ():
                continue
            pkey = (fmt, act_dtype, weight_dtype, pp, per_gpu_bytes, w.format_name, layout)
            perf = work.perf.get(pkey)
            if perf is None:
                variant = w if per_gpu_bytes == w.per_gpu_bytes else replace(w, per_gpu_bytes=per_gpu_bytes)
                perf = work.perf[pkey] = _perf_weight_row(spec, tp, pp, weight_dtype, profile.engine, variant, layout)
            row = len(t.weights)
            t.weights.append(
                (row, w_idx, weight_dtype, w_fp8, w_fp4, w.format_name, w.source, per_gpu_bytes, *perf,
                 *_stage_slots(w.stage_shortfall_bytes, reg.no_shortfall))
            )  # fmt: skip
            weight_rows.append((w_idx, row, w.format_name, gpu_idxs))
    for kv_id, k, kv_dtype in kv_rows:
        for w_idx, row, format_name, gpu_idxs in weight_rows:
            if wanted is not None and (e, k, w_idx) not in wanted:
                continue
            key = (work.kv_view_id, e, format_name, kv_dtype)
            if key not in starting:
                # asked of the KV view: the start checks read the layers, the GPU and the formats, never a parameter
                # count, so the models that share a view share the answer (a check that read one would disagree
                # with `estimate` in tests/test_grid.py)
                starting[key] = _starting_gpus(reg, profile, work.kv_view, format_name, kv_dtype)
            served = _within(gpu_idxs, starting[key])
            if served == ():
                continue  # the engine refuses this layout on every GPU of the variant
            t.layouts.append((t.rank_base + len(t.layouts), kv_id, row, reg.gpu_set(served)))


def _overhead_rows(
    t: _Tables,
    m: int,
    e: int,
    profile: EngineProfile,
    spec: ModelSpec,
    tp: int,
    pp: int,
    act_bytes: int,
    cases: Mapping[tuple[int, int], _LinkPairs],
    dps: Iterable[int] = (1,),
) -> None:
    """The overhead rows of model `m` on engine `e` at TP x PP: one per batch setting of the GPUs that serve it,
    DP size of the layouts there (`RankLayout.moe_dispatch_ranks`: the tokens vLLM's MoE layers gather) and what of
    the links of the GPUs with that setting the profile's overhead reads there (`_Registry.overhead_link`; a third
    of the pairs of a batch setting and a link no GPU has together), each computed once per DP size it reads."""
    reg = t.reg
    for (seqs, batched), pairs in cases.items():
        computed: dict[int, tuple[int, ...]] = {}  # per link id (it holds the DP size read): the row's values
        for dp in dps:
            asked = reg.overhead_dp(e, dp)
            for link, (multicast, peers, amd) in reg.overhead_links(e, tp, dp, pairs):
                values = computed.get(link)
                if values is None:
                    # the totals only: the grid reads no named term
                    inputs = OverheadInputs(
                        spec, tp, pp, batched, seqs or None, act_bytes, multicast, peers, moe_dp_ranks=asked, rocm=amd,
                        named_terms=False,
                    )
                    row = profile.overhead(inputs)
                    values = computed[link] = (
                        row.activation_peak_bytes, row.non_torch_bytes, row.cuda_graph_bytes,
                        *_stage_slots(row.stage_shortfall_bytes, reg.no_shortfall),
                    )  # fmt: skip
                t.overheads.append((m, e, tp, pp, dp, seqs or None, batched, link, *values))


def _stage_slots(shortfall: tuple[int, ...], zeros: tuple[int, ...]) -> tuple[int, ...]:
    """PP > 1: per pipeline stage, the bytes fewer than the most loaded stage (weights, overhead), in as many
    columns as `zeros` (`_Registry.no_shortfall`; 0: a stage like the most loaded one, or no such stage)."""
    return (*shortfall, *zeros[len(shortfall) :]) if shortfall else zeros


def _starting_gpus(
    reg: _Registry, profile: EngineProfile, spec: ModelSpec, weight_format: str, kv_dtype: str
) -> tuple[int, ...] | None:
    """The GPUs the engine starts the layout on (`EngineProfile.start_refusal` at the model's limit, the
    length the grid plans, as `estimate` asks it), asked once per kind of GPU (`start_check_kind`); None
    where it refuses none."""
    kinds = reg.start_check_kinds.get(profile)
    if kinds is None:
        kinds = reg.start_check_kinds[profile] = _by_kind(reg.gpus, profile.start_check_kind)
    limit = spec.context_limit_tokens
    refused = [
        members
        for gpu, members in kinds
        if profile.start_refusal(StartRequest(spec, gpu, weight_format, limit, kv_dtype=kv_dtype)) is not None
    ]
    if not refused:
        return None
    out = {g for members in refused for g in members}
    return tuple(g for g in range(len(reg.gpus)) if g not in out)


def _within(gpu_idxs: tuple[int, ...] | None, starting: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """A weight variant's GPUs (None: all) less those the engine refuses the layout on."""
    if starting is None:
        return gpu_idxs
    if gpu_idxs is None:
        return starting
    allowed = set(starting)  # membership in a tuple of tens of GPUs would walk it per GPU
    return tuple(g for g in gpu_idxs if g in allowed)


def _weight_variants(
    reg: _Registry, profile: EngineProfile, spec: ModelSpec, tp: int, pp: int, w: WeightsEstimate
) -> list[tuple[int, tuple[int, ...] | None]]:
    """The layout's weights per GPU as `weights.with_layout_extra` gives them: one value for every GPU
    (None: no restriction), or one per group of GPUs whose kernels lay the weights out alike."""
    if w.format_name != "mxfp4":  # with_layout_extra's own condition, checked once rather than per GPU
        return [(with_weight_copies(w, profile, spec, tp, pp).per_gpu_bytes, None)]
    kinds = reg.weight_layout_kinds.get(profile)
    if kinds is None:
        kinds = reg.weight_layout_kinds[profile] = _by_kind(reg.gpus, profile.weight_layout_kind)
    by_bytes: dict[int, list[int]] = {}
    for gpu, members in kinds:  # the bytes are asked once per kind of GPU (`EngineProfile.weight_layout_kind`)
        by_bytes.setdefault(with_layout_extra(w, profile, spec, tp, pp, gpu).per_gpu_bytes, []).extend(members)
    if len(by_bytes) <= 1:
        return [(next(iter(by_bytes), w.per_gpu_bytes), None)]
    return [(per_gpu, tuple(sorted(gpus))) for per_gpu, gpus in by_bytes.items()]


def _by_kind(gpus: Sequence[GpuSku], kind: Callable[[GpuSku], Hashable]) -> list[tuple[GpuSku, list[int]]]:
    """The GPUs grouped by `kind`: (the first GPU of a kind, the indices of all of them), in order of first index."""
    groups: dict[Hashable, tuple[GpuSku, list[int]]] = {}
    for g, gpu in enumerate(gpus):
        groups.setdefault(kind(gpu), (gpu, []))[1].append(g)
    return list(groups.values())
