"""The engine registry: the profile of an engine and release. It sits above the profiles it imports."""

from __future__ import annotations

from capacity.engines.kinds import ENGINE_NAMES, Engine
from capacity.engines.plain import PlainProfile
from capacity.engines.protocol import EngineProfile
from capacity.engines.sglang import SglangProfile
from capacity.engines.trtllm import TrtllmProfile
from capacity.engines.vllm.profile import VllmProfile
from capacity.spec import SpecError


def engine_profile(
    engine: str | Engine, version: str | None = None, v0_engine: bool = False, extensible_kv_cache: bool | None = None
) -> EngineProfile:
    """The profile of an engine (and, for vLLM, of a release; `v0_engine`: its V0 engine, where a 0.8-0.10
    release keeps one beside V1; `extensible_kv_cache` False: a 0.34+ release with its extensible KV cache turned
    off). Raises SpecError for an unknown name."""
    try:
        kind = Engine(str(engine).lower())
    except ValueError:
        raise SpecError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINE_NAMES)}") from None
    if kind is Engine.VLLM:
        return VllmProfile.for_version(version, v0_engine, extensible_kv_cache)
    if kind is Engine.SGLANG:
        return SglangProfile(version)
    if kind is Engine.TRTLLM:
        return TrtllmProfile(version)
    return PlainProfile(version)
