"""Raw config bytes -> a checked ModelSpec, stage by stage, every failure one line.

Stages (recorded in `ingest_errors.stage`):
  json      bytes -> a JSON object (UTF-8, valid JSON, an object at the top)
  config    generic sanity of the standard fields, then `capacity.hf_config.parse_config`
  validate  the normalized spec fits the registry (sizes positive, plausible, within column ranges)

The generic checks only look at fields whose meaning is the same in every family (a negative
layer count or a string where a head count belongs is never valid); everything family-specific
is the parser's job.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from capacity.hf_config import ConfigError, checkpoint_size_problem, parse_config
from capacity.hf_config.fields import MAX_CONFIG_VALUES, MAX_JSON_DEPTH, ShapeError, check_shape, read_int
from capacity.hf_config.overrides import ConfigOverrides, OverrideError
from capacity.spec import ModelSpec
from models_registry.sources.common import ConfigSnapshot, StageError, json_value_error, one_line

INT32_MAX = 2**31 - 1

# (minimum, maximum) of a size, and the config names it goes by; minimum 1 for sizes that can never be zero.
_SIZE_BOUNDS: tuple[tuple[tuple[int, int], tuple[str, ...]], ...] = (
    ((1, 2**17), ("hidden_size", "n_embd", "d_model")),
    ((1, 4096), ("num_hidden_layers", "n_layer", "num_layers")),
    ((1, 4096), ("num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads", "head_dim")),
    ((1, 2**23), ("vocab_size",)),
    ((1, 2**30), ("max_position_embeddings", "n_positions")),
    ((0, 2**20), ("intermediate_size", "moe_intermediate_size")),
    ((0, 65536), ("num_local_experts", "n_routed_experts", "num_experts", "num_experts_per_tok", "n_shared_experts")),
    ((0, 2**16), ("kv_lora_rank", "q_lora_rank")),
    ((0, 4096), ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")),
    ((0, 2**30), ("sliding_window", "attention_chunk_size")),
)
# field -> (minimum, maximum), in the order above (the first out of bounds is the one reported)
_SIZE_FIELDS: dict[str, tuple[int, int]] = {field: bounds for bounds, fields in _SIZE_BOUNDS for field in fields}
_STR_FIELDS = ("model_type", "torch_dtype", "dtype")
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # a JSON string literal, escapes included
_NESTED = ("text_config", "llm_config", "language_config")


def decode_config(raw: bytes, *, name: str) -> dict[str, Any]:
    """Bytes -> the config dict (StageError 'json')."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise StageError("json", f"{name}: config.json is not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise StageError("json", f"{name}: config.json is empty")
    separators = raw.count(b",")  # outside strings, each separates two values or more
    if separators >= MAX_CONFIG_VALUES:  # then count only those outside strings (0.25 s for 8 MB)
        separators = _STRINGS.sub(b'""', raw).count(b",")
    if separators >= MAX_CONFIG_VALUES:  # refused before spending a second parsing it
        raise StageError(
            "json",
            f"{name}: config.json holds more than {MAX_CONFIG_VALUES:,} keys and values ({separators:,} separators); "
            "published configs hold a few thousand: not a model config",
        )
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise StageError(
            "json", f"{name}: config.json is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise StageError(
            "json", f"{name}: config.json is nested too deeply (more than {MAX_JSON_DEPTH} levels)"
        ) from None
    except ValueError as exc:
        raise StageError("json", f"{name}: config.json is not valid JSON: {json_value_error(exc)}") from None
    if not isinstance(value, dict):
        raise StageError("json", f"{name}: config.json must hold a JSON object, got {_json_type(value)}")
    check_tree(value, name=name)
    return value


def check_tree(value: object, *, name: str) -> None:
    """A parsed config every later step can handle: at most MAX_JSON_DEPTH levels of nesting and
    MAX_CONFIG_VALUES keys and values (`capacity.hf_config.fields.check_shape`; a `text_config`
    chain or a deep list would make recursive code fail far from here, and a million values is no
    config), and text without lone surrogates (JSON's `\\ud800` decodes to one; no database driver
    can store it) or NUL characters (PostgreSQL refuses them).
    Iterative, so the check itself cannot overflow the stack (StageError 'json'). The path of a
    value is built only when it is reported (MAX_CONFIG_VALUES values are checked in a fraction of a second)."""
    if isinstance(value, str) and (problem := _text_problem(value)):
        raise StageError("json", f"{name}: config.json holds {problem} at the top level")
    if not isinstance(value, dict | list):
        return
    try:
        check_shape(value, name)
    except ShapeError as exc:
        raise StageError("json", f"{exc}{_deepest(value) if exc.too_deep else ''}") from None
    stack: list[tuple[dict[Any, Any] | list[Any], tuple[object, ...]]] = [(value, ())]
    while stack:
        item, where = stack.pop()
        pairs: Iterable[tuple[Any, Any]] = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in pairs:
            if isinstance(key, str) and (problem := _text_problem(key)):
                raise StageError("json", f"{name}: config.json holds {problem} in a key ({_path((where, key))})")
            if isinstance(child, str):
                if problem := _text_problem(child):
                    raise StageError("json", f"{name}: config.json holds {problem} in {_path((where, key))}")
            elif isinstance(child, dict | list):
                stack.append((child, (where, key)))


