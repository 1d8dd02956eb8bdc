"""The registry of startup-log dialects: which engine wrote a log, read from the phrases it prints.

The dialects (vllm_log, sglang_log, trtllm_log) know nothing of each other; this module lists them
and hands a log to the one whose phrases it uses (`startup_log.parse_engine_log` does the rest).
"""

from __future__ import annotations

from telemetry.common import FileContext, FileReport
from telemetry.normalize import DecodedText
from telemetry.prometheus import Dedupe
from telemetry.sglang_log import SGLANG
from telemetry.startup_log import LogDialect, parse_engine_log
from telemetry.trtllm_log import TRTLLM
from telemetry.vllm_log import VLLM

# SGLang and TensorRT-LLM first: a vLLM marker ("KV cache") also appears in their logs.
DIALECTS: tuple[LogDialect, ...] = (SGLANG, TRTLLM, VLLM)


def dialect_for(lines: list[str]) -> LogDialect:
    """The engine whose phrases the first 2,000 lines use (vLLM when none is recognised)."""
    head = lines[:2000]
    for dialect in DIALECTS[:-1]:
        if any(any(m in line for m in dialect.markers) for line in head):
            return dialect
    return VLLM


def looks_like_startup_log(lines: list[str]) -> bool:
    """A startup log of any engine capplan reads."""
    markers = tuple(m for d in DIALECTS for m in d.markers)
    return any(any(m in line for m in markers) for line in lines[:2000])


def parse_startup_log(ctx: FileContext, text: DecodedText, report: FileReport, dedupe: Dedupe) -> None:
    """A startup log of whichever engine wrote it (`dialect_for`)."""
    parse_engine_log(ctx, text, report, dedupe, dialect_for(text.lines))
