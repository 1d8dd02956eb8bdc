"""Typed, validated access to config.json fields; every failure is a one-line `ConfigError`.

One reader for every number a config holds (`read_int`, `read_number`; `Fields` and the registry's
generic lint both use them): a boolean is not an integer, NaN and infinities are refused, values
below the field's minimum or beyond its sanity bound are refused, each with a one-line reason.

Integral floats (`num_hidden_layers: 16.0`) are refused like any other float: transformers 5's
config classes (the loader vLLM and SGLang build models from) validate every integer field as a
strict dataclass field and raise on `16.0` (`expected int, got float`); transformers 4 kept the
float and the model then failed in `range()` / `nn.Linear`. No engine runs such a config, so a
check that refused it refuses nothing an engine runs. Where an engine does take one, the reader
is told so (`integral_float`): vLLM's secondary length keys (`seq_length: 4096.0`; min() then
int()), and the registry lint's generic keys, which a family's config class may not type (kept as
they are, never read).

`check_shape` bounds a config's nesting and size iteratively (no recursion anywhere that walks
it), and `clip` shows a value with a bounded repr.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from capacity.spec import SpecError


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

MAX_JSON_DEPTH = 32  # published configs nest 5 levels at most (quantization_config.config_groups...)
MAX_CONFIG_VALUES = 250_000  # keys and values in all; published configs hold a few thousand (50x headroom)

REQUIRED: Any = object()

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 6, 6, 6
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 60, 60, 40


def clip(value: Any) -> str:
    """A bounded one-line repr: a few levels and items of a container (a list nested 900 deep, or a
    dict of a million keys, shows as its start), never a RecursionError."""
    try:
        text = _REPR.repr(value).replace("\n", " ")
    except (RecursionError, ValueError):  # ValueError: an int too long to convert
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return " (a boolean)"
    if isinstance(value, str):
        return " (a string)"
    if isinstance(value, list | tuple):
        return " (a list)"
    if isinstance(value, Mapping):
        return " (an object)"
    return ""


def read_int(value: Any, shown: str, *, lo: int = 1, hi: int = MAX_DIM, integral_float: bool = False) -> int:
    """`value` as an integer field named `shown` in [lo, hi]; ConfigError (one line, without the
    config's label) otherwise. See the module docstring for why `16.0` is refused.
    `integral_float`: take `16.0` as 16 where the engine does (a field transformers does not type is
    kept as it is; vLLM reads the secondary length keys with getattr and returns int() of their min)."""
    integral = isinstance(value, float) and math.isfinite(value) and value.is_integer()
    if integral and not integral_float:
        raise ConfigError(
            f"{shown} must be an integer, got {clip(value)}: transformers' config loader (used by vLLM and "
            "SGLang) refuses a float in an integer field"
        )
    number = int(value) if integral else value
    if isinstance(number, bool) or not isinstance(number, int):
        raise ConfigError(f"{shown} must be an integer, got {clip(value)}{_kind(value)}")
    if number < lo:
        expected = {1: "positive", 0: "non-negative"}.get(lo, f">= {lo}")
        raise ConfigError(f"{shown} must be {expected}, got {clip(value)}")
    if number > hi:
        raise ConfigError(f"{shown} = {clip(value)} is implausibly large (max {hi:,})")
    return number


def read_number(value: Any, shown: str, *, lo: float = -math.inf, hi: float = math.inf, open_lo: bool = False) -> float:
    """`value` as a finite number named `shown` in [lo, hi] (or (lo, hi] with `open_lo`)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{shown} must be a finite number, got {clip(value)}{_kind(value)}")
    if value < lo or (open_lo and value == lo) or value > hi:
        low = "(" if open_lo else "["
        raise ConfigError(f"{shown} must be a number in {low}{lo:g}, {hi:,g}], got {clip(value)}")
    return float(value)


class ShapeError(ConfigError):
    """`check_shape`'s refusal; `too_deep` tells nesting from size."""

    def __init__(self, message: str, *, too_deep: bool) -> None:
        super().__init__(message)
        self.too_deep = too_deep


def check_shape(config: Any, label: str) -> None:
    """At most MAX_JSON_DEPTH levels of nesting and MAX_CONFIG_VALUES keys and values, checked level
    by level without recursion (a dict nested 900 deep, or a cycle built in Python, is one
    ShapeError); a container's size is counted before its items are looked at, so a list of
    millions is refused at once."""
    level: list[Any] = [config]
    count = 1
    depth = 1
    while level:
        if depth > MAX_JSON_DEPTH:
            raise ShapeError(f"{label}: config is nested more than {MAX_JSON_DEPTH} levels deep", too_deep=True)
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, Mapping) else item
            count += 2 * len(item) if isinstance(item, Mapping) else len(item)  # a key and its value
            if count > MAX_CONFIG_VALUES:
                raise ShapeError(
                    f"{label}: config holds more than {MAX_CONFIG_VALUES:,} keys and values; published configs "
                    "hold a few thousand: not a model config",
                    too_deep=False,
                )
            below.extend(child for child in children if isinstance(child, Mapping | list | tuple))
        level = below
        depth += 1


