"""Context limit (vLLM's `_get_and_verify_max_len`), rope scaling entries and dtypes."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any

from capacity.hf_config.fields import (
    DEFAULT_MAX_LEN,
    MAX_POSITIONS,
    MAX_ROPE_FACTOR,
    ConfigError,
    clip,
    read_int,
    read_number,
)

if TYPE_CHECKING:
    from capacity.hf_config.family import Model

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

DTYPES = {
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


class RopeScaling(Enum):
    """How a rope scaling entry changes the context limit (vLLM's `_get_and_verify_max_len`).

    vLLM 0.30 aligned YaRN with transformers (vllm-project/vllm#56446, in the 0.30.0 wheel, not in 0.29.0): a
    YaRN entry of any spelling leaves the length keys as they are. Up to 0.29 `yarn` made the limit
    `original_max_position_embeddings` times `factor`, and the other YaRN spellings scaled the length by `factor`."""

    BY_FACTOR = "by_factor"  # linear, dynamic, default...: the length times `factor`
    YARN = "yarn"  # 0.30+: unscaled; up to 0.29: `original_max_position_embeddings` times `factor`
    YARN_VARIANT = "yarn_variant"  # deepseek_yarn, deepseek_llama_scaling: 0.30+ unscaled; up to 0.29 by factor
    LONGROPE = "longrope"  # su / longrope: the limit already holds the long context
    LLAMA3 = "llama3"  # the limit already holds the long context


_ROPE_SCALING = {
    "yarn": RopeScaling.YARN,
    "deepseek_yarn": RopeScaling.YARN_VARIANT,
    "deepseek_llama_scaling": RopeScaling.YARN_VARIANT,
    "su": RopeScaling.LONGROPE,
    "longrope": RopeScaling.LONGROPE,
    "llama3": RopeScaling.LLAMA3,
}
_UNSCALED = (RopeScaling.LONGROPE, RopeScaling.LLAMA3)
_YARN = (RopeScaling.YARN, RopeScaling.YARN_VARIANT)


def rope_entries(m: Model) -> list[tuple[RopeScaling, Mapping[str, Any]]]:
    """(scaling, params) for every rope scaling entry (transformers 5 may nest them per layer type)."""
    raw = m.cfg.raw("rope_parameters")
    if raw is None:
        raw = m.cfg.raw("rope_scaling")
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        m.fail(f"rope scaling must be an object, got {clip(raw)}")
    nested = bool(raw) and all(isinstance(v, Mapping) for v in raw.values())
    entries: list[Mapping[str, Any]] = list(raw.values()) if nested else [raw]
    out = []
    for entry in entries:
        rope_type = entry.get("rope_type", entry.get("type", "default"))
        if not isinstance(rope_type, str):
            m.fail(f"rope type must be a string, got {clip(rope_type)}")
        out.append((_ROPE_SCALING.get(rope_type, RopeScaling.BY_FACTOR), entry))
    return out


def context_limit(m: Model) -> tuple[int, int, int | None]:
    """(max_position_embeddings, the context limit vLLM 0.30+ derives, the one vLLM up to 0.29 derived where
    it differs: a YaRN entry whose scaled length is not the config's length keys; else None)."""
    c = m.cfg
    # every length key present must be a length: `seq_length: 1e30` is a broken config, and
    # skipping it would silently plan the model at vLLM's 2,048-token default
    # `max_position_embeddings` is a typed field of every transformers config class (16.0 refused);
    # the other keys are read by vLLM with getattr, taken by min() and returned as int(): 4096.0 runs
    lengths = [
        c.integer(key, hi=MAX_POSITIONS, integral_float=key != "max_position_embeddings")
        for key in _LENGTH_KEYS
        if c.has(key)
    ]
    if lengths:
        derived: float = min(lengths)
        if c.has("max_position_embeddings") and derived < lengths[0]:
            m.notes.append(f"context limit capped at {int(derived)} tokens by a second length key")
    else:
        derived = DEFAULT_MAX_LEN
        m.notes.append(f"no max length key in the config: assuming {DEFAULT_MAX_LEN} tokens (vLLM default)")
    max_pos = c.integer("max_position_embeddings", int(derived), hi=MAX_POSITIONS)
    entries = rope_entries(m) if m.rope_scales_context else []
    context = _checked(m, derived * _factor(m, entries, legacy=False))
    legacy_base = derived
    for scaling, entry in entries:
        if scaling is RopeScaling.YARN:  # up to 0.29 the base became the original length (the last entry's)
            orig = entry.get("original_max_position_embeddings")
            if orig is None:
                orig = c.raw("original_max_position_embeddings") or max_pos
            legacy_base = _read(m, read_int, orig, "yarn `original_max_position_embeddings`", hi=MAX_POSITIONS)
    legacy = _checked(m, legacy_base * _factor(m, entries, legacy=True))
    if context != int(derived):
        m.notes.append(f"context limit {context} tokens from rope scaling (max_position_embeddings {max_pos})")
    if legacy != context:
        m.notes.append(
            f"context limit {legacy} tokens under vLLM up to 0.29 (YaRN: original_max_position_embeddings x factor)"
        )
    return max_pos, context, legacy if legacy != context else None


def _factor(m: Model, entries: list[tuple[RopeScaling, Mapping[str, Any]]], legacy: bool) -> float:
    """The scaling factor vLLM multiplies the length by: the last scaled entry's `factor` (vLLM assumes one
    factor for every layer type); YaRN entries only up to 0.29 (`legacy`)."""
    factor = 1.0
    for scaling, entry in entries:
        if scaling in _UNSCALED or (scaling in _YARN and not legacy):
            continue
        value = entry.get("factor", factor)
        if value is not None:
            factor = _read(m, read_number, value, "rope scaling `factor`", lo=0, hi=MAX_ROPE_FACTOR, open_lo=True)
    return factor


def _checked(m: Model, derived: float) -> int:
    context = int(derived)
    if context < 1 or context > MAX_POSITIONS:
        m.fail(f"derived context length {context} is out of range")
    return context


def _read(m: Model, reader: Any, value: Any, shown: str, **bounds: Any) -> Any:
    """`reader(value, shown, **bounds)` with the config's label on its ConfigError."""
    try:
        return reader(value, shown, **bounds)
    except ConfigError as exc:
        m.fail(str(exc))


def dtype(m: Model) -> str:
    for source in (m.cfg, m.outer):
        for key in ("torch_dtype", "dtype"):
            value = source.raw(key)
            if value is None:
                continue
            if not isinstance(value, str) or value not in DTYPES:
                source.fail(f"{source.key(key)} {clip(value)} is not one of bfloat16, float16, float32")
            return DTYPES[value]
    m.notes.append("no torch_dtype in the config: assuming bfloat16")
    return "bfloat16"


def ssm_state_dtype(m: Model) -> str | None:
    """The recurrent state's dtype where the config states it (Qwen3.5 spells it mamba_ssm_dtype)."""
    stated = None
    for key in ("mamba_ssm_cache_dtype", "mamba_ssm_dtype"):
        stated = stated or m.cfg.text(key) or m.outer.text(key)
    if stated is None:
        return None
    normalized = DTYPES.get(stated)
    if normalized is None:
        m.fail(f"unsupported mamba SSM state dtype {stated!r}")
    return normalized
