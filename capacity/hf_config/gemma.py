"""Gemma 1-4: tied embeddings, sandwich norms, periodic sliding windows, Gemma 4's per-layer shapes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capacity.hf_config import vision
from capacity.hf_config.family import (
    Built,
    Family,
    Kind,
    Mixer,
    Model,
    SlidesPeriodically,
    apply_kv_sharing,
    gated_mlp,
    read_experts,
)
from capacity.hf_config.fields import MAX_HEADS, MAX_LAYERS, MAX_VOCAB, Fields, clip
from capacity.spec import LayerKVSpec, LayerParams


class Gemma(Family):
    tied_by_default = True


class Gemma2(SlidesPeriodically):
    """Gemma 2: even layers slide; post-attention and post-MLP norms besides the input norms."""

    tied_by_default = True
    norms_per_layer = 4


class Gemma3(Gemma2):
    """Gemma 3: full iff (i + 1) % `sliding_window_pattern` == 0; q/k norms; a SigLIP vision tower."""

    qk_norm = True
    vision_model_types = (None, "siglip_vision_model")
    # google/gemma-3-27b-it's text_config has no vocab_size or max_position_embeddings
    text_defaults: Mapping[str, Any] = {
        "vocab_size": 262_208,
        "max_position_embeddings": 131_072,
        "head_dim": 256,
        "num_key_value_heads": 4,
        "sliding_window": 4096,
    }

    def period(self, m: Model) -> int:
        return m.cfg.integer("sliding_window_pattern", 6, hi=MAX_LAYERS)

    def window(self, m: Model) -> int:
        w = super().window(m)
        if m.cfg.flag("use_bidirectional_attention", False):
            # transformers' Gemma3 converts the window for bidirectional (embedding) models
            w = w // 2 + 1
        return w

    def count_vision(self, m: Model, v: Fields) -> int:
        return vision.siglip(v) + vision.gemma3_projector(m, v)


class Gemma4(SlidesPeriodically):
    """Gemma 4 text: per-layer head dims, K=V global layers, KV sharing, per-layer embeddings, MoE."""

    tied_by_default = True
    loads_extra_params = True  # the per-layer embeddings

    def period(self, m: Model) -> int:
        return 6

    def window(self, m: Model) -> int:
        w = super().window(m)
        # "all" makes every token bidirectional, and the window is converted the same way
        if m.cfg.text("use_bidirectional_attention") == "all":
            w = w // 2 + 1
        return w

    def layer_kinds(self, m: Model) -> list[Kind]:
        kinds = super().layer_kinds(m)
        kinds[-1] = Kind(Mixer.FULL)  # transformers forces the last Gemma 4 layer to full attention
        return kinds

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h, heads = m.hidden, m.heads
        dims = _layer_dims(m, kinds)
        shared = c.integer("num_kv_shared_layers", 0, lo=0, hi=MAX_LAYERS)
        first_shared = m.num_layers - shared
        k_eq_v = c.flag("attention_k_eq_v", False)
        bias = c.flag("attention_bias", False)
        double_wide = c.flag("use_double_wide_mlp", False)
        ple = c.integer("hidden_size_per_layer_input", 0, lo=0)
        experts = moe_inter = 0
        if c.flag("enable_moe_block", False):
            experts = read_experts(m, "top_k_experts")
            moe_inter = c.integer("moe_intermediate_size")
        layers: list[LayerKVSpec] = []
        params: list[LayerParams] = []
        for i, kind in enumerate(kinds):
            if kind.mixer not in (Mixer.FULL, Mixer.SLIDING):
                m.fail(f"layer {i}: {kind.mixer} layers are not supported for gemma4")
            hd, kv = dims[i]
            layers.append(kind.attention_layer(i, kv, hd))
            attn = h * heads * hd + heads * hd * h + ((heads * hd + h) if bias else 0)  # q, o
            head_norms = hd  # q_norm; k_norm below (per-head RMSNorms: whole on every TP rank)
            if i < first_shared:
                projections = 1 if (k_eq_v and kind.mixer is Mixer.FULL) else 2  # K=V: no v_proj
                attn += projections * (h * kv * hd + (kv * hd if bias else 0))
                head_norms += hd
            inter = m.intermediate * (2 if double_wide and i >= first_shared else 1)
            mlp = gated_mlp(h, inter) + (2 * h * ple if ple else 0)  # + per-layer-input gate / projection
            norms = 4 * h + 1 + (h if ple else 0) + head_norms  # + layer_scalar, post_per_layer_input_norm
            if experts:
                norms += 3 * h
                routed = experts * 3 * h * moe_inter
                router = h * experts + h + experts
                params.append(LayerParams(attention=attn, mlp=mlp, experts=routed, router=router, norms=norms))
            else:
                params.append(LayerParams(attention=attn, mlp=mlp, norms=norms))
        layers = apply_kv_sharing(m, layers, kinds)
        extra = 0
        if ple:
            vocab_ple = c.integer("vocab_size_per_layer_input", m.vocab, hi=MAX_VOCAB)
            extra = vocab_ple * m.num_layers * ple + h * m.num_layers * ple + ple
            m.notes.append("extra_params: per-layer embeddings (embed_tokens_per_layer and its projection)")
        if k_eq_v:
            m.notes.append("attention_k_eq_v: K and V are still cached as two tensors (as transformers does)")
        return layers, params, extra


def _layer_dims(m: Model, kinds: list[Kind]) -> list[tuple[int, int]]:
    """(head_dim, kv_heads) per layer: full-attention layers may use `global_head_dim` and
    `num_global_key_value_heads` (raw config.json), or `per_layer_config` (as transformers 5 writes it)."""
    c = m.cfg
    dims = [(m.head_dim, m.kv_heads)] * m.num_layers
    per_layer = c.mapping("per_layer_config")
    if per_layer is not None:
        for key, override in per_layer.items():
            if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 9):  # not " 1", "1_0", "١"
                m.fail(f"`per_layer_config` key {clip(key)} is not a layer index")
            i = int(key)
            if not 0 <= i < m.num_layers or not isinstance(override, Mapping):
                m.fail(f"`per_layer_config` entry {key!r} is not an object for an existing layer")
            f = Fields(override, m.label, f"{c.prefix}per_layer_config.{key}.")
            dims[i] = (f.integer("head_dim", m.head_dim), f.integer("num_key_value_heads", m.kv_heads, hi=MAX_HEADS))
    else:
        global_dim = c.integer("global_head_dim", 512)
        global_kv = c.opt_int("num_global_key_value_heads", hi=MAX_HEADS)
        kv = global_kv if global_kv is not None and c.flag("attention_k_eq_v", False) else m.kv_heads
        dims = [(global_dim, kv) if k.mixer is Mixer.FULL else dims[i] for i, k in enumerate(kinds)]
    for i, (_, kv) in enumerate(dims):
        if kv > m.heads or m.heads % kv:
            m.fail(f"layer {i}: {kv} KV heads do not divide num_attention_heads ({m.heads})")
    return dims
