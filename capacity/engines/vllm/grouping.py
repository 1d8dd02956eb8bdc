"""vLLM's KV cache grouping: the block pool of each pipeline stage (`v1/core/kv_cache_planning.py`).

A layer's spec and page are its kind class's (`capacity.kv.kinds`: `spec_key`, `page_bytes_per_token`; V0 MLA's
padded entry on 0.7.2-0.7.3 and the per-head cache of DeepSeek's MLA before 0.7.1, `releases.vllm_page_bytes_per_token`);
groups by spec, page unification, num_blocks = budget // bytes per block, every rank sized to the
tightest; per-request charges as `v1/kv_cache_interface.py` states them (KVPool.charge_terms).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import replace

from capacity import engine_constants as ec
from capacity.engines.protocol import PoolRequest
from capacity.engines.vllm.releases import vllm_page_bytes_per_token
from capacity.kv.kinds import group_charge
from capacity.kv_bytes import layer_state_bytes
from capacity.numeric import cdiv
from capacity.parallel import stage_layer_counts, stage_layers
from capacity.pool import KVGroup, KVPool, PoolUnit
from capacity.spec import KVKind, LayerKVSpec, ModelSpec, SpecError, StateMixer


def _state_checkpoint_blocks(layer: LayerKVSpec, gdn_checkpoints: bool, release: ec.VllmRelease) -> int:
    """`num_prefill_checkpoint_blocks` of a state layer's MambaSpec: Mamba-2 mixers export one from 0.32
    (mamba_mixer2.get_kv_cache_spec), GDN mixers when FlashInfer's prefill runs, Mamba-1 none."""
    mixer = layer.cache.state_mixer
    if mixer is StateMixer.MAMBA2:
        return 1 if release.mamba2_prefill_checkpoints else 0
    if mixer is StateMixer.GATED_DELTA_NET and gdn_checkpoints:
        return 1
    return 0


def hybrid_manager_on(model: ModelSpec, release: ec.VllmRelease) -> bool:
    """Whether the release runs this model with the hybrid KV cache manager."""
    if not release.hybrid_kv_cache_manager:
        return False
    has_chunked = any(layer.cache.chunked_local for layer, _ in stage_layer_counts(model, 1)[0])
    return release.hybrid_chunked_local or not has_chunked


def stage_pools(request: PoolRequest, release: ec.VllmRelease, mla_heads: ec.MlaCacheLayout | None = None) -> list[KVPool]:
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
    r = request
    model, kv_bytes, tp = r.model, r.kv_bytes, r.tp
    block_size, gdn_checkpoints = r.block_size, r.state_checkpoints
    hybrid = hybrid_manager_on(model, release) and r.hybrid_manager_allowed
    align_mode = release.mamba_align_with_prefix_caching  # MambaSpec: 2 (+ checkpoint) blocks, else 1
    # every rule below but the grouping reads a layer's shape, not its position: each stage's cache layers as
    # (a layer, the layers of its shape), and each page asked once per shape
    shaped = [
        [(layer, n) for layer, n in stage if layer.cache.stores_per_token_kv or layer.cache.holds_state]
        for stage in stage_layer_counts(model, r.pp)
    ]
    shapes = [layer for stage in shaped for layer, _ in stage]
    if not shapes:
        return []
    page_per_shape = {
        layer.cache.shape_key: vllm_page_bytes_per_token(layer.cache, kv_bytes, r.act_bytes, tp, release, mla_heads)
        for layer in shapes
    }
    attn_page_per_token = max(
        (page_per_shape[layer.cache.shape_key] for layer in shapes if layer.cache.stores_per_token_kv), default=0
    )
    state_layers = [layer for layer in shapes if layer.cache.holds_state]
    state_page = max(
        (layer_state_bytes(layer, r.act_bytes, r.ssm_bytes, tp, conv_without_current=True) for layer in state_layers),
        default=0,
    )
    bs = block_size
    checkpoints = max((_state_checkpoint_blocks(layer, gdn_checkpoints, release) for layer in state_layers), default=0)
    if state_page and attn_page_per_token:
        # Platform._align_hybrid_block_size: the attention block grows, in steps of the kernel
        # alignment (its smallest kernel block or the cache block size, and in "align" mode the
        # checkpoint grid: FlashInfer GDN's 64), until its page holds the state
        align = max(ec.VLLM_HYBRID_BLOCK_ALIGN, block_size)
        gdn = any(layer.cache.state_mixer is StateMixer.GATED_DELTA_NET for layer in state_layers)
        if align_mode and gdn_checkpoints and gdn:
            align = math.lcm(align, ec.VLLM_GDN_CHECKPOINT_ALIGNMENT)
        bs = max(bs, align * cdiv(state_page, align * attn_page_per_token))
    state_blocks = 2 + checkpoints if align_mode else 1
    kinds = {layer.cache.spec_key(hybrid) for layer in shapes}

    if len(kinds) == 1 and not state_layers:
        ((kind, window),) = kinds
        return _uniform_pools(r, shaped, page_per_shape, bs, KVGroup(kind, 0, window))

    # the grouping splits buckets by position: from here, layer by layer
    stages = [
        [layer for layer in stage if layer.cache.stores_per_token_kv or layer.cache.holds_state]
        for stage in stage_layers(model, r.pp)
    ]
    stage_of = {layer.index: s for s, stage in enumerate(stages) for layer in stage}
    # buckets by exact spec: type, window and the bytes of one token (equal specs merge)
    buckets: dict[tuple[KVKind, int | None, int], list[LayerKVSpec]] = {}
    for stage in stages:
        for layer in stage:
            kind, window = layer.cache.spec_key(hybrid)
            per_token = page_per_shape[layer.cache.shape_key]
            buckets.setdefault((kind, window, per_token), []).append(layer)
    if any(not stage for stage in stages) and len({per_token for _, _, per_token in buckets if per_token}) > 1:
        # validate_kv_cache_layout: a worker without cache layers cannot express mixed page sizes
        raise SpecError(
            "vLLM refuses this layout: a pipeline stage holds no cache layer of a model with mixed KV page sizes"
        )
    page = max(attn_page_per_token * bs, state_page)
    groups, members_per_group, padded = _split_buckets(buckets, page, bs, state_blocks)
    pools: list[KVPool] = []
    for s, stage in enumerate(stages):
        if not stage:
            continue
        # every group keeps its block table on every stage, holding that stage's share of its layers
        on_stage = [sum(1 for layer in members if stage_of[layer.index] == s) for members in members_per_group]
        unit_bytes = max(on_stage) * page
        capacity = r.stage_budget(s) // unit_bytes if unit_bytes else 0
        projected = tuple(replace(group, num_layers=n) for group, n in zip(groups, on_stage, strict=True))
        pools.append(_block_pool(r, capacity, bs, projected, unit_bytes, padded, s))
    return pools


