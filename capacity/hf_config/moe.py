"""Mixture-of-experts families with standard attention: which layers hold experts, and their routers."""

from __future__ import annotations

from dataclasses import replace

from capacity.hf_config import vision
from capacity.hf_config.family import (
    Built,
    Family,
    Kind,
    Mixer,
    Model,
    SlidesEveryLayer,
    SlidesFromMaxWindowLayers,
    SlidesPeriodically,
    attn_params,
    deepseek_mtp_params,
    gated_mlp,
    read_experts,
    shared_expert_moe,
)
from capacity.hf_config.fields import MAX_EXPERTS, MAX_LAYERS, MAX_POSITIONS, Fields
from capacity.spec import LayerParams


class Mixtral(SlidesEveryLayer):
    def build(self, m: Model, kinds: list[Kind]) -> Built:
        h = m.hidden
        e = read_experts(m)
        attn = attn_params(h, m.heads, m.kv_heads, m.head_dim)
        lp = LayerParams(attention=attn, experts=e * 3 * h * m.intermediate, router=h * e, norms=2 * h)
        return self.kv_layers(m, kinds), [lp] * m.num_layers, 0


def sparse_step_layers(m: Model) -> set[int]:
    """Qwen-MoE's MoE layers: every `decoder_sparse_step`-th, except `mlp_only_layers`."""
    c = m.cfg
    step = c.integer("decoder_sparse_step", 1, hi=MAX_LAYERS)
    mlp_only = set(c.ints("mlp_only_layers", hi=m.num_layers) or [])
    return {i for i in range(m.num_layers) if i not in mlp_only and (i + 1) % step == 0}


class QwenMoe(SlidesFromMaxWindowLayers):
    """Qwen2-MoE: q/k/v biases and a gated shared expert. Qwen3-MoE (`qk_norm_moe`, a property of the
    checkpoint's family) has q/k norms, an `attention_bias` flag and no shared expert."""

    shared_expert_module = "mlp.shared_expert"

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h, hd = m.hidden, m.head_dim
        e = read_experts(m)
        moe_inter = c.integer("moe_intermediate_size")
        moe_layers = sparse_step_layers(m)
        is_qwen3 = m.family.qk_norm_moe
        qkv_bias = c.flag("attention_bias", False) if is_qwen3 else True  # Qwen2-MoE: always q/k/v biases
        attn = attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=qkv_bias)
        norms = 2 * h + (2 * hd if is_qwen3 else 0)  # Qwen3's per-head q_norm / k_norm: whole on every rank
        shared_inter = 0 if is_qwen3 else c.integer("shared_expert_intermediate_size", 0, lo=0)
        shared = gated_mlp(h, shared_inter) + (h if shared_inter else 0)  # shared expert + its gate
        moe = LayerParams(attention=attn, mlp=shared, experts=e * 3 * h * moe_inter, router=h * e, norms=norms)
        dense = LayerParams(attention=attn, mlp=gated_mlp(h, m.intermediate), norms=norms)
        params = [moe if i in moe_layers and m.num_experts > 0 else dense for i in range(m.num_layers)]
        return self.kv_layers(m, kinds), params, 0


class Qwen3Moe(QwenMoe):
    qk_norm_moe = True


class Qwen3VLMoe(vision.KnownTower, Qwen3Moe):
    """Qwen3-VL MoE: Qwen3-MoE's text rules and the Qwen3-VL vision tower."""

    vision_model_types = (None, "qwen3_vl_moe", "qwen3_vl")
    tower_rules = (vision.qwen3_vl, vision.qwen3_vl_tower)


class GptOss(SlidesPeriodically):
    """GPT-OSS: biased attention with per-head sinks, biased experts, a biased router."""

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h, hd = m.hidden, m.head_dim
        e = read_experts(m, "num_experts_per_tok" if c.has("num_experts_per_tok") else "experts_per_token")
        inter = m.intermediate
        bias = c.flag("attention_bias", True)
        attn = attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=bias) + m.heads  # + sinks
        experts = e * (h * 2 * inter + 2 * inter + inter * h)  # gate_up + its bias, down
        # whole on every TP rank, in 16 bits: o_proj's bias (RowParallelLinear adds it once) and the experts' down
        # biases (FusedMoE's w2_bias is experts x hidden on each rank)
        row_biases = (h if bias else 0) + e * h
        lp = LayerParams(attention=attn, experts=experts, router=h * e + e, norms=2 * h + row_biases)
        return self.kv_layers(m, kinds), [lp] * m.num_layers, 0


