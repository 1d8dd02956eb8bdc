"""Bytes of the KV cache per token and of the state per sequence, per layer and per GPU.

The engine-independent reading (transformers' cache): a layer's heads x head dims x element bytes per
token (split by TP, MLA replicated), a state layer's conv and recurrent state per sequence; the engine
profiles build their pools from these.
"""

from __future__ import annotations

from capacity.kv.kinds import RecurrentState, StateTerms
from capacity.parallel import stage_layer_counts, stage_layers
from capacity.spec import LayerKVSpec, ModelSpec


def kv_heads_per_gpu(layer: LayerKVSpec, tp: int) -> int:
    """KV heads one tensor-parallel rank holds: ceil(H_kv / TP), at least one; MLA replicated."""
    return layer.cache.heads_per_gpu(tp)


def layer_kv_bytes_per_token(layer: LayerKVSpec, kv_bytes: int, tp: int = 1) -> int:
    """Bytes one token occupies in one layer on one GPU (0 for state and shared layers), the DSA
    indexer key included (replicated like the MLA latent): the layer kind's own rule."""
    return layer.cache.bytes_per_token(kv_bytes, tp)


def layer_state_bytes(
    layer: LayerKVSpec, model_bytes: int, ssm_bytes: int, tp: int = 1, *, conv_without_current: bool = False
) -> int:
    """Constant per-sequence state of a Mamba / gated-delta-net layer on one GPU (split by TP; 0 for
    other kinds). `conv_without_current`: vLLM's conv state keeps `conv_kernel - 1` columns."""
    return layer.cache.state_bytes(model_bytes, ssm_bytes, tp, conv_without_current=conv_without_current)


def state_bytes_per_sequence_per_gpu(
    model: ModelSpec, model_bytes: int, ssm_bytes: int, tp: int = 1, pp: int = 1, *, conv_without_current: bool = False
) -> int:
    """Per-sequence state (Mamba / GDN layers) on the most loaded GPU (`layer_state_bytes`)."""
    terms = state_terms_per_gpu(model, model_bytes, ssm_bytes, tp, pp, conv_without_current=conv_without_current)
    return sum(t.total_bytes * n for t, n in terms)


def state_terms_per_gpu(
    model: ModelSpec, model_bytes: int, ssm_bytes: int, tp: int = 1, pp: int = 1, *, conv_without_current: bool = False
) -> list[tuple[StateTerms, int]]:
    """The state layers of the most loaded pipeline stage, one (terms, layers of that shape) per shape:
    what the derivation prints and `state_bytes_per_sequence_per_gpu` sums."""
    stages = [
        [
            (layer.cache.state_terms(model_bytes, ssm_bytes, tp, conv_without_current=conv_without_current), n)
            for layer, n in stage
            if isinstance(layer.cache, RecurrentState)
        ]
        for stage in stage_layer_counts(model, pp)
    ]
    return max(stages, key=lambda terms: sum(t.total_bytes * n for t, n in terms))


def kv_bytes_per_token(model: ModelSpec, kv_bytes: int) -> int:
    """Whole-model bytes per cached token: every per-token layer, sliding ones as if in window."""
    return sum(layer_kv_bytes_per_token(layer, kv_bytes) * n for layer, n in stage_layer_counts(model, 1)[0])


def kv_bytes_per_token_per_gpu(model: ModelSpec, kv_bytes: int, tp: int = 1, pp: int = 1) -> int:
    """The same on the most loaded GPU."""
    return max(
        sum(layer_kv_bytes_per_token(layer, kv_bytes, tp) * n for layer, n in stage)
        for stage in stage_layer_counts(model, pp)
    )


def layer_cached_tokens(layer: LayerKVSpec, context_tokens: int) -> int:
    """Tokens a layer keeps for a sequence of T tokens in a cache that drops what left the window
    (transformers keeps W - 1 for sliding and chunk - 1 for chunked layers)."""
    return layer.cache.cached_tokens(context_tokens)


def kv_bytes_per_sequence(
    model: ModelSpec,
    context_tokens: int,
    kv_bytes: int,
    ssm_bytes: int = 4,
    tp: int = 1,
    pp: int = 1,
    model_bytes: int | None = None,
) -> int:
    """Logical cache bytes one sequence of T tokens holds on the most loaded GPU (windows honoured,
    per-sequence state included). The oracle-checked quantity."""
    conv_bytes = kv_bytes if model_bytes is None else model_bytes
    return max(
        sum(
            layer_kv_bytes_per_token(layer, kv_bytes, tp) * layer_cached_tokens(layer, context_tokens)
            + layer_state_bytes(layer, conv_bytes, ssm_bytes, tp)
            for layer in stage
        )
        for stage in stage_layers(model, pp)
    )
