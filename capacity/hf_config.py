"""config.json (a plain dict) -> ModelSpec, for every model family a serving fleet runs.

Pure: no I/O. Errors are `ConfigError` with a one-line reason; any KeyError/TypeError/... that
malformed input provokes inside the parser is turned into a ConfigError as well.

How a config becomes a model
----------------------------
* **Nesting.** Multimodal wrappers (Gemma 3, Llama 4, Mistral 3, Qwen-VL...) keep the language
  model under `text_config`; that is what is parsed. Wrapper-level keys (`quantization_config`,
  `torch_dtype`, `tie_word_embeddings` where the text config lacks it) are read from the outer dict.
  The vision tower (and projector) goes into `extra_params` where the parser knows its structure
  (Llama 4, Gemma 3 SigLIP, Mistral 3 Pixtral, Qwen3.5); otherwise a note says it is not counted.
* **Layers.** `ModelSpec.layers` holds one `LayerKVSpec` per decoder layer that has a token mixer
  (attention, MLA, Mamba, gated delta-net), with `index` = the decoder layer index. Nemotron-H's
  MLP-only and MoE-only layers (`-` and `E` in `hybrid_override_pattern`) cache nothing and have
  no `LayerKVSpec`; for every other family `len(layers) == num_layers`. `layer_params` always has
  one entry per decoder layer (`num_layers`).
* **Windows.** Per-layer kinds follow each family's transformers rule (see `_layer_kinds`):
  Mistral/Mixtral/Phi-3 `sliding_window` on every layer; Qwen2/Qwen3 only with
  `use_sliding_window`, on layers with index >= `max_window_layers`; Gemma 2 / GPT-OSS even
  layers sliding; Gemma 3 full iff (i+1) % `sliding_window_pattern` == 0; Llama 4 chunked where
  `no_rope_layers[i]` is 1 (default: every 4th layer is full); any explicit `layer_types` wins.
* **KV sharing** (`num_kv_shared_layers`, Gemma 3n / Gemma 4, and the generic path): the last N
  layers are SHARED and read the last non-shared layer of the same attention type. Gemma 4 global
  layers take `global_head_dim` and, with `attention_k_eq_v`, `num_global_key_value_heads` (or
  `per_layer_config`, the form transformers 5 writes).
* **MLA** (`kv_lora_rank` set: DeepSeek-V2/V3/R1, Kimi-K2, GLM-4.7-Flash): one latent "head" of
  `kv_lora_rank` (K) + `qk_rope_head_dim` (V); the config's `head_dim` (= qk_rope_head_dim in
  DeepSeek configs) is never used for KV.
* **State layers** carry per-sequence element counts: Mamba-1 (Jamba) conv = I * d_conv,
  recurrent = I * d_state with I = expand * hidden; Mamba-2 (Nemotron-H) conv =
  (I + 2 * n_groups * d_state) * conv_kernel, recurrent = I * d_state with I = heads * head_dim;
  gated delta-net (Qwen3-Next, Qwen3.5) conv = (2 * Hk * Dk + Hv * Dv) * kernel, recurrent =
  Hv * Dk * Dv. The recurrent state is stored in `mamba_ssm_cache_dtype` (or `mamba_ssm_dtype`),
  float32 when the config says nothing.
* **Context limit** follows vLLM's `_get_and_verify_max_len`: the smallest of the length keys the
  config has (`max_position_embeddings`, `n_positions`, `max_seq_len`, `seq_length`,
  `model_max_length`, `max_sequence_length`, `max_seq_length`, `seq_len`); then, unless the model
  is Gemma 3, for rope types other than su/longrope/llama3 the length is multiplied by the rope
  `factor`, and for yarn the base becomes `original_max_position_embeddings` first.
  (vLLM additionally defaults LongRoPE models to `original_max_position_embeddings`; that is a
  default, not the limit, and is recorded in `notes`.)
* **Parameters** are counted per family from the structure transformers builds (biases, norms,
  q/k norms, sinks, MoE routers with their correction bias, shared experts); `extra_params`
  holds what is outside the decoder stack: MTP modules as the checkpoint stores them, vision
  towers, Gemma 4 per-layer embeddings. Checked exactly against transformers 5.24 instantiations
  (tests/test_oracle_transformers.py) and published safetensors totals (tests/test_param_counts.py).
* **Published configs omit fields** transformers fills from its class defaults (Gemma 3's
  text_config has no vocab_size): those defaults are applied and listed in `notes`.
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from capacity.spec import CheckpointQuant, KVKind, LayerKVSpec, LayerParams, ModelSpec, SpecError, StateMixer


class ConfigError(SpecError):
    """The config cannot be turned into a ModelSpec; the message is one line for the user."""


# Sanity bounds: anything beyond these is a broken config, not a model.
MAX_LAYERS = 1_000_000
MAX_DIM = 1_000_000  # hidden, intermediate, head dims, ranks
MAX_HEADS = 100_000
MAX_VOCAB = 100_000_000
MAX_EXPERTS = 1_000_000
MAX_POSITIONS = 1 << 34  # ~1.7e10 tokens
DEFAULT_MAX_LEN = 2048  # vLLM's fallback when no length key is present
MAX_ROPE_FACTOR = 1024  # published configs scale by 4 to 64; NaN, inf and 1e300 are not factors

# vLLM's `possible_keys` for the model's maximum length, in its order.
_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)

_DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "torch.bfloat16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "torch.float16": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "torch.float32": "float32",
}

# model_type -> normalized family
_FAMILIES = {
    "llama": "llama",
    "mistral": "mistral",
    "ministral": "mistral",
    "mixtral": "mixtral",
    "qwen2": "qwen2",
    "qwen2_moe": "qwen2_moe",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3_moe",
    "qwen3_next": "qwen3_next",
    "qwen3_5": "qwen3_5",
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe": "qwen3_5_moe",
    "qwen3_5_moe_text": "qwen3_5_moe",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "gemma3_text": "gemma3",
    "gemma4": "gemma4",
    "gemma4_text": "gemma4",
    "phi3": "phi3",
    "deepseek_v2": "deepseek_v2",
    "deepseek_v3": "deepseek_v3",
    "deepseek_v32": "deepseek_v32",
    "kimi_k2": "kimi_k2",
    "gpt_oss": "gpt_oss",
    "llama4": "llama4",
    "llama4_text": "llama4",
    "mistral3": "mistral3",
    "falcon": "falcon",
    "RefinedWeb": "falcon",
    "RefinedWebModel": "falcon",
    "jamba": "jamba",
    "nemotron_h": "nemotron_h",
    "glm": "glm4",
    "glm4": "glm4",
    "glm4_moe": "glm4_moe",
    "glm4_moe_lite": "glm4_moe_lite",
    "minimax_m2": "minimax_m2",
    "opt": "opt",
}

# Families whose transformers config defaults `tie_word_embeddings` to True.
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma4", "falcon", "opt"})

# Fields that published configs omit because transformers fills them from the config class
# defaults (e.g. google/gemma-3-27b-it's text_config has no vocab_size or max_position_embeddings).
_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3": {
        "vocab_size": 262_208,
        "max_position_embeddings": 131_072,
        "head_dim": 256,
        "num_key_value_heads": 4,
        "sliding_window": 4096,
    },
}

_MLA_FAMILIES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe_lite"})

# layer_types vocabulary (transformers' ALLOWED_LAYER_TYPES and legacy names) -> internal mixer
_LAYER_TYPE_MIXER = {
    "full_attention": "full",
    "attention": "full",
    "global": "full",
    "sliding_attention": "sliding",
    "local": "sliding",
    "chunked_attention": "chunked",
    "linear_attention": "state",
    "mamba": "state",
    "mamba2": "state",
    "moe": "none",
    "mlp": "none",
}


_REQUIRED: Any = object()


def _clip(value: Any) -> str:
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


class _Fields:
    """Typed, validated access to one config dict; every failure is a one-line ConfigError."""

    def __init__(self, data: Mapping[str, Any], label: str, prefix: str = "") -> None:
        self.data = data
        self.label = label
        self.prefix = prefix

    def fail(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.label}: {message}")

    def key(self, key: str) -> str:
        return f"`{self.prefix}{key}`"

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str) -> Any:
        return self.data.get(key)

    def integer(self, key: str, default: Any = _REQUIRED, *, lo: int = 1, hi: int = MAX_DIM) -> int:
        value = self.data.get(key)
        if value is None:
            if default is _REQUIRED:
                self.fail(f"missing required field {self.key(key)}")
            return int(default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{self.key(key)} must be an integer, got {_clip(value)}")
        if value < lo:
            self.fail(f"{self.key(key)} must be >= {lo}, got {value}")
        if value > hi:
            self.fail(f"{self.key(key)} = {value} is implausibly large (max {hi:,})")
        return value

    def opt_int(self, key: str, *, lo: int = 1, hi: int = MAX_DIM) -> int | None:
        if self.data.get(key) is None:
            return None
        return self.integer(key, lo=lo, hi=hi)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(f"{self.key(key)} must be true or false, got {_clip(value)}")
        return value

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.fail(f"{self.key(key)} must be a string, got {_clip(value)}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.fail(f"{self.key(key)} must be a number, got {_clip(value)}")
        return float(value)

    def ints(self, key: str, *, lo: int = 0, hi: int = MAX_LAYERS) -> list[int] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list | tuple):
            self.fail(f"{self.key(key)} must be a list of integers, got {_clip(value)}")
        out: list[int] = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or not lo <= item <= hi:
                self.fail(f"{self.key(key)} must hold integers in [{lo}, {hi}], got {_clip(item)}")
            out.append(item)
        return out

    def texts(self, key: str) -> list[str] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
            self.fail(f"{self.key(key)} must be a list of strings, got {_clip(value)}")
        return list(value)

    def mapping(self, key: str) -> Mapping[str, Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self.fail(f"{self.key(key)} must be an object, got {_clip(value)}")
        return value

    def sub(self, key: str) -> _Fields | None:
        value = self.mapping(key)
        return None if value is None else _Fields(value, self.label, f"{self.prefix}{key}.")


@dataclass
class _Model:
    """Working state of one parse."""

    label: str
    outer: _Fields
    cfg: _Fields  # the text model's fields (outer for plain text models)
    model_type: str
    family: str
    rules: str  # which family's structural rules apply (mistral3 -> mistral, unknown -> generic)
    architecture: str
    hidden: int = 0
    num_layers: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    vocab: int = 0
    intermediate: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    notes: list[str] = field(default_factory=list)

    def fail(self, message: str) -> NoReturn:
        self.cfg.fail(message)


# --------------------------------------------------------------------------------------- entry


def parse_config(config: Mapping[str, Any], *, name: str | None = None) -> ModelSpec:
    """Normalize a Hugging Face config.json dict into a ModelSpec (raises ConfigError)."""
    label = name or "config"
    if not isinstance(config, Mapping):
        raise ConfigError(f"{label}: config must be a JSON object, got {type(config).__name__}")
    if name is None:
        guess = config.get("_name_or_path") or config.get("model_type")
        label = guess if isinstance(guess, str) and guess else "config"
    try:
        return _parse(config, label)
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError, AttributeError, OverflowError) as exc:
        detail = str(exc).replace("\n", " ")[:120]
        raise ConfigError(f"{label}: malformed config ({type(exc).__name__}: {detail})") from exc


def _parse(config: Mapping[str, Any], label: str) -> ModelSpec:
    outer = _Fields(config, label)
    model_type = outer.text("model_type")
    text_sub = outer.sub("text_config")
    cfg = text_sub if text_sub is not None and (text_sub.has("hidden_size") or text_sub.has("n_embd")) else outer
    inner_type = cfg.text("model_type") if cfg is not outer else None

    family = _FAMILIES.get(model_type or "") or _FAMILIES.get(inner_type or "")
    if family == "mistral3":
        # Mistral 3 wraps a plain Mistral text model; parse that with the Mistral rules.
        text_family = _FAMILIES.get(inner_type or "", "mistral")
        family_rules = text_family if text_family != "mistral3" else "mistral"
    else:
        family_rules = family or "generic"
    if family_rules in ("qwen3_5", "qwen3_5_moe"):
        family_rules = "qwen3_next"  # same gated delta-net / gated attention hybrid
    if family_rules == "deepseek_v32":
        family_rules = "deepseek_v3"  # V3 plus the sparse-attention indexer (read in _build_mla)
    if family is None:
        family = "generic"
    architectures = outer.raw("architectures")
    architecture = ""
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        architecture = architectures[0]
    if family == "generic" and cfg.has("kv_lora_rank"):
        family_rules = "mla_generic"
    defaults = _TEXT_DEFAULTS.get(family_rules)
    filled: list[str] = []
    if defaults:
        filled = sorted(k for k in defaults if k not in cfg.data)
        cfg = _Fields(ChainMap(dict(cfg.data), defaults), cfg.label, cfg.prefix)

    m = _Model(
        label=label,
        outer=outer,
        cfg=cfg,
        model_type=model_type or inner_type or "unknown",
        family=family,
        rules=family_rules,
        architecture=architecture,
    )
    if defaults and filled:
        values = ", ".join(f"{k}={defaults[k]}" for k in filled)
        m.notes.append(f"absent fields taken from transformers' {family_rules} defaults: {values}")
    if family == "generic":
        m.notes.append(
            f"model_type {model_type or inner_type or '(none)'!r} is not a known family: parsed by the "
            "generic (Llama-like) rules"
        )

    _read_dims(m, family_rules)
    kinds = _layer_kinds(m, family_rules)
    builder = _BUILDERS.get(family_rules, _build_dense)
    layers, params, extra = builder(m, kinds)
    _check_routing(m, params)

    tie_default = family_rules in _TIED_BY_DEFAULT
    if cfg.has("tie_word_embeddings"):
        tie = cfg.flag("tie_word_embeddings", tie_default)
    else:
        tie = outer.flag("tie_word_embeddings", tie_default)
    embedding = m.vocab * m.hidden
    lm_head = 0 if tie else m.vocab * m.hidden
    final_norm = _final_norm_params(m, family_rules)

    vision = _vision_params(m)
    # what the engine loads besides the decoder: the vision tower, and Gemma 4's per-layer
    # embeddings; multi-token-prediction modules stay on disk unless speculative decoding asks
    loaded_extra = vision + (extra if family_rules in ("gemma4", "opt") else 0)
    extra += vision

    max_pos, context = _context_limit(m)
    dtype = _dtype(m)
    quant = _quantization(m)
    ssm_dtype = None
    for key in ("mamba_ssm_cache_dtype", "mamba_ssm_dtype"):  # Qwen3.5 spells it mamba_ssm_dtype
        ssm_dtype = ssm_dtype or m.cfg.text(key) or m.outer.text(key)
    if ssm_dtype is not None:
        normalized = _DTYPES.get(ssm_dtype)
        if normalized is None:
            m.fail(f"unsupported mamba SSM state dtype {ssm_dtype!r}")
        ssm_dtype = normalized

    return ModelSpec(
        model_type=m.model_type,
        architecture=m.architecture,
        family=m.family,
        hidden_size=m.hidden,
        num_layers=m.num_layers,
        num_attention_heads=m.heads,
        num_kv_heads=m.kv_heads,
        head_dim=m.head_dim,
        vocab_size=m.vocab,
        intermediate_size=m.intermediate,
        max_position_embeddings=max_pos,
        context_limit_tokens=context,
        torch_dtype=dtype,
        tie_word_embeddings=tie,
        layers=tuple(layers),
        layer_params=tuple(params),
        embedding_params=embedding,
        lm_head_params=lm_head,
        final_norm_params=final_norm,
        extra_params=extra,
        loaded_extra_params=loaded_extra,
        num_experts=m.num_experts,
        num_experts_per_token=m.experts_per_token,
        quantization=quant,
        mamba_ssm_cache_dtype=ssm_dtype or "float32",
        mamba_ssm_dtype_stated=ssm_dtype is not None,
        is_generic=m.family == "generic",
        notes=tuple(m.notes),
    )


# ------------------------------------------------------------------------------- dimensions


def _read_dims(m: _Model, rules: str) -> None:
    c = m.cfg
    if rules == "falcon":
        m.hidden = c.integer("hidden_size") if c.has("hidden_size") else c.integer("n_embed")
        m.heads = (
            c.integer("num_attention_heads", hi=MAX_HEADS)
            if c.has("num_attention_heads")
            else c.integer("n_head", hi=MAX_HEADS)
        )
    else:
        m.hidden = c.integer("hidden_size")
        m.heads = c.integer("num_attention_heads", hi=MAX_HEADS)

    if rules == "nemotron_h":
        pattern = _nemotron_pattern(m)
        m.num_layers = len(pattern)
        if c.has("num_hidden_layers") and c.integer("num_hidden_layers", hi=MAX_LAYERS) != m.num_layers:
            m.fail(
                f"`num_hidden_layers` ({c.integer('num_hidden_layers', hi=MAX_LAYERS)}) does not match the "
                f"{m.num_layers} layers of the hybrid pattern"
            )
    elif rules == "falcon" and not c.has("num_hidden_layers"):
        m.num_layers = c.integer("n_layer", hi=MAX_LAYERS)
    else:
        m.num_layers = c.integer("num_hidden_layers", hi=MAX_LAYERS)
    m.vocab = c.integer("vocab_size", hi=MAX_VOCAB)

    # KV heads
    if rules == "falcon":
        if c.flag("new_decoder_architecture", False):
            key = "num_kv_heads" if c.has("num_kv_heads") else "n_head_kv"
            m.kv_heads = c.integer(key, m.heads, hi=MAX_HEADS)
        elif c.flag("multi_query", True):
            m.kv_heads = 1
        else:
            m.kv_heads = m.heads
    else:  # (MLA configs repeat num_attention_heads here; the cache holds one latent regardless)
        m.kv_heads = c.integer("num_key_value_heads", m.heads, hi=MAX_HEADS)
    if m.kv_heads > m.heads:
        m.fail(f"num_key_value_heads ({m.kv_heads}) exceeds num_attention_heads ({m.heads})")
    if m.heads % m.kv_heads:
        m.fail(f"num_attention_heads ({m.heads}) is not divisible by num_key_value_heads ({m.kv_heads})")

    # head dim (MLA configs carry head_dim = qk_rope_head_dim: never used for KV)
    if rules in _MLA_FAMILIES or rules == "mla_generic":
        m.head_dim = c.integer("qk_nope_head_dim") + c.integer("qk_rope_head_dim")
    elif c.has("head_dim") and rules != "falcon":
        m.head_dim = c.integer("head_dim")
    elif c.has("attention_head_dim"):  # older Nemotron-H configs
        m.head_dim = c.integer("attention_head_dim")
    else:
        if m.hidden % m.heads:
            m.fail(f"hidden_size ({m.hidden}) is not divisible by num_attention_heads ({m.heads})")
        m.head_dim = m.hidden // m.heads

    # MLP width (the dense MLP; MoE experts are read by the family builders)
    if rules == "falcon":
        m.intermediate = c.integer("ffn_hidden_size", 4 * m.hidden)
    elif rules == "llama4":
        m.intermediate = c.integer("intermediate_size_mlp", 16384)
    elif rules == "qwen3_next":
        m.intermediate = c.integer("intermediate_size", 0, lo=0)  # MoE variants may omit it
    elif rules == "opt":
        m.intermediate = c.integer("ffn_dim")
    else:
        m.intermediate = c.integer("intermediate_size")


def _nemotron_pattern(m: _Model) -> list[str]:
    """Nemotron-H per-layer block types: 'M' mamba2, '*' attention, '-' MLP, 'E' MoE."""
    c = m.cfg
    if c.has("hybrid_override_pattern"):
        pattern = c.text("hybrid_override_pattern") or ""
        bad = sorted(set(pattern) - set("M*-E"))
        if bad:
            m.fail(f"`hybrid_override_pattern` has unknown layer codes {''.join(bad)!r} (expected M * - E)")
        if not pattern:
            m.fail("`hybrid_override_pattern` is empty")
        return list(pattern)
    for key in ("layers_block_type", "layer_types"):
        types = c.texts(key)
        if types is not None:
            codes = {
                "mamba": "M",
                "linear_attention": "M",
                "attention": "*",
                "full_attention": "*",
                "mlp": "-",
                "moe": "E",
            }
            out = []
            for i, t in enumerate(types):
                if t not in codes:
                    m.fail(f"`{key}[{i}]` is an unknown layer type {t!r}")
                out.append(codes[t])
            if not out:
                m.fail(f"`{key}` is empty")
            return out
    m.fail("missing required field `hybrid_override_pattern` (or `layers_block_type`)")


# ------------------------------------------------------------------------------ layer kinds


@dataclass(frozen=True)
class _Kind:
    mixer: str  # full | sliding | chunked | mla | state | none
    window: int | None = None


def _window(m: _Model) -> int:
    return m.cfg.integer("sliding_window", hi=MAX_POSITIONS)


def _layer_kinds(m: _Model, rules: str) -> list[_Kind]:
    c = m.cfg
    n = m.num_layers
    if rules in _MLA_FAMILIES or rules == "mla_generic":
        return [_Kind("mla")] * n
    if rules == "nemotron_h":
        mixers = {"M": "state", "*": "full", "-": "none", "E": "none"}
        return [_Kind(mixers[ch]) for ch in _nemotron_pattern(m)]
    if rules == "jamba":
        period = c.integer("attn_layer_period", 8, hi=MAX_LAYERS)
        offset = c.integer("attn_layer_offset", 4, lo=0, hi=MAX_LAYERS)
        if offset >= period:
            m.fail(f"`attn_layer_offset` ({offset}) must be smaller than `attn_layer_period` ({period})")
        return [_Kind("full") if i % period == offset else _Kind("state") for i in range(n)]
    explicit = _explicit_layer_types(m, rules)
    if rules == "gemma4" and explicit is not None:
        explicit[-1] = _Kind("full")  # transformers forces the last Gemma 4 layer to full attention
    if rules == "qwen3_next":
        if explicit is not None:
            return explicit
        interval = c.integer("full_attention_interval", 4, hi=MAX_LAYERS)
        return [_Kind("state") if (i + 1) % interval else _Kind("full") for i in range(n)]

    if explicit is not None:
        return explicit
    if rules in ("mistral", "mixtral", "phi3"):
        if c.has("sliding_window"):
            return [_Kind("sliding", _window(m))] * n
        return [_Kind("full")] * n
    if rules in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if c.flag("use_sliding_window", False) and c.has("sliding_window"):
            w = _window(m)
            first = c.integer("max_window_layers", 28, lo=0, hi=MAX_LAYERS)
            return [_Kind("sliding", w) if i >= first else _Kind("full") for i in range(n)]
        return [_Kind("full")] * n
    if rules in ("gemma2", "gpt_oss"):
        w = _window(m)
        return [_Kind("sliding", w) if (i + 1) % 2 else _Kind("full") for i in range(n)]
    if rules == "gemma4":
        w = _gemma_window(m)
        out = [_Kind("sliding", w) if (i + 1) % 6 else _Kind("full") for i in range(n)]
        out[-1] = _Kind("full")  # transformers forces the last Gemma 4 layer to full attention
        return out
    if rules == "gemma3":
        w = _gemma_window(m)
        pattern = c.integer("sliding_window_pattern", 6, hi=MAX_LAYERS)
        return [_Kind("sliding", w) if (i + 1) % pattern else _Kind("full") for i in range(n)]
    if rules == "llama4":
        chunk = c.opt_int("attention_chunk_size", hi=MAX_POSITIONS)
        rope_layers = c.ints("no_rope_layers", lo=0, hi=1)
        if not rope_layers:
            interval = c.integer("no_rope_layer_interval", 4, hi=MAX_LAYERS)
            rope_layers = [int((i + 1) % interval != 0) for i in range(n)]
        if len(rope_layers) < n:
            m.fail(f"`no_rope_layers` has {len(rope_layers)} entries for {n} layers")
        if chunk is None:
            return [_Kind("full")] * n
        return [_Kind("chunked", chunk) if rope_layers[i] else _Kind("full") for i in range(n)]
    # Other known families slide only where `layer_types` says so. An unknown family with a
    # `sliding_window` is read with the Mistral rule (every layer), and the note says so.
    if rules == "generic" and c.has("sliding_window"):
        m.notes.append("generic path: `sliding_window` applied to every layer (Mistral rule)")
        return [_Kind("sliding", _window(m))] * n
    return [_Kind("full")] * n


def _gemma_window(m: _Model) -> int:
    w = _window(m)
    if m.rules == "gemma4":
        # Gemma 4: "all" makes every token bidirectional, and the window is converted the same way
        if m.cfg.text("use_bidirectional_attention") == "all":
            w = w // 2 + 1
        return w
    if m.cfg.flag("use_bidirectional_attention", False):
        # transformers' Gemma3 converts the window for bidirectional (embedding) models
        w = w // 2 + 1
    return w


def _explicit_layer_types(m: _Model, rules: str) -> list[_Kind] | None:
    c = m.cfg
    types = c.texts("layer_types")
    if types is None:
        return None
    n = m.num_layers
    if len(types) != n:
        m.fail(f"`layer_types` has {len(types)} entries but the model has {n} layers")
    kinds: list[_Kind] = []
    for i, t in enumerate(types):
        mixer = _LAYER_TYPE_MIXER.get(t)
        if mixer is None:
            m.fail(f"`layer_types[{i}]` is an unsupported layer type {t!r}")
        if mixer == "sliding":
            w = _gemma_window(m) if rules in ("gemma3", "gemma4") else _window(m)
            kinds.append(_Kind("sliding", w))
        elif mixer == "chunked":
            kinds.append(_Kind("chunked", c.integer("attention_chunk_size", hi=MAX_POSITIONS)))
        elif mixer == "state" and rules not in ("qwen3_next",):
            m.fail(f"`layer_types[{i}]` = {t!r}: no state-size rule for family {m.family!r}")
        else:
            kinds.append(_Kind(mixer))
    return kinds


# ------------------------------------------------------------------------------ KV helpers


def _attn_layer(index: int, kind: _Kind, kv_heads: int, k_dim: int, v_dim: int | None = None) -> LayerKVSpec:
    kv_kind = {"full": KVKind.FULL, "sliding": KVKind.SLIDING, "chunked": KVKind.CHUNKED}[kind.mixer]
    return LayerKVSpec(
        index=index,
        kind=kv_kind,
        num_kv_heads=kv_heads,
        k_head_dim=k_dim,
        v_head_dim=k_dim if v_dim is None else v_dim,
        window_tokens=kind.window if kv_kind is not KVKind.FULL else None,
    )


def _apply_kv_sharing(m: _Model, layers: list[LayerKVSpec], kinds: list[_Kind]) -> list[LayerKVSpec]:
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
            m.fail(f"layer {i} shares KV but no earlier layer has its type {kinds[i].mixer!r}")
        out.append(LayerKVSpec(index=i, kind=KVKind.SHARED, kv_source_layer=source))
    return out


def _plain_kv_layers(m: _Model, kinds: list[_Kind], v_dim: int | None = None) -> list[LayerKVSpec]:
    layers = []
    for i, kind in enumerate(kinds):
        if kind.mixer not in ("full", "sliding", "chunked"):
            m.fail(f"layer {i}: {kind.mixer} layers are not supported for family {m.family!r}")
        layers.append(_attn_layer(i, kind, m.kv_heads, m.head_dim, v_dim))
    return _apply_kv_sharing(m, layers, kinds)


# -------------------------------------------------------------------------- param helpers


def _attn_params(
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
    bias = (heads * head_dim + kv_heads * (head_dim + v_dim) if qkv_bias else 0) + (hidden if o_bias else 0)
    return q + kv + o + bias


def _gated_mlp(hidden: int, inter: int, bias: bool = False) -> int:
    return 3 * hidden * inter + ((2 * inter + hidden) if bias else 0)


def _plain_mlp(hidden: int, inter: int, bias: bool = False) -> int:
    return 2 * hidden * inter + ((inter + hidden) if bias else 0)


def _final_norm_params(m: _Model, rules: str) -> int:
    if rules == "opt":  # OPT-350m (post-norm) has no final LayerNorm
        return 2 * m.hidden if m.cfg.flag("do_layer_norm_before", True) else 0
    if rules == "falcon":
        return 2 * m.hidden  # LayerNorm with bias
    return m.hidden


_Built = tuple[list[LayerKVSpec], list[LayerParams], int]


_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def _experts_common(m: _Model, topk_key: str = "num_experts_per_tok") -> int:
    """Routed expert count and top-k. transformers 5 renames the count through `attribute_map`
    (Qwen3-MoE writes `num_local_experts` where the published config has `num_experts`), so
    every spelling is accepted."""
    c = m.cfg
    key = next((k for k in _EXPERT_KEYS if c.has(k)), None)
    if key is None:
        m.fail("missing required field `num_experts` (or `num_local_experts` / `n_routed_experts`)")
    e = c.integer(key, hi=MAX_EXPERTS)
    m.num_experts = e
    m.experts_per_token = c.integer(topk_key, hi=MAX_EXPERTS)
    if m.experts_per_token > e:
        m.fail(f"{c.key(topk_key)} ({m.experts_per_token}) exceeds {c.key(key)} ({e}): a token cannot use more experts than exist")
    return e


_TOPK_KEYS = ("num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_topk")


def _check_routing(m: _Model, params: list[LayerParams]) -> None:
    """Expert counts agree with routing in every family: a config that routes each token to k > 0
    experts must have at least k experts (a count of 0 next to a top-k is a broken config, not a
    dense model), the parsed counts must agree with each other, and a model with experts must
    have a layer that holds them (`first_k_dense_replace: 1000` would plan a MoE model as dense)."""
    c = m.cfg
    topk_key = next((k for k in _TOPK_KEYS if c.has(k)), None)
    count_key = next((k for k in _EXPERT_KEYS if c.has(k)), None)
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
        m.fail(
            f"declares {m.num_experts} experts but none of its {m.num_layers} layers holds them "
            "(check first_k_dense_replace, moe_layer_freq, mlp_only_layers, decoder_sparse_step)"
        )


# --------------------------------------------------------------------------- dense families


def _build_dense(m: _Model, kinds: list[_Kind]) -> _Built:
    """Llama, Mistral, Qwen2/3, Gemma 1/2/3, Phi-3, GLM-4 and the generic path."""
    c = m.cfg
    rules = m.rules
    h, hd = m.hidden, m.head_dim
    # a separate V head size (K and V dims differ) is only known from unknown families' configs
    v_dim = c.opt_int("v_head_dim") if rules == "generic" else None
    if rules == "qwen2":
        attn = _attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=True)
    elif rules == "glm4":
        attn = _attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=c.flag("attention_bias", True))
    else:
        bias = c.flag("attention_bias", False)
        attn = _attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=bias, o_bias=bias, v_head_dim=v_dim)
    if rules in ("qwen3", "gemma3"):
        attn += 2 * hd  # q_norm, k_norm over head_dim
    mlp = _gated_mlp(h, m.intermediate, c.flag("mlp_bias", False))
    norms = 4 * h if rules in ("gemma2", "gemma3") or (rules == "glm4" and m.model_type != "glm") else 2 * h
    if rules == "generic":
        m.notes.append("generic path: q/k/v/o attention, gated MLP and two RMSNorms per layer assumed")
    params = [LayerParams(attention=attn, mlp=mlp, norms=norms)] * m.num_layers
    return _plain_kv_layers(m, kinds, v_dim), params, 0


def _build_mixtral(m: _Model, kinds: list[_Kind]) -> _Built:
    h = m.hidden
    e = _experts_common(m)
    attn = _attn_params(h, m.heads, m.kv_heads, m.head_dim)
    lp = LayerParams(attention=attn, experts=e * 3 * h * m.intermediate, router=h * e, norms=2 * h)
    return _plain_kv_layers(m, kinds), [lp] * m.num_layers, 0


def _qwen_moe_layer(m: _Model, i: int, step: int, mlp_only: set[int]) -> bool:
    return i not in mlp_only and m.num_experts > 0 and (i + 1) % step == 0


def _build_qwen_moe(m: _Model, kinds: list[_Kind]) -> _Built:
    """Qwen2-MoE / Qwen3-MoE: `decoder_sparse_step` and `mlp_only_layers` pick the MoE layers."""
    c = m.cfg
    h, hd = m.hidden, m.head_dim
    e = _experts_common(m)
    moe_inter = c.integer("moe_intermediate_size")
    step = c.integer("decoder_sparse_step", 1, hi=MAX_LAYERS)
    mlp_only = set(c.ints("mlp_only_layers", hi=m.num_layers) or [])
    is_qwen3 = m.family == "qwen3_moe"
    if is_qwen3:
        attn = _attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=c.flag("attention_bias", False)) + 2 * hd
    else:
        attn = _attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=True)
    shared_inter = 0 if is_qwen3 else c.integer("shared_expert_intermediate_size", 0, lo=0)
    params = []
    for i in range(m.num_layers):
        if _qwen_moe_layer(m, i, step, mlp_only):
            mlp = _gated_mlp(h, shared_inter) + (h if shared_inter else 0)  # shared expert + its gate
            params.append(
                LayerParams(attention=attn, mlp=mlp, experts=e * 3 * h * moe_inter, router=h * e, norms=2 * h)
            )
        else:
            params.append(LayerParams(attention=attn, mlp=_gated_mlp(h, m.intermediate), norms=2 * h))
    return _plain_kv_layers(m, kinds), params, 0


def _build_phi3(m: _Model, kinds: list[_Kind]) -> _Built:
    h = m.hidden
    attn = _attn_params(h, m.heads, m.kv_heads, m.head_dim)  # fused qkv_proj: same count
    lp = LayerParams(attention=attn, mlp=_gated_mlp(h, m.intermediate), norms=2 * h)
    rope = _rope_entries(m)
    if any(rt in ("longrope", "su") for rt, _ in rope):
        orig = m.cfg.opt_int("original_max_position_embeddings", hi=MAX_POSITIONS)
        if orig:
            m.notes.append(f"LongRoPE: vLLM defaults max_model_len to original_max_position_embeddings ({orig})")
    return _plain_kv_layers(m, kinds), [lp] * m.num_layers, 0


def _build_falcon(m: _Model, kinds: list[_Kind]) -> _Built:
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
    mlp = _plain_mlp(h, m.intermediate, bias)
    parallel = c.flag("parallel_attn", True)
    ln_count = c.opt_int("num_ln_in_parallel_attn", hi=2)
    if ln_count is None and new_arch:
        ln_count = 2
    n_ln = 2 if (not parallel or ln_count == 2) else 1
    lp = LayerParams(attention=attn, mlp=mlp, norms=n_ln * 2 * h)
    if c.flag("alibi", False):
        m.notes.append("ALiBi positions")
    return _plain_kv_layers(m, kinds), [lp] * m.num_layers, 0


def _build_opt(m: _Model, kinds: list[_Kind]) -> _Built:
    """OPT: MHA with biases, a plain ReLU MLP (`ffn_dim`) with biases, LayerNorms with bias, learned
    positions (max_position_embeddings + 2 rows, counted as extra parameters the engine loads)."""
    c = m.cfg
    h = m.hidden
    bias = c.flag("enable_bias", True)
    attn = _attn_params(h, m.heads, m.kv_heads, m.head_dim, qkv_bias=bias, o_bias=bias)
    norms = 2 * 2 * h if c.flag("layer_norm_elementwise_affine", True) else 0
    lp = LayerParams(attention=attn, mlp=_plain_mlp(h, m.intermediate, bias), norms=norms)
    positions = (c.integer("max_position_embeddings", 2048) + 2) * h
    projection = c.integer("word_embed_proj_dim", h)
    if projection != h:
        m.fail(f"word_embed_proj_dim {projection} != hidden_size {h} (OPT-350m projections) is not supported")
    return _plain_kv_layers(m, kinds), [lp] * m.num_layers, positions


def _build_gpt_oss(m: _Model, kinds: list[_Kind]) -> _Built:
    c = m.cfg
    h, hd = m.hidden, m.head_dim
    e = _experts_common(m, "num_experts_per_tok" if c.has("num_experts_per_tok") else "experts_per_token")
    inter = m.intermediate
    bias = c.flag("attention_bias", True)
    attn = _attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=bias, o_bias=bias) + m.heads  # + sinks
    experts = e * (h * 2 * inter + 2 * inter + inter * h + h)  # gate_up + bias, down + bias
    lp = LayerParams(attention=attn, experts=experts, router=h * e + e, norms=2 * h)
    return _plain_kv_layers(m, kinds), [lp] * m.num_layers, 0


def _build_llama4(m: _Model, kinds: list[_Kind]) -> _Built:
    c = m.cfg
    h, hd = m.hidden, m.head_dim
    e = _experts_common(m)
    moe_inter = c.integer("intermediate_size")
    moe_layers = c.ints("moe_layers", hi=m.num_layers - 1)
    if moe_layers is None:
        step = c.integer("interleave_moe_layer_step", 1, hi=MAX_LAYERS)
        moe_layers = list(range(step - 1, m.num_layers, step))
    moe_set = set(moe_layers)
    bias = c.flag("attention_bias", False)
    attn = _attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=bias, o_bias=bias)
    params = []
    for i in range(m.num_layers):
        if i in moe_set:
            params.append(
                LayerParams(
                    attention=attn,
                    mlp=_gated_mlp(h, moe_inter),
                    experts=e * 3 * h * moe_inter,
                    router=h * e,
                    norms=2 * h,
                )
            )
        else:
            params.append(LayerParams(attention=attn, mlp=_gated_mlp(h, m.intermediate), norms=2 * h))
    return _plain_kv_layers(m, kinds), params, 0


def _build_minimax_m2(m: _Model, kinds: list[_Kind]) -> _Built:
    c = m.cfg
    h, hd = m.hidden, m.head_dim
    e = _experts_common(m)
    attn = _attn_params(h, m.heads, m.kv_heads, hd)
    if c.flag("use_qk_norm", True):
        attn += m.heads * hd + m.kv_heads * hd  # per-layer q_norm / k_norm over all heads
    router = h * e + (e if c.flag("use_routing_bias", True) else 0)
    lp = LayerParams(attention=attn, experts=e * 3 * h * m.intermediate, router=router, norms=2 * h)
    if c.integer("num_mtp_modules", 0, lo=0) and c.flag("use_mtp", False):
        m.notes.append("MTP modules are not counted (the published checkpoint does not ship them)")
    return _plain_kv_layers(m, kinds), [lp] * m.num_layers, 0


def _build_glm4_moe(m: _Model, kinds: list[_Kind]) -> _Built:
    c = m.cfg
    h, hd = m.hidden, m.head_dim
    e = _experts_common(m)
    moe_inter = c.integer("moe_intermediate_size")
    shared = c.integer("n_shared_experts", 0, lo=0, hi=MAX_EXPERTS)
    first_dense = c.integer("first_k_dense_replace", 1, lo=0, hi=MAX_LAYERS)
    attn = _attn_params(h, m.heads, m.kv_heads, hd, qkv_bias=c.flag("attention_bias", False))
    if c.flag("use_qk_norm", False):
        attn += 2 * hd
    dense = LayerParams(attention=attn, mlp=_gated_mlp(h, m.intermediate), norms=2 * h)
    moe = LayerParams(
        attention=attn,
        mlp=shared * _gated_mlp(h, moe_inter),
        experts=e * 3 * h * moe_inter,
        router=h * e + e,
        norms=2 * h,
    )
    params = [dense if i < first_dense else moe for i in range(m.num_layers)]
    mtp = c.integer("num_nextn_predict_layers", 0, lo=0, hi=MAX_LAYERS)
    extra = 0
    if mtp:
        # as DeepSeek-V3: each MTP block stores a MoE decoder layer, enorm, hnorm, eh_proj,
        # shared_head.norm and its own copies of embed_tokens and shared_head.head
        extra = mtp * (moe.total + 3 * h + 2 * h * h + 2 * m.vocab * h)
        m.notes.append(f"extra_params: {mtp} multi-token-prediction module(s) as stored in the checkpoint")
    return _plain_kv_layers(m, kinds), params, extra


# ------------------------------------------------------------------------------------ MLA


def _mla_attention(m: _Model) -> int:
    c = m.cfg
    h, heads = m.hidden, m.heads
    kv_rank = c.integer("kv_lora_rank")
    rope = c.integer("qk_rope_head_dim")
    nope = c.integer("qk_nope_head_dim")
    v = c.integer("v_head_dim")
    q_rank = c.opt_int("q_lora_rank")
    bias = c.flag("attention_bias", False)
    if q_rank is None:
        q = h * heads * (nope + rope)
    else:
        q = h * q_rank + (q_rank if bias else 0) + q_rank + q_rank * heads * (nope + rope)  # q_a, norm, q_b
    kv_a = h * (kv_rank + rope) + ((kv_rank + rope) if bias else 0)
    kv_b = kv_rank * heads * (nope + v)
    o = heads * v * h + (h if bias else 0)
    return q + kv_a + kv_rank + kv_b + o  # + kv_a_layernorm


def _build_mla(m: _Model, kinds: list[_Kind]) -> _Built:
    """DeepSeek-V2/V3/R1, Kimi-K2 (and unknown model types that carry `kv_lora_rank`)."""
    c = m.cfg
    h = m.hidden
    kv_rank = c.integer("kv_lora_rank")
    rope = c.integer("qk_rope_head_dim")
    # DeepSeek-V3.2 sparse attention (DSA): every layer also caches its lightning indexer's key
    index_dim = c.integer("index_head_dim", 0, lo=0, hi=MAX_DIM) if m.family == "deepseek_v32" else 0
    layers = [
        LayerKVSpec(
            index=i, kind=KVKind.MLA, num_kv_heads=1, k_head_dim=kv_rank, v_head_dim=rope, indexer_head_dim=index_dim
        )
        for i in range(m.num_layers)
    ]
    m.kv_heads = 1
    attn = _mla_attention(m)
    if index_dim:
        # indexer: wq_b (q_lora_rank -> heads x dim), wk (hidden -> dim), k_norm (LayerNorm), weights_proj
        index_heads = c.integer("index_n_heads", hi=MAX_HEADS)
        q_rank = c.integer("q_lora_rank")
        attn += q_rank * index_heads * index_dim + h * index_dim + 2 * index_dim + h * index_heads
        m.notes.append(f"DSA: lightning indexer key of {index_dim} per token per layer, cached as fp8 + scales")
    n_routed = c.integer("n_routed_experts", 0, lo=0, hi=MAX_EXPERTS)
    if not n_routed and c.has("n_routed_experts") and c.has("moe_intermediate_size") and m.num_layers > c.integer(
        "first_k_dense_replace", 0, lo=0, hi=MAX_LAYERS
    ):
        # DeepSeek-V3 with `n_routed_experts: 0` would be planned as a 39 GB dense model
        m.fail("`n_routed_experts` is 0, but the config has MoE layers (`moe_intermediate_size`, "
               "`first_k_dense_replace`): a model that routes tokens needs at least one expert")
    params: list[LayerParams] = []
    moe_total = 0
    if n_routed:
        m.num_experts = n_routed
        m.experts_per_token = c.integer("num_experts_per_tok", hi=MAX_EXPERTS)
        if m.experts_per_token > n_routed:
            m.fail(f"`num_experts_per_tok` ({m.experts_per_token}) exceeds `n_routed_experts` ({n_routed})")
        moe_inter = c.integer("moe_intermediate_size")
        shared = c.integer("n_shared_experts", 0, lo=0, hi=MAX_EXPERTS)
        # GLM-4.7-Flash (glm4_moe_lite) defaults to one dense layer; transformers 5 may write
        # `mlp_layer_types` ("dense" / "sparse") instead
        first_dense = c.integer("first_k_dense_replace", 1 if m.rules == "glm4_moe_lite" else 0, lo=0, hi=MAX_LAYERS)
        freq = c.integer("moe_layer_freq", 1, hi=MAX_LAYERS)
        sparse = [i >= first_dense and i % freq == 0 for i in range(m.num_layers)]
        mlp_types = c.texts("mlp_layer_types")
        if mlp_types is not None:
            if len(mlp_types) != m.num_layers or not set(mlp_types) <= {"dense", "sparse"}:
                m.fail(f"`mlp_layer_types` must list 'dense'/'sparse' for each of the {m.num_layers} layers")
            sparse = [t == "sparse" for t in mlp_types]
        # DeepSeek-V3 / Kimi-K2 route with a score-correction bias (noaux_tc); transformers 5
        # writes topk_method null for V3 and always builds the bias
        v3_like = m.rules in ("deepseek_v3", "kimi_k2", "glm4_moe_lite")  # deepseek_v32 takes V3's rules
        topk_method = c.text("topk_method", "noaux_tc" if v3_like else "greedy")
        router = h * n_routed + (n_routed if topk_method == "noaux_tc" else 0)
        moe = LayerParams(
            attention=attn,
            mlp=shared * _gated_mlp(h, moe_inter),
            experts=n_routed * 3 * h * moe_inter,
            router=router,
            norms=2 * h,
        )
        moe_total = moe.total
        dense = LayerParams(attention=attn, mlp=_gated_mlp(h, m.intermediate), norms=2 * h)
        params = [moe if is_sparse else dense for is_sparse in sparse]
    else:
        params = [LayerParams(attention=attn, mlp=_gated_mlp(h, m.intermediate), norms=2 * h)] * m.num_layers
        moe_total = params[0].total
    extra = 0
    mtp = c.integer("num_nextn_predict_layers", 0, lo=0, hi=MAX_LAYERS)
    if mtp:
        # DeepSeek-V3 checkpoints store per MTP module: one MoE decoder layer, enorm, hnorm,
        # eh_proj (2h -> h), shared_head.norm, and copies of embed_tokens and shared_head.head.
        extra = mtp * (moe_total + 3 * h + 2 * h * h + 2 * m.vocab * h)
        m.notes.append(f"extra_params: {mtp} multi-token-prediction module(s) as stored in the checkpoint")
    if m.family == "generic":
        m.notes.append("generic path: `kv_lora_rank` present, parsed as DeepSeek-style MLA")
    return layers, params, extra


# ------------------------------------------------------------------------------ hybrids


def _build_jamba(m: _Model, kinds: list[_Kind]) -> _Built:
    c = m.cfg
    h = m.hidden
    expand = c.integer("mamba_expand", 2, hi=1024)
    d_state = c.integer("mamba_d_state", 16)
    d_conv = c.integer("mamba_d_conv", 4, hi=1024)
    dt_rank_raw = c.raw("mamba_dt_rank")
    dt_rank = math.ceil(h / 16) if dt_rank_raw in (None, "auto") else c.integer("mamba_dt_rank")
    conv_bias = c.flag("mamba_conv_bias", True)
    proj_bias = c.flag("mamba_proj_bias", False)
    inner = expand * h
    in_proj = h * 2 * inner + (2 * inner if proj_bias else 0)
    conv1d = inner * d_conv + (inner if conv_bias else 0)  # depthwise
    x_proj = inner * (dt_rank + 2 * d_state)
    dt_proj = dt_rank * inner + inner  # always with bias
    a_log_d = inner * d_state + inner
    out_proj = inner * h + (h if proj_bias else 0)
    inner_norms = dt_rank + 2 * d_state  # dt / b / c layernorms
    mamba = in_proj + conv1d + x_proj + dt_proj + a_log_d + out_proj + inner_norms
    attn = _attn_params(h, m.heads, m.kv_heads, m.head_dim)
    e = (
        c.integer("num_experts", 16, hi=MAX_EXPERTS)
        if not c.has("num_local_experts")
        else c.integer("num_local_experts")
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
        if kind.mixer == "full":
            layers.append(_attn_layer(i, kind, m.kv_heads, m.head_dim))
            mixer = attn
        else:
            layers.append(
                LayerKVSpec(
                    index=i,
                    kind=KVKind.STATE,
                    conv_state_elements=inner * d_conv,
                    recurrent_state_elements=inner * d_state,
                    conv_kernel=d_conv,
                    mixer=StateMixer.MAMBA1,
                )
            )
            mixer = mamba
        if e > 1 and i % e_period == e_offset:
            params.append(LayerParams(attention=mixer, experts=e * 3 * h * m.intermediate, router=h * e, norms=2 * h))
        else:
            params.append(LayerParams(attention=mixer, mlp=_gated_mlp(h, m.intermediate), norms=2 * h))
    return layers, params, 0


def _build_nemotron_h(m: _Model, kinds: list[_Kind]) -> _Built:
    c = m.cfg
    h = m.hidden
    pattern = _nemotron_pattern(m)
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
    attn = _attn_params(h, m.heads, m.kv_heads, m.head_dim)
    mlp_bias = c.flag("mlp_bias", False)
    dense_mlp = _plain_mlp(h, m.intermediate, mlp_bias)  # relu^2, not gated
    moe_params: LayerParams | None = None
    if "E" in pattern:
        e = _experts_common(m)
        moe_inter = c.integer("moe_intermediate_size")
        shared_inter = c.integer("moe_shared_expert_intermediate_size", moe_inter)
        shared = c.integer("n_shared_experts", 1, lo=0, hi=MAX_EXPERTS)
        latent = c.opt_int("moe_latent_size")
        width = latent or h
        latent_proj = 2 * h * latent + ((latent + h) if mlp_bias and latent else 0) if latent else 0
        moe_params = LayerParams(
            mlp=shared * _plain_mlp(h, shared_inter, mlp_bias) + latent_proj,
            experts=e * 2 * width * moe_inter,
            router=h * e + e,
            norms=h,
        )
    layers: list[LayerKVSpec] = []
    params: list[LayerParams] = []
    for i, ch in enumerate(pattern):
        if ch == "M":
            layers.append(
                LayerKVSpec(
                    index=i,
                    kind=KVKind.STATE,
                    conv_state_elements=conv_dim * kernel,
                    recurrent_state_elements=inner * d_state,
                    conv_kernel=kernel,
                    mixer=StateMixer.MAMBA2,
                )
            )
            params.append(LayerParams(attention=mamba, norms=h))
        elif ch == "*":
            layers.append(
                _attn_layer(i, kinds[i] if kinds[i].mixer == "full" else _Kind("full"), m.kv_heads, m.head_dim)
            )
            params.append(LayerParams(attention=attn, norms=h))
        elif ch == "-":
            params.append(LayerParams(mlp=dense_mlp, norms=h))
        else:
            assert moe_params is not None
            params.append(moe_params)
    no_cache = sum(1 for ch in pattern if ch in "-E")
    if no_cache:
        m.notes.append(f"{no_cache} MLP/MoE-only layers hold no cache and have no entry in `layers`")
    return layers, params, 0


def _build_qwen3_next(m: _Model, kinds: list[_Kind]) -> _Built:
    """Qwen3-Next and Qwen3.5 (dense and MoE): gated delta-net linear layers + gated attention."""
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
    bias = c.flag("attention_bias", False)
    # gated attention: q_proj also produces an output gate of the same size
    q_out = m.heads * hd * (2 if c.flag("attn_output_gate", True) else 1)
    attn = (
        h * q_out
        + 2 * h * m.kv_heads * hd
        + m.heads * hd * h
        + 2 * hd  # q_norm, k_norm
        + ((q_out + 2 * m.kv_heads * hd + h) if bias else 0)
    )
    moe = any(c.has(k) for k in _EXPERT_KEYS)
    if moe:
        e = _experts_common(m)
        moe_inter = c.integer("moe_intermediate_size")
        shared_inter = c.integer("shared_expert_intermediate_size", 0, lo=0)
        step = c.integer("decoder_sparse_step", 1, hi=MAX_LAYERS)
        mlp_only = set(c.ints("mlp_only_layers", hi=m.num_layers) or [])
        shared = _gated_mlp(h, shared_inter) + h if shared_inter else 0  # shared expert + its gate
        moe_params = {"mlp": shared, "experts": e * 3 * h * moe_inter, "router": h * e}
    elif not m.intermediate:
        m.fail("missing required field `intermediate_size`")
    layers: list[LayerKVSpec] = []
    params: list[LayerParams] = []
    for i, kind in enumerate(kinds):
        if kind.mixer == "state":
            layers.append(
                LayerKVSpec(
                    index=i,
                    kind=KVKind.STATE,
                    conv_state_elements=conv_dim * kernel,
                    recurrent_state_elements=hv * dk * dv,
                    conv_kernel=kernel,
                    mixer=StateMixer.GATED_DELTA_NET,
                )
            )
            mixer = gdn
        elif kind.mixer in ("full", "sliding", "chunked"):
            layers.append(_attn_layer(i, kind, m.kv_heads, hd))
            mixer = attn
        else:
            m.fail(f"layer {i}: unsupported layer kind {kind.mixer!r} for {m.family}")
        if moe and i not in mlp_only and (i + 1) % step == 0:
            params.append(LayerParams(attention=mixer, norms=2 * h, **moe_params))
        else:
            params.append(LayerParams(attention=mixer, mlp=_gated_mlp(h, m.intermediate), norms=2 * h))
    extra = 0
    mtp = c.integer("mtp_num_hidden_layers", 0, lo=0, hi=MAX_LAYERS)
    if mtp:
        # MTP: full-attention decoder layer(s) + fc (2h -> h) + pre-fc norms for the embedding and
        # the hidden state + final norm; embeddings shared with the model unless dedicated
        ffn = sum(moe_params.values()) if moe else _gated_mlp(h, m.intermediate)
        extra = mtp * (attn + ffn + 2 * h) + 2 * h * h + 3 * h
        if c.flag("mtp_use_dedicated_embeddings", False):
            extra += m.vocab * h
        m.notes.append(f"extra_params: multi-token-prediction module ({mtp} layer(s))")
    return layers, params, extra


def _gemma4_layer_dims(m: _Model, kinds: list[_Kind]) -> list[tuple[int, int]]:
    """(head_dim, kv_heads) per layer: full-attention layers may use `global_head_dim` and
    `num_global_key_value_heads` (raw config.json), or `per_layer_config` (as transformers 5 writes it)."""
    c = m.cfg
    dims = [(m.head_dim, m.kv_heads)] * m.num_layers
    per_layer = c.mapping("per_layer_config")
    if per_layer is not None:
        for key, override in per_layer.items():
            try:
                i = int(key)
            except ValueError:
                m.fail(f"`per_layer_config` key {key!r} is not a layer index")
            if not 0 <= i < m.num_layers or not isinstance(override, Mapping):
                m.fail(f"`per_layer_config` entry {key!r} is not an object for an existing layer")
            f = _Fields(override, m.label, f"{c.prefix}per_layer_config.{key}.")
            dims[i] = (f.integer("head_dim", m.head_dim), f.integer("num_key_value_heads", m.kv_heads, hi=MAX_HEADS))
    else:
        global_dim = c.integer("global_head_dim", 512)
        global_kv = c.opt_int("num_global_key_value_heads", hi=MAX_HEADS)
        kv = global_kv if global_kv is not None and c.flag("attention_k_eq_v", False) else m.kv_heads
        dims = [(global_dim, kv) if k.mixer == "full" else dims[i] for i, k in enumerate(kinds)]
    for i, (_, kv) in enumerate(dims):
        if kv > m.heads or m.heads % kv:
            m.fail(f"layer {i}: {kv} KV heads do not divide num_attention_heads ({m.heads})")
    return dims


def _build_gemma4(m: _Model, kinds: list[_Kind]) -> _Built:
    """Gemma 4 text: per-layer head dims, K=V global layers, KV sharing, per-layer embeddings, MoE."""
    c = m.cfg
    h, heads = m.hidden, m.heads
    dims = _gemma4_layer_dims(m, kinds)
    shared = c.integer("num_kv_shared_layers", 0, lo=0, hi=MAX_LAYERS)
    first_shared = m.num_layers - shared
    k_eq_v = c.flag("attention_k_eq_v", False)
    bias = c.flag("attention_bias", False)
    double_wide = c.flag("use_double_wide_mlp", False)
    ple = c.integer("hidden_size_per_layer_input", 0, lo=0)
    moe = c.flag("enable_moe_block", False)
    if moe:
        e = _experts_common(m, "top_k_experts")
        moe_inter = c.integer("moe_intermediate_size")
    layers: list[LayerKVSpec] = []
    params: list[LayerParams] = []
    for i, kind in enumerate(kinds):
        if kind.mixer not in ("full", "sliding"):
            m.fail(f"layer {i}: {kind.mixer} layers are not supported for gemma4")
        hd, kv = dims[i]
        layers.append(_attn_layer(i, kind, kv, hd))
        attn = h * heads * hd + heads * hd * h + hd + ((heads * hd + h) if bias else 0)  # q, o, q_norm
        if i < first_shared:
            projections = 1 if (k_eq_v and kind.mixer == "full") else 2  # K=V: no v_proj
            attn += projections * (h * kv * hd + (kv * hd if bias else 0)) + hd  # + k_norm
        inter = m.intermediate * (2 if double_wide and i >= first_shared else 1)
        mlp = _gated_mlp(h, inter) + (2 * h * ple if ple else 0)  # + per-layer-input gate / projection
        norms = 4 * h + 1 + (h if ple else 0)  # + layer_scalar, post_per_layer_input_norm
        if moe:
            norms += 3 * h
            params.append(
                LayerParams(attention=attn, mlp=mlp, experts=e * 3 * h * moe_inter, router=h * e + h + e, norms=norms)
            )
        else:
            params.append(LayerParams(attention=attn, mlp=mlp, norms=norms))
    layers = _apply_kv_sharing(m, layers, kinds)
    extra = 0
    if ple:
        vocab_ple = c.integer("vocab_size_per_layer_input", m.vocab, hi=MAX_VOCAB)
        extra = vocab_ple * m.num_layers * ple + h * m.num_layers * ple + ple
        m.notes.append("extra_params: per-layer embeddings (embed_tokens_per_layer and its projection)")
    if k_eq_v:
        m.notes.append("attention_k_eq_v: K and V are still cached as two tensors (as transformers does)")
    return layers, params, extra


_BUILDERS: dict[str, Callable[[_Model, list[_Kind]], _Built]] = {
    "gemma4": _build_gemma4,
    "mixtral": _build_mixtral,
    "qwen2_moe": _build_qwen_moe,
    "qwen3_moe": _build_qwen_moe,
    "qwen3_next": _build_qwen3_next,
    "phi3": _build_phi3,
    "falcon": _build_falcon,
    "opt": _build_opt,
    "gpt_oss": _build_gpt_oss,
    "llama4": _build_llama4,
    "minimax_m2": _build_minimax_m2,
    "glm4_moe": _build_glm4_moe,
    "deepseek_v2": _build_mla,
    "deepseek_v3": _build_mla,
    "kimi_k2": _build_mla,
    "glm4_moe_lite": _build_mla,
    "mla_generic": _build_mla,
    "jamba": _build_jamba,
    "nemotron_h": _build_nemotron_h,
}


# ----------------------------------------------------------------------------- vision


def _vision_params(m: _Model) -> int:
    """Vision tower + projector, where the structure is known (Llama 4, Gemma 3 SigLIP, Pixtral)."""
    vision = m.outer.sub("vision_config")
    if vision is None or m.cfg is m.outer:
        return 0
    vision_type = vision.text("model_type")
    if m.family == "llama4":
        count = _llama4_vision(m, vision)
    elif m.family == "gemma3" and vision_type in (None, "siglip_vision_model"):
        count = _siglip_vision(vision) + _gemma3_projector(m, vision)
    elif m.family == "mistral3" and vision_type in (None, "pixtral"):
        count = _pixtral_vision(vision) + _mistral3_projector(m, vision)
    elif m.family in ("qwen3_5", "qwen3_5_moe") and vision_type in (None, "qwen3_5", "qwen3_5_moe"):
        count = _qwen3_5_vision(vision)
    else:
        m.notes.append("vision tower not counted: its parameters are not in the totals")
        return 0
    m.notes.append("extra_params: vision tower and multimodal projector")
    return count


def _llama4_vision(m: _Model, v: _Fields) -> int:
    h = v.integer("hidden_size")
    layers = v.integer("num_hidden_layers", hi=MAX_LAYERS)
    inter = v.integer("intermediate_size")
    patch = v.integer("patch_size")
    image = v.integer("image_size", hi=1 << 20)
    channels = v.integer("num_channels", 3)
    proj_in = v.integer("projector_input_dim")
    proj_out = v.integer("projector_output_dim")
    out_dim = v.integer("vision_output_dim")
    per_layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 4 * h  # q/k/v/o, fc1, fc2, 2 LN
    patches = (image // patch) ** 2 + 1
    embeddings = h + patches * h + channels * patch * patch * h  # class, positional, patch (no bias)
    outer_norms = 4 * h  # layernorm_pre / layernorm_post, weight + bias
    adapter = inter * proj_in + proj_out * proj_out  # vision_adapter.mlp fc1 / fc2, no bias
    bias = v.flag("multi_modal_projector_bias", False)
    projector = out_dim * m.hidden + (m.hidden if bias else 0)
    return embeddings + outer_norms + layers * per_layer + adapter + projector


def _siglip_vision(v: _Fields) -> int:
    h = v.integer("hidden_size", 768)
    layers = v.integer("num_hidden_layers", 12, hi=MAX_LAYERS)
    inter = v.integer("intermediate_size", 3072)
    patch = v.integer("patch_size", 16)
    image = v.integer("image_size", 224, hi=1 << 20)
    channels = v.integer("num_channels", 3)
    per_layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 4 * h
    embeddings = channels * patch * patch * h + h + (image // patch) ** 2 * h  # conv + bias, positions
    head = 0
    if v.flag("vision_use_head", True):
        # probe, nn.MultiheadAttention (in/out projections with bias), layernorm, MLP
        head = h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h)
    return embeddings + layers * per_layer + 2 * h + head  # + post_layernorm


def _gemma3_projector(m: _Model, v: _Fields) -> int:
    vh = v.integer("hidden_size", 768)
    return vh * m.hidden + vh  # mm_input_projection_weight, mm_soft_emb_norm


def _pixtral_vision(v: _Fields) -> int:
    h = v.integer("hidden_size", 1024)
    layers = v.integer("num_hidden_layers", 24, hi=MAX_LAYERS)
    inter = v.integer("intermediate_size", 4096)
    heads = v.integer("num_attention_heads", 16, hi=MAX_HEADS)
    head_dim = v.integer("head_dim", h // heads)
    patch = v.integer("patch_size", 16)
    channels = v.integer("num_channels", 3)
    per_layer = 4 * h * heads * head_dim + 3 * h * inter + 2 * h  # q/k/v/o, gated FFN, 2 RMSNorms
    return channels * patch * patch * h + h + layers * per_layer  # patch_conv, ln_pre


def _qwen3_5_vision(v: _Fields) -> int:
    h = v.integer("hidden_size", 1152)
    depth = v.integer("depth", 27, hi=MAX_LAYERS)
    inter = v.integer("intermediate_size", 4304)
    patch = v.integer("patch_size", 16)
    temporal = v.integer("temporal_patch_size", 2)
    channels = v.integer("in_channels", 3)
    positions = v.integer("num_position_embeddings", 2304, hi=MAX_POSITIONS)
    merge = v.integer("spatial_merge_size", 2, hi=64)
    out = v.integer("out_hidden_size")
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * inter + inter) + (inter * h + h)  # 2 LN, qkv, proj, MLP
    merged = h * merge * merge
    merger = 2 * h + (merged * merged + merged) + (merged * out + out)  # LayerNorm, fc1, fc2
    return channels * temporal * patch * patch * h + h + positions * h + depth * block + merger


def _mistral3_projector(m: _Model, v: _Fields) -> int:
    vh = v.integer("hidden_size", 1024)
    merge = m.outer.integer("spatial_merge_size", 2, hi=64)
    bias = m.outer.flag("multimodal_projector_bias", False)
    merger = vh * merge * merge * vh  # patch_merger.merging_layer, no bias
    linear_1 = vh * m.hidden + (m.hidden if bias else 0)
    linear_2 = m.hidden * m.hidden + (m.hidden if bias else 0)
    return vh + merger + linear_1 + linear_2  # + norm


# ------------------------------------------------------------------------- context, dtype


def _rope_entries(m: _Model) -> list[tuple[str, Mapping[str, Any]]]:
    """(rope_type, params) for every rope scaling entry (transformers 5 may nest them per layer type)."""
    raw = m.cfg.raw("rope_parameters")
    if raw is None:
        raw = m.cfg.raw("rope_scaling")
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        m.fail(f"rope scaling must be an object, got {_clip(raw)}")
    nested = bool(raw) and all(isinstance(v, Mapping) for v in raw.values())
    entries: list[Mapping[str, Any]] = list(raw.values()) if nested else [raw]
    out = []
    for entry in entries:
        rope_type = entry.get("rope_type", entry.get("type", "default"))
        if not isinstance(rope_type, str):
            m.fail(f"rope type must be a string, got {_clip(rope_type)}")
        out.append((rope_type, entry))
    return out


def _context_limit(m: _Model) -> tuple[int, int]:
    c = m.cfg
    # every length key present must be a length: `seq_length: 1e30` is a broken config, and
    # skipping it would silently plan the model at vLLM's 2,048-token default
    lengths = [c.integer(key, hi=MAX_POSITIONS) for key in _LENGTH_KEYS if c.has(key)]
    if lengths:
        derived: float = min(lengths)
        if c.has("max_position_embeddings") and derived < lengths[0]:
            m.notes.append(f"context limit capped at {int(derived)} tokens by a second length key")
    else:
        derived = DEFAULT_MAX_LEN
        m.notes.append(f"no max length key in the config: assuming {DEFAULT_MAX_LEN} tokens (vLLM default)")
    max_pos = c.integer("max_position_embeddings", int(derived), hi=MAX_POSITIONS)
    entries = _rope_entries(m)
    before_rope = derived
    if entries and "gemma3" not in m.model_type:  # vLLM: Gemma 3's 128K already includes scaling
        factor = 1.0
        for rope_type, entry in entries:
            if rope_type in ("su", "longrope", "llama3"):
                continue
            value = entry.get("factor", factor)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_ROPE_FACTOR:
                    m.fail(f"rope scaling `factor` must be a number in (0, {MAX_ROPE_FACTOR:,}], got {_clip(value)}")
                factor = float(value)
            if rope_type == "yarn":
                orig = entry.get("original_max_position_embeddings")
                if orig is None:
                    orig = c.raw("original_max_position_embeddings") or max_pos
                if isinstance(orig, bool) or not isinstance(orig, int) or not 1 <= orig <= MAX_POSITIONS:
                    m.fail(f"yarn `original_max_position_embeddings` must be a positive integer, got {_clip(orig)}")
                derived = orig
        derived *= factor
    context = int(derived)
    if context < 1 or context > MAX_POSITIONS:
        m.fail(f"derived context length {context} is out of range")
    if derived != before_rope:
        m.notes.append(f"context limit {context} tokens from rope scaling (max_position_embeddings {max_pos})")
    return max_pos, context


def _dtype(m: _Model) -> str:
    for source in (m.cfg, m.outer):
        for key in ("torch_dtype", "dtype"):
            value = source.raw(key)
            if value is None:
                continue
            if not isinstance(value, str) or value not in _DTYPES:
                source.fail(f"{source.key(key)} {_clip(value)} is not one of bfloat16, float16, float32")
            return _DTYPES[value]
    m.notes.append("no torch_dtype in the config: assuming bfloat16")
    return "bfloat16"


# ------------------------------------------------------------------------- checkpoint size

# Bytes per parameter a checkpoint can plausibly store. Unquantized: 16-bit (a float32 config may
# ship bf16 weights) up to 32-bit (a bf16 config may ship float32 weights). Quantized: the
# quantized format's width for every parameter, up to 16-bit for all (embeddings, lm_head and
# ignored layers stay 16-bit). SLACK covers what the parser does not count (an unparsed vision
# tower, extra heads) and scales: a `total_size` outside the band is not this model's checkpoint.
_FORMAT_BYTES = {"fp8": 1.0, "int8": 1.0, "int4": 0.5, "nvfp4": 0.5, "mxfp4": 0.5}
CHECKPOINT_SLACK = 1.5


def checkpoint_size_band(spec: ModelSpec) -> tuple[int, int]:
    """(low, high) bytes a checkpoint of `spec` can plausibly hold (see _FORMAT_BYTES)."""
    params = spec.total_params
    if spec.quantization is not None:
        low_bytes = _FORMAT_BYTES.get(spec.quantization.weight_format, 0.5)
        high_bytes = 2.0
    else:
        low_bytes, high_bytes = 2.0, 4.0
    return int(params * low_bytes / CHECKPOINT_SLACK), int(params * high_bytes * CHECKPOINT_SLACK)


def checkpoint_size_problem(spec: ModelSpec, checkpoint_bytes: int) -> str | None:
    """Why a checkpoint's recorded size (`metadata.total_size`) cannot belong to `spec`, or None.

    A safetensors index with `total_size: 1` (or a wrong index next to the config) would replace
    the counted weights in every plan; the reason names both numbers."""
    if isinstance(checkpoint_bytes, bool) or not isinstance(checkpoint_bytes, int) or checkpoint_bytes <= 0:
        return f"checkpoint size {checkpoint_bytes!r} is not a positive number of bytes"
    low, high = checkpoint_size_band(spec)
    if low <= checkpoint_bytes <= high:
        return None
    fmt = spec.quantization.weight_format if spec.quantization is not None else spec.torch_dtype
    return (
        f"checkpoint total_size {checkpoint_bytes:,} bytes does not fit the {spec.total_params:,} parameters "
        f"counted from the config as {fmt} (expected {low:,} to {high:,} bytes)"
    )


# ---------------------------------------------------------------------------- quantization


def _quantization(m: _Model) -> CheckpointQuant | None:
    q = m.outer.sub("quantization_config") or m.cfg.sub("quantization_config")
    if q is None:
        return None
    method = (q.text("quant_method") or "").lower().replace("_", "-")
    if method == "fp8" or method == "fbgemm-fp8":
        return CheckpointQuant(method="fp8", weight_format="fp8")
    if method in ("awq", "gptq"):
        bits = q.integer("bits", q.integer("w_bit", 4, hi=64), hi=64)
        group = q.integer("group_size", q.integer("q_group_size", 128, lo=-1, hi=MAX_DIM), lo=-1, hi=MAX_DIM)
        fmt = {4: "int4", 8: "int8"}.get(bits)
        if fmt is None:
            q.fail(f"unsupported {method} bit width {bits}")
        return CheckpointQuant(method=method, weight_format=fmt, group_size=group if group > 0 else None)
    if method == "mxfp4":
        return CheckpointQuant(method="mxfp4", weight_format="mxfp4", group_size=32, experts_only=True)
    if method == "compressed-tensors":
        return _compressed_tensors(m, q)
    if method == "modelopt":  # NVIDIA ModelOpt: `quant_algo` names the scheme
        algo = (q.text("quant_algo") or "").upper()
        if algo.startswith("FP8"):
            return CheckpointQuant(method="modelopt", weight_format="fp8")
        if algo in ("W4A16_AWQ", "INT4_AWQ", "W4A8_AWQ"):
            return CheckpointQuant(method="modelopt", weight_format="int4", group_size=128)
        if algo.startswith("NVFP4"):
            return CheckpointQuant(method="modelopt", weight_format="nvfp4", group_size=16,
                                   attention_quantized=not _attention_ignored(m, q))
        m.notes.append(f"modelopt {algo or '(no quant_algo)'} weights: not modelled, sized as torch_dtype")
        return None
    if method == "bitsandbytes":
        if q.flag("load_in_4bit", False):
            return CheckpointQuant(method="bitsandbytes", weight_format="int4", group_size=64)
        if q.flag("load_in_8bit", False):
            return CheckpointQuant(method="bitsandbytes", weight_format="int8")
        q.fail("bitsandbytes config sets neither load_in_4bit nor load_in_8bit")
    m.notes.append(f"quantization method {method or '(none)'!r} not recognized: weights sized as torch_dtype")
    return None


def _compressed_tensors(m: _Model, q: _Fields) -> CheckpointQuant | None:
    groups = q.mapping("config_groups")
    if not groups:
        q.fail("compressed-tensors config has no `config_groups`")
    formats: set[tuple[str, int | None]] = set()
    for gname, group in groups.items():
        if not isinstance(group, Mapping):
            q.fail(f"`config_groups.{gname}` must be an object")
        g = _Fields(group, q.label, f"{q.prefix}config_groups.{gname}.")
        w = g.sub("weights")
        if w is None:
            continue
        bits = w.integer("num_bits", hi=64)
        kind = (w.text("type", "int") or "int").lower()
        gsize = w.opt_int("group_size", lo=-1)
        if kind == "float" and bits == 8:
            formats.add(("fp8", None))
        elif kind == "int" and bits == 8:
            formats.add(("int8", None))
        elif kind == "int" and bits == 4:
            formats.add(("int4", gsize if gsize and gsize > 0 else None))
        elif kind == "float" and bits == 4:
            formats.add(("nvfp4", gsize if gsize and gsize > 0 else 16))
        else:
            w.fail(f"unsupported compressed-tensors weight format {bits}-bit {kind}")
    if not formats:
        q.fail("compressed-tensors config has no weight quantization")
    if len(formats) > 1:
        m.notes.append("compressed-tensors: several weight formats; the widest is used")
    order = {"fp8": 0, "int8": 0, "int4": 1, "nvfp4": 1}
    fmt, gsize = sorted(formats, key=lambda f: order[f[0]])[0]
    return CheckpointQuant(method="compressed-tensors", weight_format=fmt, group_size=gsize,
                           attention_quantized=not _attention_ignored(m, q))


def _attention_ignored(m: _Model, q: _Fields) -> bool:
    """True when the quantizer's ignore list keeps the attention projections of every layer 16-bit
    (NVFP4 exports commonly leave `self_attn` unquantized)."""
    ignore = q.data.get("ignore") or q.data.get("exclude_modules") or q.data.get("modules_to_not_convert") or []
    if not isinstance(ignore, list):
        return False
    entries = [str(e) for e in ignore]
    if any("self_attn" in e and ("*" in e.split("layers")[0] or "re:" in e or ".*" in e) for e in entries):
        return True
    return m.num_layers > 0 and sum("self_attn" in e for e in entries) >= m.num_layers


__all__ = ["ConfigError", "checkpoint_size_band", "checkpoint_size_problem", "parse_config"]
