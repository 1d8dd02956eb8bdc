"""The entry point: config.json (a plain dict) -> ModelSpec, through the family chosen from it."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from typing import Any

from capacity.hf_config import vision as vision_module
from capacity.hf_config.context import context_limit, dtype, ssm_state_dtype
from capacity.hf_config.family import Built, Model, check_routing
from capacity.hf_config.fields import ConfigError, Fields, check_shape
from capacity.hf_config.quantization import quantization
from capacity.hf_config.registry import select
from capacity.spec import ModelSpec, VisionTower

# What malformed input can provoke inside the parser; each becomes a one-line ConfigError.
# RecursionError: nothing here recurses over the config (`check_shape` bounds its depth first); kept
# so that a bug never shows as a traceback.
_MALFORMED = (
    KeyError,
    TypeError,
    ValueError,
    ZeroDivisionError,
    IndexError,
    AttributeError,
    OverflowError,
    RecursionError,
)


def parse_config(config: Mapping[str, Any], *, name: str | None = None) -> ModelSpec:
    """Normalize a Hugging Face config.json dict into a ModelSpec (raises ConfigError)."""
    label = name or "config"
    if not isinstance(config, Mapping):
        raise ConfigError(f"{label}: config must be a JSON object, got {type(config).__name__}")
    if name is None:
        guess = config.get("_name_or_path") or config.get("model_type")
        label = guess if isinstance(guess, str) and guess else "config"
    try:
        check_shape(config, label)
        return _parse(config, label)
    except ConfigError:
        raise
    except _MALFORMED as exc:
        detail = str(exc).replace("\n", " ")[:120]
        raise ConfigError(f"{label}: malformed config ({type(exc).__name__}: {detail})") from exc


def _parse(config: Mapping[str, Any], label: str) -> ModelSpec:
    m = _model(config, label)
    m.rules.read_dims(m)
    kinds = m.rules.layer_kinds(m)
    built = m.rules.build(m, kinds)
    check_routing(m, built[1])
    return _spec(m, built)


def _model(config: Mapping[str, Any], label: str) -> Model:
    """Choose the family and the fields to read: multimodal wrappers keep the language model under
    `text_config`; wrapper-level keys are read from the outer dict."""
    outer = Fields(config, label)
    outer_type = outer.text("model_type")
    text_sub = outer.sub("text_config")
    cfg = text_sub if text_sub is not None and (text_sub.has("hidden_size") or text_sub.has("n_embd")) else outer
    inner_type = cfg.text("model_type") if cfg is not outer else None
    chosen = select(outer_type, inner_type, cfg.has("kv_lora_rank"))
    defaults = chosen.rules.text_defaults
    filled = sorted(k for k in defaults if k not in cfg.data)
    if defaults:
        cfg = Fields(ChainMap(dict(cfg.data), dict(defaults)), cfg.label, cfg.prefix)
    m = Model(
        label=label,
        outer=outer,
        cfg=cfg,
        model_type=chosen.model_type,
        family=chosen.family,
        rules=chosen.rules,
        architecture=_architecture(outer),
        rope_scales_context=chosen.rope_scales_context,
    )
    if filled:
        values = ", ".join(f"{k}={defaults[k]}" for k in filled)
        m.notes.append(f"absent fields taken from transformers' {chosen.rules.name} defaults: {values}")
    if chosen.family.generic:
        m.notes.append(
            f"model_type {outer_type or inner_type or '(none)'!r} is not a known family: parsed by the "
            "generic (Llama-like) rules"
        )
    return m


def _architecture(outer: Fields) -> str:
    architectures = outer.raw("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    return ""


def _vision(m: Model) -> tuple[int, VisionTower | None]:
    """Vision tower + projector parameters where the family knows its structure (otherwise a note says
    they are not counted), and the tower's geometry where the family knows how engines profile it."""
    vision = m.outer.sub("vision_config")
    if vision is None or (m.cfg is m.outer and not m.family.vision_model_types):
        return 0, None
    vision_type = vision.text("model_type")
    count = m.family.vision_params(m, vision, vision_type)
    if count is None:
        m.notes.append("vision tower not counted: its parameters are not in the totals")
        return 0, None
    m.notes.append("extra_params: vision tower and multimodal projector")
    return count, m.family.vision_tower(m, vision)


def _spec(m: Model, built: Built) -> ModelSpec:
    layers, params, extra = built
    cfg, outer, rules = m.cfg, m.outer, m.rules
    if cfg.has("tie_word_embeddings"):
        tie = cfg.flag("tie_word_embeddings", rules.tied_by_default)
    else:
        tie = outer.flag("tie_word_embeddings", rules.tied_by_default)
    final_norm = rules.final_norm_params(m)
    vision, tower = _vision(m)
    # what the engine loads besides the decoder: the vision tower, and what the family says it
    # loads (Gemma 4's per-layer embeddings, OPT's positions); multi-token-prediction modules
    # stay on disk unless speculative decoding asks
    loaded_extra = vision + (extra if rules.loads_extra_params else 0)
    max_pos, context, context_up_to_029 = context_limit(m)
    torch_dtype = dtype(m)
    quant = quantization(m, layers, params)
    ssm_dtype = ssm_state_dtype(m)
    return ModelSpec(
        model_type=m.model_type,
        architecture=m.architecture,
        family=m.family.name,
        hidden_size=m.hidden,
        num_layers=m.num_layers,
        num_attention_heads=m.heads,
        num_kv_heads=m.kv_heads,
        head_dim=m.head_dim,
        vocab_size=m.vocab,
        intermediate_size=m.intermediate,
        max_position_embeddings=max_pos,
        context_limit_tokens=context,
        context_limit_vllm_029_tokens=context_up_to_029,
        torch_dtype=torch_dtype,
        tie_word_embeddings=tie,
        layers=tuple(layers),
        layer_params=tuple(params),
        embedding_params=m.vocab * m.hidden,
        # an EAGLE-3 head predicts over its own reduced vocabulary (`draft_vocab_size`, vLLM llama_eagle3.py)
        lm_head_params=0 if tie else cfg.integer("draft_vocab_size", m.vocab, lo=1) * m.hidden,
        final_norm_params=final_norm,
        extra_params=extra + vision,
        loaded_extra_params=loaded_extra,
        num_experts=m.num_experts,
        num_experts_per_token=m.experts_per_token,
        quantization=quant,
        mamba_ssm_cache_dtype=ssm_dtype or "float32",
        mamba_ssm_dtype_stated=ssm_dtype is not None,
        is_generic=m.family.generic,
        vision_tower=vision_module.tower_shape(m),
        notes=tuple(m.notes),
        vision=tower,
        multimodal=outer.sub("vision_config") is not None,
        mtp_layers=m.mtp_layers,
        mtp_params=m.mtp_params,
    )