def _block_pool(
    r: PoolRequest,
    capacity_units: int,
    bs: int,
    groups: tuple[KVGroup, ...],
    unit_bytes: int,
    padded: int = 0,
    stage: int = 0,
) -> KVPool:
    """Stage `stage`'s block pool: `capacity_units` blocks of `bs` tokens, `unit_bytes` each over its groups."""
    return KVPool(
        PoolUnit.BLOCK,
        capacity_units,
        bs,
        groups,
        r.max_num_batched_tokens,
        unit_bytes,
        max_in_flight_tokens=r.max_in_flight_tokens,
        padded_layer_slots=padded,
        stage=stage,
    )


def _uniform_pools(
    r: PoolRequest,
    stages: list[list[tuple[LayerKVSpec, int]]],
    page_per_shape: dict[Hashable, int],
    bs: int,
    group: KVGroup,
) -> list[KVPool]:
    """One spec type (`UniformTypeKVCacheSpecs`): one group over each stage's layers (as (a layer, the layers of
    its shape)), each layer its own page."""
    pools: list[KVPool] = []
    for s, stage in enumerate(stages):
        if not stage:
            continue  # a stage of KV-shared layers only holds no cache and does not bound the pool
        page_sum = sum(page_per_shape[layer.cache.shape_key] * n for layer, n in stage) * bs
        capacity = r.stage_budget(s) // page_sum if page_sum else 0
        layers = sum(n for _, n in stage)
        pools.append(_block_pool(r, capacity, bs, (replace(group, num_layers=layers),), page_sum, 0, s))
    return pools


def _split_buckets(
    buckets: dict[tuple[KVKind, int | None, int], list[LayerKVSpec]], page: int, bs: int, state_blocks: int
) -> tuple[list[KVGroup], list[list[LayerKVSpec]], int]:
    """`_get_kv_cache_groups_uniform_page_size`: buckets split into groups of equal size (the smallest
    bucket, or the largest when it is under 1.5x the smallest), layer i of a bucket in group i mod n;
    returns the groups, each group's layers, and the empty layer slots the short groups were padded with."""
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
        held = state_blocks if group_charge(kind).holds_state else None
        for i in range(n_groups):
            groups.append(KVGroup(kind, group_size, window, held, group_bs))
            members_per_group.append(members[i::n_groups])
    return groups, members_per_group, padded
