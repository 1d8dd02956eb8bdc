"""Serving-engine profiles: one module (or package, vLLM) per engine behind one small protocol.

Each profile answers for itself what the engine does with a deployment: its defaults, the non-KV
overhead it charges, the KV budget, how it lays the pool out (per pipeline stage), how many tokens a
windowed layer keeps in flight, what it prints as the KV cache size, whether it starts, and what the
estimate assumed for inputs left unstated. The scalar `capacity.estimate.estimate` and the vectorized
grid call the same methods; the few rules the grid evaluates per row (budget, printed size) are written
over `capacity.numeric`, so one definition serves Python integers and Polars expressions alike.

This package's root holds only the `Engine` enum (`kinds`) and the protocol (`protocol`); the profiles
import them, and `capacity.engines.registry.engine_profile` (above the profiles) picks one. Engines are
chosen by the enum (a `StrEnum`: "vllm" == Engine.VLLM), never by comparing names in several places.
"""

from __future__ import annotations

from capacity.engines.kinds import ENGINE_NAMES, Engine
from capacity.engines.protocol import AssumptionContext, DefaultsRequest, EngineProfile, PoolRequest

__all__ = ["ENGINE_NAMES", "AssumptionContext", "DefaultsRequest", "Engine", "EngineProfile", "PoolRequest"]
