"""Typed, validated access to config.json fields; every failure is a one-line `ConfigError`."""

from __future__ import annotations

import math
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

REQUIRED: Any = object()


def clip(value: Any) -> str:
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def _is_finite_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


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

    def integer(self, key: str, default: Any = REQUIRED, *, lo: int = 1, hi: int = MAX_DIM) -> int:
        value = self.data.get(key)
        if value is None:
            if default is REQUIRED:
                self.fail(f"missing required field {self.key(key)}")
            return int(default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{self.key(key)} must be an integer, got {clip(value)}")
        if value < lo:
            self.fail(f"{self.key(key)} must be >= {lo}, got {value}")
        if value > hi:
            self.fail(f"{self.key(key)} = {value} is implausibly large (max {hi:,})")
        return value

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
        value = self._checked(key, _is_finite_number, "a number")
        return default if value is None else float(value)

    def ints(self, key: str, *, lo: int = 0, hi: int = MAX_LAYERS) -> list[int] | None:
        value = self._checked(key, lambda v: isinstance(v, list | tuple), "a list of integers")
        if value is None:
            return None
        out: list[int] = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or not lo <= item <= hi:
                self.fail(f"{self.key(key)} must hold integers in [{lo}, {hi}], got {clip(item)}")
            out.append(item)
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
