"""Hybrids of attention and recurrent-state layers: Jamba (Mamba-1), Nemotron-H (Mamba-2), Qwen3-Next
and Qwen3.5 (gated delta-net). State layers carry per-sequence element counts, not per-token KV."""

from __future__ import annotations

import math
from dataclasses import replace
from enum import StrEnum

from capacity.hf_config import vision
from capacity.hf_config.family import (
    EXPERT_KEYS,
    Built,
    Family,
    Kind,
    Mixer,
    Model,
    attn_params,
    gated_mlp,
    plain_mlp,
    read_experts,
)
from capacity.hf_config.fields import MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, Fields
from capacity.hf_config.moe import sparse_step_layers
from capacity.kv.kinds import RecurrentState, StateMixer
from capacity.spec import LayerKVSpec, LayerParams


def _state_layer(
    index: int,
    conv_elements: int,
    recurrent_elements: int,
    kernel: int,
    mixer: StateMixer,
    groups: int = 0,
    group_state: int = 0,
) -> LayerKVSpec:
    return LayerKVSpec(index, RecurrentState(conv_elements, recurrent_elements, kernel, mixer, groups, group_state))


class Jamba(Family):
    """Jamba: attention every `attn_layer_period` layers (at `attn_layer_offset`), Mamba-1 elsewhere;
    conv state = I * d_conv, recurrent = I * d_state with I = expand * hidden."""

    dense_mlp_module = "feed_forward"

    def layer_kinds(self, m: Model) -> list[Kind]:
        c = m.cfg
        period = c.integer("attn_layer_period", 8, hi=MAX_LAYERS)
        offset = c.integer("attn_layer_offset", 4, lo=0, hi=MAX_LAYERS)
        if offset >= period:
            m.fail(f"`attn_layer_offset` ({offset}) must be smaller than `attn_layer_period` ({period})")
        return [Kind(Mixer.FULL) if i % period == offset else Kind(Mixer.STATE) for i in range(m.num_layers)]

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h = m.hidden
        expand = c.integer("mamba_expand", 2, hi=1024)
        d_state = c.integer("mamba_d_state", 16)
        d_conv = c.integer("mamba_d_conv", 4, hi=1024)
        inner = expand * h
        mamba = _mamba1_params(m, inner, d_state, d_conv)
        attn = attn_params(h, m.heads, m.kv_heads, m.head_dim)
        e = (
            c.integer("num_local_experts")
            if c.has("num_local_experts")
            else c.integer("num_experts", 16, hi=MAX_EXPERTS)
        )
        m.num_experts = e if e > 1 else 0
        m.experts_per_token = c.integer("num_experts_per_tok", 2, hi=e) if e > 1 else 0
        e_period = c.integer("expert_layer_period", 2, hi=MAX_LAYERS)
        e_offset = c.integer("expert_layer_offset", 1, lo=0, hi=MAX_LAYERS)
        if e_offset >= e_period:
            m.fail(f"`expert_layer_offset` ({e_offset}) must be smaller than `expert_layer_period` ({e_period})")
        layers: list[LayerKVSpec] = []
        params: list[LayerParams] = []
        for i, kind in enumerate(kinds):
            if kind.mixer is Mixer.FULL:
                layers.append(kind.attention_layer(i, m.kv_heads, m.head_dim))
                mixer = attn
            else:
                layers.append(_state_layer(i, inner * d_conv, inner * d_state, d_conv, StateMixer.MAMBA1))
                mixer = mamba
            if e > 1 and i % e_period == e_offset:
                routed = e * 3 * h * m.intermediate
                params.append(LayerParams(attention=mixer, experts=routed, router=h * e, norms=2 * h))
            else:
                params.append(LayerParams(attention=mixer, mlp=gated_mlp(h, m.intermediate), norms=2 * h))
        return layers, params, 0


