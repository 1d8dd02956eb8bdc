"""Sizing a registry model in tests the way `capplan estimate` does: under its id, with its checkpoint's size."""

from __future__ import annotations

from typing import Any, Protocol

from capacity.estimate import Estimate, estimate
from capacity.spec import DeploymentSpec, ModelSpec


class RegistryModel(Protocol):
    """What a resolved, grid or catalog model gives an estimate: its spec, its id and its checkpoint's size."""

    @property
    def spec(self) -> ModelSpec: ...

    @property
    def repo_id(self) -> str: ...

    @property
    def checkpoint_bytes(self) -> int | None: ...


def estimate_model(model: RegistryModel, deployment: DeploymentSpec, **sizing: Any) -> Estimate:
    """`estimate` of `model` at `deployment`; `sizing` is the rest of `estimate`'s keywords (gpu, context, ...)."""
    return estimate(model.spec, deployment, model_name=model.repo_id, checkpoint_bytes=model.checkpoint_bytes, **sizing)
