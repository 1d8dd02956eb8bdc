"""A serving command's config overrides (vLLM `--hf-overrides`, SGLang `--json-model-override-args`) applied to
config.json the way each engine applies them before it reads the model, so that the length limit, the layers and
the dimensions capplan sizes are the ones the engine runs with (a YaRN override that lengthens the context is the
common case: without it the length check would refuse what the engine serves).

Pure: dicts in, a new dict out; the result goes through the same parse and checks as any config.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# transformers 5 keeps one rope field: `rope_scaling` is an alias of `rope_parameters` (setting one sets the other)
_ROPE_KEYS = ("rope_parameters", "rope_scaling")
# keys that transformers loads as a config object of their own (a nested PretrainedConfig), beside any dict that
# names a `model_type`
_SUB_CONFIG_KEYS = frozenset(
    {"text_config", "vision_config", "audio_config", "llm_config", "language_config", "thinker_config", "talker_config"}
)
MAX_OVERRIDE_DEPTH = 16  # levels of nesting an override may have (a config nests three or four)


class OverrideError(ValueError):
    """The overrides cannot be applied (one line)."""


class OverrideRule(StrEnum):
    """How an engine applies a dict of config overrides."""

    # vllm/config/model.py ModelConfig.__post_init__: flat values go to `config.update()` at the top level; a dict
    # value onto a nested config updates it recursively (`_update_nested`: dicts inside merge key by key), any
    # other key is set whole (`_apply_dict_overrides`)
    VLLM = "vllm"
    # sglang/srt/utils/hf_transformers/config.py get_config: a dict onto a nested config updates it one level
    # deep; a rope dict is merged over the current one (rope_theta kept); any other key is set whole
    SGLANG = "sglang"

    def applied(self, config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
        """`config` with `overrides` applied as the engine applies them (neither argument is changed)."""
        _check_depth(overrides, 1)
        out = copy.deepcopy(dict(config))
        for key, value in overrides.items():
            current = _rope_current(out, key) if key in _ROPE_KEYS else out.get(key)
            if isinstance(value, Mapping) and _is_sub_config(key, current):
                assert isinstance(current, dict)
                if self is OverrideRule.VLLM:
                    _merge_nested(current, value)
                else:
                    current.update(copy.deepcopy(dict(value)))
            elif key in _ROPE_KEYS:
                merged = self is OverrideRule.SGLANG and isinstance(value, Mapping) and isinstance(current, Mapping)
                _set_rope(out, {**current, **value} if merged else copy.deepcopy(value))  # type: ignore[dict-item]
            else:
                out[key] = copy.deepcopy(value)
        return out


def _is_sub_config(key: str, current: object) -> bool:
    return isinstance(current, dict) and (key in _SUB_CONFIG_KEYS or "model_type" in current)


def _rope_current(config: Mapping[str, Any], key: str) -> Any:
    """The rope field under either of its names (the one the config uses)."""
    for name in (key, *_ROPE_KEYS):
        if config.get(name) is not None:
            return config[name]
    return None


def _set_rope(config: dict[str, Any], value: Any) -> None:
    """Set the one rope field: under `rope_parameters`, the name capplan's parser reads first, the alias dropped."""
    config.pop("rope_scaling", None)
    config["rope_parameters"] = value


def _merge_nested(target: dict[str, Any], updates: Mapping[str, Any]) -> None:
    """vLLM's `_update_nested`: a dict onto a dict merges key by key, anything else is set (a rope dict under its
    alias merges into the field the config has)."""
    for key, value in updates.items():
        name = key
        if key in _ROPE_KEYS and key not in target:
            name = next((k for k in _ROPE_KEYS if k in target), key)
        nested = target.get(name)
        if isinstance(value, Mapping) and isinstance(nested, dict):
            _merge_nested(nested, value)
        else:
            target[name] = copy.deepcopy(value)


def _check_depth(value: object, depth: int) -> None:
    if depth > MAX_OVERRIDE_DEPTH:
        raise OverrideError(f"config overrides nest more than {MAX_OVERRIDE_DEPTH} levels deep")
    if isinstance(value, Mapping):
        for item in value.values():
            _check_depth(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_depth(item, depth + 1)


@dataclass(frozen=True, slots=True)
class ConfigOverrides:
    """Overrides as a command gives them: the engine's rule, the values, and the flag that gave them (for notes)."""

    rule: OverrideRule
    values: Mapping[str, Any]
    flag: str = "--hf-overrides"

    def applied(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return self.rule.applied(config, self.values)

    @property
    def note(self) -> str:
        return f"config.json overridden by {self.flag}: {', '.join(sorted(self.values))}"


def read_overrides(text: str, flag: str = "--hf-overrides") -> dict[str, Any]:
    """The JSON object a flag holds; an OverrideError naming the flag (never the value) where it is not one."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise OverrideError(f"{flag} nests too deeply") from None
    except ValueError as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise OverrideError(f"{flag} is not valid JSON: {reason}") from None
    if not isinstance(value, dict):
        raise OverrideError(f"{flag} must be a JSON object of config keys, got {type(value).__name__}")
    _check_depth(value, 1)
    return value


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")