def _mamba1_params(m: Model, inner: int, d_state: int, d_conv: int) -> int:
    """in_proj, depthwise conv1d, x_proj, dt_proj, A_log and D, out_proj, dt / B / C layernorms."""
    c = m.cfg
    h = m.hidden
    dt_rank_raw = c.raw("mamba_dt_rank")
    dt_rank = math.ceil(h / 16) if dt_rank_raw in (None, "auto") else c.integer("mamba_dt_rank")
    conv_bias = c.flag("mamba_conv_bias", True)
    proj_bias = c.flag("mamba_proj_bias", False)
    in_proj = h * 2 * inner + (2 * inner if proj_bias else 0)
    conv1d = inner * d_conv + (inner if conv_bias else 0)
    x_proj = inner * (dt_rank + 2 * d_state)
    dt_proj = dt_rank * inner + inner  # always with bias
    a_log_d = inner * d_state + inner
    out_proj = inner * h + (h if proj_bias else 0)
    inner_norms = dt_rank + 2 * d_state
    return in_proj + conv1d + x_proj + dt_proj + a_log_d + out_proj + inner_norms


class Block(StrEnum):
    """A Nemotron-H layer, by its code in `hybrid_override_pattern`."""

    MAMBA = "M"
    ATTENTION = "*"
    MLP = "-"
    MOE = "E"


# `layers_block_type` / `layer_types` names of the same blocks
_BLOCK_NAMES = {
    "mamba": Block.MAMBA,
    "linear_attention": Block.MAMBA,
    "attention": Block.ATTENTION,
    "full_attention": Block.ATTENTION,
    "mlp": Block.MLP,
    "moe": Block.MOE,
}
_BLOCK_MIXERS = {Block.MAMBA: Mixer.STATE, Block.ATTENTION: Mixer.FULL, Block.MLP: Mixer.NONE, Block.MOE: Mixer.NONE}


class NemotronH(Family):
    """Nemotron-H: `hybrid_override_pattern` names each layer; MLP-only and MoE-only layers cache
    nothing and have no `LayerKVSpec`. Mamba-2 conv = (I + 2 * n_groups * d_state) * conv_kernel,
    recurrent = I * d_state with I = heads * head_dim."""

    attention_module = dense_mlp_module = "mixer"
    shared_expert_module = "mixer.shared_experts"

    def pattern(self, m: Model) -> list[Block]:
        c = m.cfg
        if c.has("hybrid_override_pattern"):
            pattern = c.text("hybrid_override_pattern") or ""
            bad = sorted(set(pattern) - {block.value for block in Block})
            if bad:
                m.fail(f"`hybrid_override_pattern` has unknown layer codes {''.join(bad)!r} (expected M * - E)")
            if not pattern:
                m.fail("`hybrid_override_pattern` is empty")
            return [Block(code) for code in pattern]
        for key in ("layers_block_type", "layer_types"):
            types = c.texts(key)
            if types is not None:
                out = []
                for i, t in enumerate(types):
                    if t not in _BLOCK_NAMES:
                        m.fail(f"`{key}[{i}]` is an unknown layer type {t!r}")
                    out.append(_BLOCK_NAMES[t])
                if not out:
                    m.fail(f"`{key}` is empty")
                return out
        m.fail("missing required field `hybrid_override_pattern` (or `layers_block_type`)")

    def read_num_layers(self, m: Model) -> int:
        c = m.cfg
        n = len(self.pattern(m))
        if c.has("num_hidden_layers") and c.integer("num_hidden_layers", hi=MAX_LAYERS) != n:
            m.fail(
                f"`num_hidden_layers` ({c.integer('num_hidden_layers', hi=MAX_LAYERS)}) does not match the "
                f"{n} layers of the hybrid pattern"
            )
        return n

    def layer_kinds(self, m: Model) -> list[Kind]:
        return [Kind(_BLOCK_MIXERS[block]) for block in self.pattern(m)]

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h = m.hidden
        pattern = self.pattern(m)
        heads = c.integer("mamba_num_heads", 128, hi=MAX_HEADS)
        m_head_dim = c.integer("mamba_head_dim", 64)
        d_state = c.integer("ssm_state_size", 128)
        groups = c.integer("n_groups", c.integer("mamba_n_groups", 8, hi=MAX_HEADS), hi=MAX_HEADS)
        kernel = c.integer("conv_kernel", c.integer("mamba_d_conv", 4, hi=1024), hi=1024)
        conv_bias = c.flag("use_conv_bias", c.flag("mamba_conv_bias", True))
        use_bias = c.flag("use_bias", False)
        inner = heads * m_head_dim
        conv_dim = inner + 2 * groups * d_state
        if inner % groups:
            m.fail(f"mamba inner size ({inner}) is not divisible by n_groups ({groups})")
        proj_out = inner + conv_dim + heads  # gate z, x/B/C, dt
        in_proj = h * proj_out + (proj_out if use_bias else 0)
        conv1d = conv_dim * kernel + (conv_dim if conv_bias else 0)
        out_proj = inner * h + (h if use_bias else 0)
        mamba = in_proj + conv1d + 3 * heads + inner + out_proj  # + dt_bias, A_log, D; gated norm
        attn = attn_params(h, m.heads, m.kv_heads, m.head_dim)
        mlp_bias = c.flag("mlp_bias", False)
        by_block = {
            Block.MAMBA: LayerParams(attention=mamba, norms=h),
            Block.ATTENTION: LayerParams(attention=attn, norms=h),
            Block.MLP: LayerParams(mlp=plain_mlp(h, m.intermediate, mlp_bias), norms=h),  # relu^2, not gated
        }
        if Block.MOE in pattern:
            by_block[Block.MOE] = _nemotron_moe(m, mlp_bias)
        layers: list[LayerKVSpec] = []
        for i, block in enumerate(pattern):
            if block is Block.MAMBA:
                layers.append(
                    _state_layer(i, conv_dim * kernel, inner * d_state, kernel, StateMixer.MAMBA2, groups, d_state)
                )
            elif block is Block.ATTENTION:
                kind = kinds[i] if kinds[i].mixer is Mixer.FULL else Kind(Mixer.FULL)
                layers.append(kind.attention_layer(i, m.kv_heads, m.head_dim))
        params = [by_block[block] for block in pattern]
        no_cache = sum(1 for block in pattern if _BLOCK_MIXERS[block] is Mixer.NONE)
        if no_cache:
            m.notes.append(f"{no_cache} MLP/MoE-only layers hold no cache and have no entry in `layers`")
        return layers, params, 0