def _path(where: tuple[object, ...]) -> str:
    """`a.b[0].c` from the chain (((), "a"), "b"), 0)... that `check_tree` keeps per value."""
    parts: list[str] = []
    node: Any = where
    while node:
        node, step = node
        parts.append(f"[{step}]" if isinstance(step, int) else f".{ascii(step)[1:-1]}")
    return "".join(reversed(parts)).removeprefix(".")


def _deepest(value: object) -> str | None:
    """` (at a.b.c...)`: the path to the first value deeper than MAX_JSON_DEPTH, for the reason."""
    stack: list[tuple[object, int, tuple[object, ...]]] = [(value, 1, ())]
    while stack:
        item, depth, where = stack.pop()
        if depth > MAX_JSON_DEPTH:
            at = _path(where)
            return f" (at {at if len(at) <= 60 else at[:57] + '...'})"
        if isinstance(item, dict):
            stack.extend((child, depth + 1, (where, key)) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, depth + 1, (where, i)) for i, child in enumerate(item))
    return None


def _text_problem(text: str) -> str | None:
    """What a backend cannot store in `text`, or None."""
    if text.isascii() and "\x00" not in text:  # the common case, at C speed
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end].encode("utf-8", "backslashreplace").decode("ascii")
        return f"a lone surrogate ({bad})"
    if "\x00" in text:  # PostgreSQL text cannot hold it, SQLite can: reject on both alike
        return "a NUL character (\\u0000)"
    return None


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON number")


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