class Fields:
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

    def integer(
        self, key: str, default: Any = REQUIRED, *, lo: int = 1, hi: int = MAX_DIM, integral_float: bool = False
    ) -> int:
        value = self.data.get(key)
        if value is None:
            if default is REQUIRED:
                self.fail(f"missing required field {self.key(key)}")
            return int(default)
        try:
            return read_int(value, self.key(key), lo=lo, hi=hi, integral_float=integral_float)
        except ConfigError as exc:
            self.fail(str(exc))

    def opt_int(self, key: str, *, lo: int = 1, hi: int = MAX_DIM) -> int | None:
        if self.data.get(key) is None:
            return None
        return self.integer(key, lo=lo, hi=hi)

    def _checked(self, key: str, accepts: Callable[[Any], bool], kind: str) -> Any:
        """The value at `key`, None when absent; one `accepts` refuses fails the config as not `kind`."""
        value = self.data.get(key)
        if value is not None and not accepts(value):
            self.fail(f"{self.key(key)} must be {kind}, got {clip(value)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self._checked(key, lambda v: isinstance(v, bool), "true or false")
        return default if value is None else bool(value)

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self._checked(key, lambda v: isinstance(v, str), "a string")
        return default if value is None else str(value)

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key)
        if value is None:
            return default
        try:
            return read_number(value, self.key(key))
        except ConfigError as exc:
            self.fail(str(exc))

    def ints(self, key: str, *, lo: int = 0, hi: int = MAX_LAYERS, length: int | None = None) -> list[int] | None:
        """A list of integers in [lo, hi] (exactly `length` of them, when given)."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list | tuple):
            self.fail(f"{self.key(key)} must be a list of integers, got {clip(value)}{_kind(value)}")
        if length is not None and len(value) != length:
            self.fail(f"{self.key(key)} must hold {length} integers, got {len(value)}: {clip(value)}")
        out: list[int] = []
        for i, item in enumerate(value):
            try:
                out.append(read_int(item, f"{self.key(key)}[{i}]", lo=lo, hi=hi))
            except ConfigError as exc:
                self.fail(str(exc))
        return out

    def texts(self, key: str) -> list[str] | None:
        value = self._checked(
            key, lambda v: isinstance(v, list | tuple) and all(isinstance(item, str) for item in v), "a list of strings"
        )
        return None if value is None else list(value)

    def mapping(self, key: str) -> Mapping[str, Any] | None:
        value: Mapping[str, Any] | None = self._checked(key, lambda v: isinstance(v, Mapping), "an object")
        return value

    def sub(self, key: str) -> Fields | None:
        value = self.mapping(key)
        return None if value is None else Fields(value, self.label, f"{self.prefix}{key}.")