def _nemotron_moe(m: Model, mlp_bias: bool) -> LayerParams:
    """A Nemotron-H MoE layer: relu^2 shared experts, routed experts (through a latent projection
    where `moe_latent_size` is set), a router with correction bias, one norm."""
    c = m.cfg
    h = m.hidden
    e = read_experts(m)
    moe_inter = c.integer("moe_intermediate_size")
    shared_inter = c.integer("moe_shared_expert_intermediate_size", moe_inter)
    shared = c.integer("n_shared_experts", 1, lo=0, hi=MAX_EXPERTS)
    latent = c.opt_int("moe_latent_size")
    width = latent or h
    latent_proj = 2 * h * latent + ((latent + h) if mlp_bias and latent else 0) if latent else 0
    return LayerParams(
        mlp=shared * plain_mlp(h, shared_inter, mlp_bias) + latent_proj,
        experts=e * 2 * width * moe_inter,
        router=h * e,
        fp32_router=e,  # e_score_correction_bias: fp32 (vLLM's NemotronHMoE)
        norms=h,
    )


class Qwen3Next(Family):
    """Qwen3-Next and Qwen3.5 (dense and MoE): gated delta-net linear layers + gated attention, full
    attention every `full_attention_interval` layers. Gated delta-net conv = (2 * Hk * Dk + Hv * Dv) *
    kernel, recurrent = Hv * Dk * Dv."""

    shared_expert_module = "mlp.shared_expert"

    has_state_layer_types = True

    def read_intermediate(self, m: Model) -> int:
        return m.cfg.integer("intermediate_size", 0, lo=0)  # MoE variants may omit it

    def default_kinds(self, m: Model) -> list[Kind]:
        interval = m.cfg.integer("full_attention_interval", 4, hi=MAX_LAYERS)
        return [Kind(Mixer.STATE) if (i + 1) % interval else Kind(Mixer.FULL) for i in range(m.num_layers)]

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h, hd = m.hidden, m.head_dim
        hk = c.integer("linear_num_key_heads", 16, hi=MAX_HEADS)
        hv = c.integer("linear_num_value_heads", 32, hi=MAX_HEADS)
        dk = c.integer("linear_key_head_dim", 128)
        dv = c.integer("linear_value_head_dim", 128)
        kernel = c.integer("linear_conv_kernel_dim", 4, hi=1024)
        conv_dim = 2 * hk * dk + hv * dv
        in_proj = h * (2 * hk * dk + 2 * hv * dv) + h * 2 * hv  # q/k/v/z (fused or split) + b/a
        gdn = in_proj + conv_dim * kernel + 2 * hv + dv + hv * dv * h  # conv (no bias), dt_bias, A_log, norm, out
        attn = _gated_attention(m)
        dense_mlp = LayerParams(mlp=gated_mlp(h, m.intermediate), norms=2 * h)
        moe_mlp: LayerParams | None = None
        moe_layers: set[int] = set()
        if any(c.has(k) for k in EXPERT_KEYS):
            e = read_experts(m)
            moe_inter = c.integer("moe_intermediate_size")
            shared_inter = c.integer("shared_expert_intermediate_size", 0, lo=0)
            moe_layers = sparse_step_layers(m)
            shared = gated_mlp(h, shared_inter) + h if shared_inter else 0  # shared expert + its gate
            moe_mlp = LayerParams(mlp=shared, experts=e * 3 * h * moe_inter, router=h * e, norms=2 * h)
        elif not m.intermediate:
            m.fail("missing required field `intermediate_size`")
        layers: list[LayerKVSpec] = []
        params: list[LayerParams] = []
        for i, kind in enumerate(kinds):
            if kind.mixer is Mixer.STATE:
                layers.append(_state_layer(i, conv_dim * kernel, hv * dk * dv, kernel, StateMixer.GATED_DELTA_NET))
                mixer = gdn
            elif kind.is_attention:
                layers.append(kind.attention_layer(i, m.kv_heads, hd))
                mixer = attn
            else:
                m.fail(f"layer {i}: unsupported layer kind {kind.mixer.value!r} for {m.family.name}")
            ffn = moe_mlp if moe_mlp is not None and i in moe_layers else dense_mlp
            params.append(replace(ffn, attention=mixer))
        return layers, params, _mtp_params(m, attn, moe_mlp)