class Llama4(Family):
    """Llama 4: chunked attention where `no_rope_layers[i]` is 1 (default: every 4th layer is full),
    MoE layers with a shared expert, a vision tower."""

    dense_mlp_module = "feed_forward"
    shared_expert_module = "feed_forward.shared_expert"

    def read_intermediate(self, m: Model) -> int:
        return m.cfg.integer("intermediate_size_mlp", 16384)

    def default_kinds(self, m: Model) -> list[Kind]:
        c = m.cfg
        n = m.num_layers
        chunk = c.opt_int("attention_chunk_size", hi=MAX_POSITIONS)
        rope_layers = c.ints("no_rope_layers", lo=0, hi=1)
        if not rope_layers:
            interval = c.integer("no_rope_layer_interval", 4, hi=MAX_LAYERS)
            rope_layers = [int((i + 1) % interval != 0) for i in range(n)]
        if len(rope_layers) < n:
            m.fail(f"`no_rope_layers` has {len(rope_layers)} entries for {n} layers")
        if chunk is None:
            return [Kind(Mixer.FULL)] * n
        return [Kind(Mixer.CHUNKED, chunk) if rope_layers[i] else Kind(Mixer.FULL) for i in range(n)]

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h, hd = m.hidden, m.head_dim
        e = read_experts(m)
        moe_inter = c.integer("intermediate_size")
        moe_layers = c.ints("moe_layers", hi=m.num_layers - 1)
        if moe_layers is None:
            step = c.integer("interleave_moe_layer_step", 1, hi=MAX_LAYERS)
            moe_layers = list(range(step - 1, m.num_layers, step))
        moe_set = set(moe_layers)
        bias = c.flag("attention_bias", False)
        attn = attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=bias, o_bias=bias)
        moe = LayerParams(
            attention=attn, mlp=gated_mlp(h, moe_inter), experts=e * 3 * h * moe_inter, router=h * e, norms=2 * h
        )
        dense = LayerParams(attention=attn, mlp=gated_mlp(h, m.intermediate), norms=2 * h)
        return self.kv_layers(m, kinds), [moe if i in moe_set else dense for i in range(m.num_layers)], 0

    def vision_params(self, m: Model, v: Fields, vision_type: str | None) -> int | None:
        return vision.llama4(m, v)  # every Llama 4 vision config has this structure


class MiniMaxM2(Family):
    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h, hd = m.hidden, m.head_dim
        e = read_experts(m)
        attn = attn_params(h, m.heads, m.kv_heads, hd)
        if c.flag("use_qk_norm", True):
            attn += m.heads * hd + m.kv_heads * hd  # per-layer q_norm / k_norm over all heads
        # gate and routing bias in fp32 (vLLM's MiniMaxM2 gate params_dtype float32; SGLang's the same)
        router = h * e + (e if c.flag("use_routing_bias", True) else 0)
        lp = LayerParams(attention=attn, experts=e * 3 * h * m.intermediate, fp32_router=router, norms=2 * h)
        if c.integer("num_mtp_modules", 0, lo=0) and c.flag("use_mtp", False):
            m.notes.append("MTP modules are not counted (the published checkpoint does not ship them)")
        return self.kv_layers(m, kinds), [lp] * m.num_layers, 0


class Glm4Moe(Family):
    """GLM-4.5 / 4.6: dense first layers, then DeepSeek-style MoE layers, DeepSeek-style MTP."""

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h, hd = m.hidden, m.head_dim
        e = read_experts(m)
        moe_inter = c.integer("moe_intermediate_size")
        shared = c.integer("n_shared_experts", 0, lo=0, hi=MAX_EXPERTS)
        first_dense = c.integer("first_k_dense_replace", 1, lo=0, hi=MAX_LAYERS)
        attn = attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=c.flag("attention_bias", False))
        head_norms = 2 * hd if c.flag("use_qk_norm", False) else 0  # per-head q_norm / k_norm: whole on every rank
        dense = LayerParams(attention=attn, mlp=gated_mlp(h, m.intermediate), norms=2 * h + head_norms)
        moe = shared_expert_moe(m, attn, e, moe_inter, shared)
        # the gate too is fp32 (vLLM's and SGLang's Glm4Moe gate: params_dtype float32, beside its bias)
        moe = replace(moe, norms=moe.norms + head_norms, router=0, fp32_router=moe.router + moe.fp32_router)
        params = [dense if i < first_dense else moe for i in range(m.num_layers)]
        extra = deepseek_mtp_params(m, moe.total)
        return self.kv_layers(m, kinds), params, extra
