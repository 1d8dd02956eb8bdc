"""The serving engines capplan models, as an enum: engines are chosen by it, never by comparing names."""

from __future__ import annotations

from enum import StrEnum


class Engine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"
    PLAIN = "plain"

    @property
    def casts_fp32_to_bf16(self) -> bool:
        """vLLM and SGLang serve a float32 checkpoint in bfloat16 unless told otherwise."""
        return self in (Engine.VLLM, Engine.SGLANG)


ENGINE_NAMES = tuple(e.value for e in Engine)