def _gated_attention(m: Model) -> int:
    """q_proj also produces an output gate of the same size; q/k norms over head_dim."""
    c = m.cfg
    h, hd = m.hidden, m.head_dim
    bias = c.flag("attention_bias", False)
    q_out = m.heads * hd * (2 if c.flag("attn_output_gate", True) else 1)
    qkv_bias = (q_out + 2 * m.kv_heads * hd + h) if bias else 0
    return h * q_out + 2 * h * m.kv_heads * hd + m.heads * hd * h + 2 * hd + qkv_bias


def _mtp_params(m: Model, attn: int, moe_mlp: LayerParams | None) -> int:
    """MTP: full-attention decoder layer(s) + fc (2h -> h) + pre-fc norms for the embedding and the
    hidden state + final norm; embeddings shared with the model unless dedicated."""
    c = m.cfg
    h = m.hidden
    mtp = c.integer("mtp_num_hidden_layers", 0, lo=0, hi=MAX_LAYERS)
    if not mtp:
        return 0
    ffn = moe_mlp.mlp + moe_mlp.experts + moe_mlp.router if moe_mlp is not None else gated_mlp(h, m.intermediate)
    extra = mtp * (attn + ffn + 2 * h) + 2 * h * h + 3 * h
    m.mtp_layers, m.mtp_params = mtp, extra  # dedicated embeddings, if any, are shared by vLLM (an MTP draft)
    if c.flag("mtp_use_dedicated_embeddings", False):
        extra += m.vocab * h
    m.notes.append(f"extra_params: multi-token-prediction module ({mtp} layer(s))")
    return extra


class Qwen35(Qwen3Next):
    """Qwen3.5 (dense and MoE): Qwen3-Next's text rules and a Qwen3.5 vision tower."""

    vision_model_types = (None, "qwen3_5", "qwen3_5_moe")

    def count_vision(self, m: Model, v: Fields) -> int:
        return vision.qwen3_5(v)


