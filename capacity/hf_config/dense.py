"""Dense decoder families: Llama's rules with each family's attention biases, norms and windows."""

from __future__ import annotations

from capacity.hf_config import vision
from capacity.hf_config.context import RopeScaling, rope_entries
from capacity.hf_config.family import (
    Built,
    Family,
    Kind,
    Model,
    SlidesEveryLayer,
    SlidesFromMaxWindowLayers,
    attn_params,
    gated_mlp,
    plain_mlp,
)
from capacity.hf_config.fields import MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, Fields
from capacity.spec import LayerParams

Llama = Family  # the base rule set is Llama's


class Generic(SlidesEveryLayer):
    """An unknown model type: Llama's rules, Mistral's window, and a V head size if the config has one."""

    generic = True

    def default_kinds(self, m: Model) -> list[Kind]:
        if m.cfg.has("sliding_window"):
            m.notes.append("generic path: `sliding_window` applied to every layer (Mistral rule)")
        return super().default_kinds(m)

    def v_head_dim(self, m: Model) -> int | None:
        return m.cfg.opt_int("v_head_dim")

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        built = super().build(m, kinds)
        m.notes.append("generic path: q/k/v/o attention, gated MLP and two RMSNorms per layer assumed")
        return built


class Mistral(SlidesEveryLayer):
    pass


class Mistral3(Family):
    """Mistral 3 wraps a text model (a plain Mistral one unless `text_config.model_type` says
    otherwise) and a Pixtral vision tower."""

    vision_model_types = (None, "pixtral")

    def __init__(self, name: str, default_text: Family) -> None:
        super().__init__(name)
        self.default_text = default_text

    def text_rules(self, inner: Family | None) -> Family:
        return self.default_text if inner is None or inner is self else inner

    def count_vision(self, m: Model, v: Fields) -> int:
        return vision.pixtral(v) + vision.mistral3_projector(m, v)


class Qwen2(SlidesFromMaxWindowLayers):
    def attention_params(self, m: Model, v_dim: int | None = None) -> int:
        return attn_params(m.hidden, m.heads, m.kv_heads, m.head_dim, qkv_bias=True)


class Qwen3(SlidesFromMaxWindowLayers):
    qk_norm = True


class Qwen25VL(vision.KnownTower, Qwen2):
    """Qwen2.5-VL: Qwen2's text rules (flat or under `text_config`) and its vision transformer."""

    vision_model_types = (None, "qwen2_5_vl")
    tower_rules = (vision.qwen2_5_vl, vision.qwen2_5_vl_tower)


class Qwen3VL(vision.KnownTower, Qwen3):
    """Qwen3-VL (dense): Qwen3's text rules and the Qwen3-VL vision tower with deepstack mergers."""

    vision_model_types = (None, "qwen3_vl")
    tower_rules = (vision.qwen3_vl, vision.qwen3_vl_tower)


class Glm4(Family):
    """GLM-4: q/k/v biases by default, and post-attention / post-MLP norms besides the two input norms."""

    norms_per_layer = 4

    def attention_params(self, m: Model, v_dim: int | None = None) -> int:
        bias = m.cfg.flag("attention_bias", True)
        return attn_params(m.hidden, m.heads, m.kv_heads, m.head_dim, qkv_bias=bias)


class Glm(Glm4):
    """model_type `glm` (GLM-4 0414's predecessor layout): two norms per layer."""

    norms_per_layer = 2


class Phi3(SlidesEveryLayer):
    """Phi-3: fused qkv_proj and gate_up_proj (the same counts as separate ones), no biases."""

    def attention_params(self, m: Model, v_dim: int | None = None) -> int:
        return attn_params(m.hidden, m.heads, m.kv_heads, m.head_dim)

    def mlp_params(self, m: Model) -> int:
        return gated_mlp(m.hidden, m.intermediate)

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        if any(scaling is RopeScaling.LONGROPE for scaling, _ in rope_entries(m)):
            orig = m.cfg.opt_int("original_max_position_embeddings", hi=MAX_POSITIONS)
            if orig:
                m.notes.append(f"LongRoPE: vLLM defaults max_model_len to original_max_position_embeddings ({orig})")
        return super().build(m, kinds)


