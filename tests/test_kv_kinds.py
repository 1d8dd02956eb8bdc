"""Each layer kind class holds its own fields and answers for itself (capacity.kv.kinds): the enum value
it reports, its line in the derivation, its registry columns, its shape key and the flags engines ask."""

from __future__ import annotations

import pytest

from capacity.kv.kinds import (
    ChunkedLocalAttention,
    FullAttention,
    KVKind,
    LatentAttention,
    LayerCache,
    RecurrentState,
    SharedKV,
    SlidingWindowAttention,
    StateMixer,
    group_charge,
)
from capacity.parallel import stage_layer_counts
from capacity.spec import LayerKVSpec
from models_registry import orm
from tests.handmade import dense_spec

ALL: list[LayerCache] = [
    FullAttention(8, 128, 128),
    SlidingWindowAttention(8, 128, 128, 4096),
    ChunkedLocalAttention(8, 128, 128, 8192),
    LatentAttention(512, 64, 128),
    RecurrentState(32_768, 524_288, 4, StateMixer.GATED_DELTA_NET),
    SharedKV(3),
]


def test_every_kind_has_one_class_and_reports_its_enum_value() -> None:
    assert sorted(cache.kind for cache in ALL) == sorted(KVKind)
    for cache in ALL:
        assert group_charge(cache.kind) is type(cache)
        assert LayerKVSpec(0, cache).kind is cache.kind


def test_derivation_lines() -> None:
    assert [cache.describe() for cache in ALL] == [
        "full: 8 KV heads x (K 128 + V 128)",
        "sliding: 8 KV heads x (K 128 + V 128), window 4,096",
        "chunked: 8 KV heads x (K 128 + V 128), window 8,192",
        "mla: latent 512 + rope 64",
        "state: conv 32,768 + recurrent 524,288 elements",
        "shared: reads layer 3's cache",
    ]


def test_registry_columns_are_the_orm_layer_columns() -> None:
    layer_columns = set(orm.ModelLayer.__table__.columns.keys())
    for cache in ALL:
        assert set(cache.columns()) <= layer_columns
        assert set(cache.columns()) == set(ALL[0].columns())
    assert ALL[1].columns()["window_tokens"] == 4096 and ALL[0].columns()["window_tokens"] is None
    latent = ALL[3].columns()
    assert (latent["num_kv_heads"], latent["k_head_dim"], latent["v_head_dim"]) == (1, 512, 64)
    assert ALL[5].columns()["kv_source_layer"] == 3


@pytest.mark.parametrize(
    ("flag", "holders"),
    [
        ("stores_per_token_kv", {KVKind.FULL, KVKind.SLIDING, KVKind.CHUNKED, KVKind.MLA}),
        ("windowed", {KVKind.SLIDING, KVKind.CHUNKED}),
        ("chunked_local", {KVKind.CHUNKED}),
        ("holds_state", {KVKind.STATE}),
        ("latent", {KVKind.MLA}),
        ("replicated_under_tp", {KVKind.MLA}),
    ],
)
def test_flags(flag: str, holders: set[KVKind]) -> None:
    assert {cache.kind for cache in ALL if getattr(cache, flag)} == holders


def test_kind_specific_answers() -> None:
    full, sliding, chunked, latent, state, shared = ALL
    assert [c.window for c in ALL] == [None, 4096, 8192, None, None, None]
    assert [c.state_mixer for c in ALL] == [None] * 4 + [StateMixer.GATED_DELTA_NET, None]
    assert latent.indexer_bytes_per_token == 128 + 4 and full.indexer_bytes_per_token == 0
    assert full.uneven_kv_heads(3) == 8 and full.uneven_kv_heads(2) is None and latent.uneven_kv_heads(3) is None
    assert (sliding.spec_key(True), sliding.spec_key(False)) == ((KVKind.SLIDING, 4096), (KVKind.FULL, None))
    assert chunked.spec_key(True) == (KVKind.CHUNKED, 8192) and latent.spec_key(True) == (KVKind.MLA, None)
    assert shared.shape_key == SharedKV(7).shape_key and full.shape_key != sliding.shape_key
    assert SlidingWindowAttention(8, 128, 128, 4096) != ChunkedLocalAttention(8, 128, 128, 4096)
    assert state.state_bytes(2, 4) == 32_768 * 2 + 524_288 * 4 and shared.state_bytes(2, 4) == 0


def test_equal_shapes_count_once_per_stage() -> None:
    spec = dense_spec(layers=6, kinds=[(KVKind.SLIDING, 64), (KVKind.FULL, None)] * 3)
    ((first, n_first), (second, n_second)), = stage_layer_counts(spec, 1)
    assert (first.kind, n_first, second.kind, n_second) == (KVKind.SLIDING, 3, KVKind.FULL, 3)