# `layer_types` names of a Granite 4.0-H layer (transformers >= 5.15 writes the second spelling)
_GRANITE_MIXERS = {
    "mamba": Mixer.STATE,
    "linear_attention": Mixer.STATE,
    "attention": Mixer.FULL,
    "full_attention": Mixer.FULL,
}


class GraniteMoeHybrid(Family):
    """IBM Granite 4.0-H (`granitemoehybrid`): Mamba-2 and attention layers as `layer_types` names them, each with
    a shared gated MLP (`shared_intermediate_size`) and, where `num_local_experts` > 0, routed experts. The
    Mamba-2 state as vLLM (`granitemoehybrid.get_mamba_state_shape_from_config`) and SGLang 0.5.23
    (`configs/granitemoehybrid.py` `mamba2_cache_params`) size it: I = mamba_expand x hidden =
    mamba_n_heads x mamba_d_head, conv = (I + 2 x mamba_n_groups x mamba_d_state) x mamba_d_conv,
    recurrent = I x mamba_d_state. The state fields are required (transformers' and SGLang's config classes
    default them differently)."""

    shared_expert_module = "shared_mlp"

    def layer_kinds(self, m: Model) -> list[Kind]:
        types = m.cfg.texts("layer_types")
        if types is None:
            m.fail("missing required field `layer_types` (mamba / attention per layer)")
        if len(types) != m.num_layers:
            m.fail(f"`layer_types` has {len(types)} entries but the model has {m.num_layers} layers")
        kinds: list[Kind] = []
        for i, t in enumerate(types):
            if t not in _GRANITE_MIXERS:
                m.fail(f"`layer_types[{i}]` is an unknown layer type {t!r} (expected mamba or attention)")
            kinds.append(Kind(_GRANITE_MIXERS[t]))
        return kinds

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h = m.hidden
        inner = c.integer("mamba_expand", hi=1024) * h
        heads = c.integer("mamba_n_heads", hi=MAX_HEADS)
        d_state = c.integer("mamba_d_state")
        groups = c.integer("mamba_n_groups", hi=MAX_HEADS)
        kernel = c.integer("mamba_d_conv", hi=1024)
        if c.raw("mamba_d_head") not in (None, "auto") and c.integer("mamba_d_head") * heads != inner:
            m.fail(f"mamba_d_head x mamba_n_heads must equal mamba_expand x hidden_size ({inner})")
        if inner % heads or inner % groups:
            m.fail(f"mamba inner size ({inner}) is not divisible by mamba_n_heads ({heads}) and mamba_n_groups")
        conv_dim = inner + 2 * groups * d_state
        proj_bias = c.flag("mamba_proj_bias", False)
        proj_out = inner + conv_dim + heads  # gate z, x/B/C, dt
        conv1d = conv_dim * kernel + (conv_dim if c.flag("mamba_conv_bias", True) else 0)
        out_proj = inner * h + (h if proj_bias else 0)
        mamba = h * proj_out + (proj_out if proj_bias else 0) + conv1d + 3 * heads + inner + out_proj
        bias = c.flag("attention_bias", False)
        attn = attn_params(h, m.heads, m.kv_heads, m.head_dim, qkv_bias=bias, o_bias=bias)
        shared = c.integer("shared_intermediate_size", 0, lo=0)
        routed = router = 0
        if c.integer("num_local_experts", 0, lo=0, hi=MAX_EXPERTS) > 0:
            e = read_experts(m)
            routed, router = e * 3 * h * m.intermediate, h * e
        layers: list[LayerKVSpec] = []
        params: list[LayerParams] = []
        for i, kind in enumerate(kinds):
            if kind.mixer is Mixer.STATE:
                layers.append(
                    _state_layer(i, conv_dim * kernel, inner * d_state, kernel, StateMixer.MAMBA2, groups, d_state)
                )
            else:
                layers.append(kind.attention_layer(i, m.kv_heads, m.head_dim))
            mixer = mamba if kind.mixer is Mixer.STATE else attn
            mlp = gated_mlp(h, shared) if shared else 0
            params.append(LayerParams(attention=mixer, mlp=mlp, experts=routed, router=router, norms=2 * h))
        return layers, params, 0