def _describe(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    kind = {bool: "boolean", str: "string", float: "number", list: "list", dict: "object"}.get(type(value), "")
    return f"{kind} {one_line(text, 40)}".strip()


def lint_config(config: Mapping[str, Any], *, name: str) -> None:
    """Generic checks of the standard fields, at the top level and in nested text configs."""
    _lint_level(config, name=name, where="")
    for key in _NESTED:
        nested = config.get(key)
        if nested is None:
            continue
        if not isinstance(nested, Mapping):
            raise StageError("config", f"{name}: {key} must be an object, got {_describe(nested)}")
        _lint_level(nested, name=name, where=f"{key}.")


def _lint_level(config: Mapping[str, Any], *, name: str, where: str) -> None:
    for key in _STR_FIELDS:
        value = config.get(key)
        if value is not None and not isinstance(value, str):
            raise StageError("config", f"{name}: {where}{key} must be a string, got {_describe(value)}")
    archs = config.get("architectures")
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
        raise StageError("config", f"{name}: {where}architectures must be a list of strings, got {_describe(archs)}")
    quant = config.get("quantization_config")
    if quant is not None and not isinstance(quant, Mapping):
        raise StageError("config", f"{name}: {where}quantization_config must be an object, got {_describe(quant)}")
    ints: dict[str, int] = {}
    for key, (low, high) in _SIZE_FIELDS.items():
        value = config.get(key)
        if value is not None:
            # the parser's own reader: the same rules and words at every level. These keys are read in
            # every family: `num_experts: 8.0` in a Llama config is a field LlamaConfig does not type,
            # kept as is and never read, so an engine runs it; the parser refuses 16.0 where the
            # family reads the field (its config class types it)
            try:
                ints[key] = read_int(value, f"{where}{key}", lo=low, hi=high, integral_float=True)
            except ConfigError as exc:
                raise StageError("config", f"{name}: {exc}") from None
    for heads_key, kv_key in (("num_attention_heads", "num_key_value_heads"), ("n_head", "num_kv_heads")):
        heads, kv = ints.get(heads_key), ints.get(kv_key)
        if heads and kv:
            if kv > heads:
                raise StageError("config", f"{name}: {where}{kv_key} ({kv}) exceeds {where}{heads_key} ({heads})")
            if heads % kv:
                raise StageError(
                    "config",
                    f"{name}: {where}{heads_key} ({heads}) is not divisible by {where}{kv_key} ({kv})",
                )
    if "head_dim" not in ints and "kv_lora_rank" not in ints:
        for hidden_key, heads_key in (("hidden_size", "num_attention_heads"), ("n_embd", "n_head")):
            hidden, heads = ints.get(hidden_key), ints.get(heads_key)
            if hidden and heads and hidden % heads:
                raise StageError(
                    "config",
                    f"{name}: {where}{hidden_key} ({hidden}) is not divisible by {where}{heads_key} ({heads})"
                    " and there is no head_dim",
                )


def parse_spec(config: Mapping[str, Any], *, name: str) -> ModelSpec:
    """`parse_config` with every failure turned into a one-line StageError('config')."""
    try:
        return parse_config(config, name=name)
    except ConfigError as exc:
        raise StageError("config", _named(name, exc)) from None
    except NotImplementedError:
        raise StageError("config", f"{name}: the config parser is not available") from None
    except Exception as exc:  # a parser bug must not stop an ingest; the item is rejected
        raise StageError("config", f"{name}: parser failed: {type(exc).__name__}: {exc}") from None


def _named(name: str, exc: BaseException) -> str:
    message = one_line(exc)
    return message if name in message else f"{name}: {message}"


def check_spec(spec: ModelSpec, *, name: str) -> None:
    """The normalized spec is planable and fits the registry's columns (StageError 'validate')."""

    def fail(reason: str) -> None:
        raise StageError("validate", f"{name}: {reason}")

    sizes = {
        "hidden_size": spec.hidden_size,
        "num_layers": spec.num_layers,
        "num_attention_heads": spec.num_attention_heads,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "context_limit_tokens": spec.context_limit_tokens,
    }
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            fail(f"{key} must be a positive integer, got {value!r}")
    others = {
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.intermediate_size,
        "num_experts": spec.num_experts,
        "num_experts_per_token": spec.num_experts_per_token,
    }
    for key, value in (sizes | others).items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32_MAX:
            fail(f"{key} = {value!r} is out of range")
    if not spec.layers:
        fail("no decoder layers")
    indices = [layer.index for layer in spec.layers]
    if len(set(indices)) != len(indices):
        fail("two layer specs share a layer index")
    for layer in spec.layers:
        columns = layer.cache.columns()
        for key in ("num_kv_heads", "k_head_dim", "v_head_dim"):
            value = columns[key] or 0
            if not 0 <= value <= INT32_MAX:
                fail(f"layer {layer.index}: {key} = {value} is out of range")
        if layer.cache.stores_per_token_kv and layer.cache.kv_elements_per_token <= 0:
            fail(f"layer {layer.index} ({layer.kind}) stores no KV elements per token")
        window = layer.cache.window
        if window is not None and not 0 < window <= INT32_MAX:
            fail(f"layer {layer.index}: window of {window} tokens is out of range")
    total = spec.total_params
    if not 0 < total < 2**53:
        fail(f"parameter count {total:,} is not plausible")
    if spec.torch_dtype.lower() not in ("bfloat16", "float16", "float32", "bf16", "fp16", "half", "float"):
        fail(f"torch_dtype {spec.torch_dtype!r} is not a floating-point model dtype")


def check_checkpoint(spec: ModelSpec, checkpoint_bytes: int | None, *, name: str) -> None:
    """The checkpoint's recorded size agrees with the parameters counted from the config
    (StageError 'validate' naming both numbers); see `capacity.hf_config.checkpoint_size_problem`."""
    if checkpoint_bytes is None:
        return
    problem = checkpoint_size_problem(spec, checkpoint_bytes)
    if problem is not None:
        raise StageError("validate", f"{name}: {problem}")


def spec_from_snapshot(
    snapshot: ConfigSnapshot, overrides: ConfigOverrides | None = None
) -> tuple[dict[str, Any], ModelSpec]:
    """All stages for one snapshot: the config dict and its checked ModelSpec; a serving command's config
    `overrides` are applied to the decoded config, before any check reads it (the engine reads it so).

    Raises only StageError (or the overrides' own one-line OverrideError): whatever else a hostile config
    provokes in any stage (a bug, a RecursionError, a MemoryError on an absurd size) rejects this config with
    its type and message, so callers can isolate one item from the rest."""
    name = snapshot.repo_id
    stage = "json"
    try:
        config = decode_config(snapshot.config_bytes, name=name)
        stage = "config"
        if overrides is not None:
            config = overrides.applied(config)
        lint_config(config, name=name)
        spec = parse_spec(config, name=name)
        stage = "validate"
        check_spec(spec, name=name)
        check_checkpoint(spec, snapshot.checkpoint_bytes, name=name)
    except (StageError, OverrideError):
        raise
    except Exception as exc:
        raise StageError(stage, f"{name}: rejected at the {stage} stage: {type(exc).__name__}: {exc}") from None
    return config, spec