class Falcon(Family):
    """Falcon (and RefinedWeb): GPT-style key names, multi-query or grouped KV, parallel attention."""

    tied_by_default = True

    def read_hidden(self, m: Model) -> int:
        c = m.cfg
        return c.integer("hidden_size") if c.has("hidden_size") else c.integer("n_embed")

    def read_heads(self, m: Model) -> int:
        c = m.cfg
        key = "num_attention_heads" if c.has("num_attention_heads") else "n_head"
        return c.integer(key, hi=MAX_HEADS)

    def read_num_layers(self, m: Model) -> int:
        key = "num_hidden_layers" if m.cfg.has("num_hidden_layers") else "n_layer"
        return m.cfg.integer(key, hi=MAX_LAYERS)

    def read_kv_heads(self, m: Model) -> int:
        c = m.cfg
        if c.flag("new_decoder_architecture", False):
            key = "num_kv_heads" if c.has("num_kv_heads") else "n_head_kv"
            return c.integer(key, m.heads, hi=MAX_HEADS)
        if c.flag("multi_query", True):
            return 1
        return m.heads

    def read_head_dim(self, m: Model) -> int:
        return self.derived_head_dim(m)  # Falcon's `head_dim` key is not read by transformers

    def read_intermediate(self, m: Model) -> int:
        return m.cfg.integer("ffn_hidden_size", 4 * m.hidden)

    def final_norm_params(self, m: Model) -> int:
        return 2 * m.hidden  # LayerNorm with bias

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h, hd = m.hidden, m.head_dim
        bias = c.flag("bias", False)
        new_arch = c.flag("new_decoder_architecture", False)
        if new_arch:
            qkv_out = (2 * m.kv_heads + m.heads) * hd
            m.notes.append(
                "Falcon new_decoder_architecture: engines cache num_kv_heads; transformers caches all "
                f"{m.heads} heads (over-caches {m.heads // m.kv_heads}x)"
            )
        elif c.flag("multi_query", True):
            qkv_out = h + 2 * hd
        else:
            qkv_out = 3 * h
        attn = h * qkv_out + h * h + ((qkv_out + h) if bias else 0)
        mlp = plain_mlp(h, m.intermediate, bias)
        parallel = c.flag("parallel_attn", True)
        ln_count = c.opt_int("num_ln_in_parallel_attn", hi=2)
        if ln_count is None and new_arch:
            ln_count = 2
        n_ln = 2 if (not parallel or ln_count == 2) else 1
        lp = LayerParams(attention=attn, mlp=mlp, norms=n_ln * 2 * h)
        if c.flag("alibi", False):
            m.notes.append("ALiBi positions")
        return self.kv_layers(m, kinds), [lp] * m.num_layers, 0


class Opt(Family):
    """OPT: MHA with biases, a plain ReLU MLP (`ffn_dim`) with biases, LayerNorms with bias, learned
    positions (max_position_embeddings + 2 rows, counted as extra parameters the engine loads)."""

    tied_by_default = True
    loads_extra_params = True

    def read_intermediate(self, m: Model) -> int:
        return m.cfg.integer("ffn_dim")

    def final_norm_params(self, m: Model) -> int:
        # OPT-350m (post-norm) has no final LayerNorm
        return 2 * m.hidden if m.cfg.flag("do_layer_norm_before", True) else 0

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        h = m.hidden
        bias = c.flag("enable_bias", True)
        attn = attn_params(h, m.heads, m.kv_heads, m.head_dim, qkv_bias=bias, o_bias=bias)
        norms = 2 * 2 * h if c.flag("layer_norm_elementwise_affine", True) else 0
        lp = LayerParams(attention=attn, mlp=plain_mlp(h, m.intermediate, bias), norms=norms)
        positions = (c.integer("max_position_embeddings", 2048) + 2) * h
        projection = c.integer("word_embed_proj_dim", h)
        if projection != h:
            m.fail(f"word_embed_proj_dim {projection} != hidden_size {h} (OPT-350m projections) is not supported")
        return self.kv_layers(m, kinds), [lp] * m.num_layers, positions
