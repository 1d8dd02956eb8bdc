"""config.json (a plain dict) -> ModelSpec, for every model family a serving fleet runs.

Pure: no I/O. Errors are `ConfigError` with a one-line reason.
(Being written: see the parser task. API below is the contract other modules rely on.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capacity.spec import ModelSpec, SpecError


class ConfigError(SpecError):
    """The config cannot be turned into a ModelSpec; the message is one line for the user."""


def parse_config(config: Mapping[str, Any], *, name: str | None = None) -> ModelSpec:
    """Normalize a Hugging Face config.json dict into a ModelSpec (raises ConfigError)."""
    raise NotImplementedError
