"""Issue 23's check per serving feature: capplan's KV pool, KV tokens and start decision against public startup logs
that ran with the feature on, in-sample (the reference data) beside blind (evaluation/data/feature_logs/).

    python tools/feature_accuracy.py [--rows]

IN-SAMPLE: the reference rows (`../evaluation/data/*_public_measurements.yaml`) that carry `serving_features`; the
same data fits the overhead coefficients, so their figures flatter capplan. Each goes through the feature rules the
way a user's command does: `capplan estimate --json --from-command '<feature_command>' --gpu <feature_gpu>
--engine-version <the row's release, else the study's representative one>` (tools/memory_holdout.py's scorer), so
the feature's parameters are the ones the row states and the engine's defaults where it states none. A row the
catalog cannot size is listed with its reason (`feature_not_sized`). OUT-OF-SAMPLE: the feature_logs cases, never
fitted on.

Prefix caching is counted apart: vLLM V1 (0.8+) and SGLang run with it on by default and it takes no memory at start
(the pool is sized before any block is shared), so every such log is a "prefix caching on (default)" case, scored as
the memory studies score it; logs that set it on explicitly are their own group.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capacity import engine_constants as ec
from capacity.dtypes import GIB
from capacity.engines import Engine
from evaluation.measurements import MEASUREMENTS_PATH, load_measurements, measurement_version
from tools import memory_holdout as mh

REFERENCE_FILES = (
    MEASUREMENTS_PATH,
    MEASUREMENTS_PATH.with_name("sglang_public_measurements.yaml"),
    MEASUREMENTS_PATH.with_name("trtllm_public_measurements.yaml"),
)
_FIRST_V1_RELEASE = (0, 8)  # vLLM V1 (prefix caching on by default) is the default engine from 0.8.0


@dataclass(frozen=True, slots=True)
class ReferenceRow:
    """A feature-on reference row as a scorer case (`case`), or the reason capplan cannot size it (`not_sized`)."""

    case: mh.Case
    not_sized: str | None


def _release(entry: dict[str, Any], engine: Engine, fallback: dict[str, str]) -> str | None:
    """The release the row's rules take: the one it states (or infers), else the study's representative one."""
    if engine is Engine.VLLM:
        return fallback.get(str(entry["id"]))
    stated = entry.get("sglang_version") or entry.get("trtllm_version") or entry.get("rules_version")
    return str(stated) if stated else None


def _measured(entry: dict[str, Any], engine: Engine) -> mh.Measured:
    """The printed pool and tokens and whether the engine served (a failed start: refused)."""
    if engine is Engine.VLLM:
        pool = entry.get("kv_cache_memory_gib")
        pool_bytes = None if pool is None else round(float(pool) * GIB)
        tokens = entry.get("kv_cache_tokens")
    else:
        k, v, kv = entry.get("k_size_gb"), entry.get("v_size_gb"), entry.get("kv_size_gb")
        total = float(k) + float(v) if k is not None and v is not None else kv
        pool_bytes = None if total is None else round(float(total) * GIB)
        tokens = entry.get("max_total_num_tokens" if engine is Engine.SGLANG else "kv_cache_tokens")
    started = str(entry.get("outcome") or "").startswith("started")
    return mh.Measured(
        outcome=mh.Outcome.STARTED if started else mh.Outcome.REFUSED,
        kv_pool_bytes=pool_bytes,
        kv_tokens=None if tokens is None else int(tokens),
        kv_blocks=None,
        weights_bytes=None,
        refusal=None if started else str(entry.get("outcome")),
    )


def load_reference_rows(paths: Sequence[Path] = REFERENCE_FILES) -> list[ReferenceRow]:
    """Every reference row that ran with a serving feature on (`serving_features`)."""
    fallback = {row.id: measurement_version(row) for row in load_measurements()}
    out: list[ReferenceRow] = []
    for path in paths:
        for entry in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("measurements") or []:
            if not entry.get("serving_features"):
                continue
            engine = Engine(entry.get("engine") or Engine.VLLM)
            command = entry.get("feature_command")
            case = mh.Case(
                id=str(entry["id"]),
                source=str(entry["source"]),
                source_group=str(entry["source"]).split(" (")[0],
                engine=engine,
                engine_version=_release(entry, engine, fallback),
                model=str(entry.get("model") or ""),
                catalog_model=str(entry.get("config_model") or entry.get("model")) if command else None,
                gpu=entry.get("feature_gpu"),
                command=str(command or ""),
                classes=(),
                measured=_measured(entry, engine),
                quote=str(entry.get("log_excerpt") or ""),
                features=tuple(mh.Feature(f) for f in entry["serving_features"]),
                raw=entry,
            )
            out.append(ReferenceRow(case, None if command else str(entry.get("feature_not_sized") or "no command")))
    return out


def score_reference(rows: Sequence[ReferenceRow]) -> list[mh.Scored]:
    """The sizable rows through `capplan estimate` (the feature rules), the others as not scored with their reason."""
    scored = iter(mh.score([r.case for r in rows if r.not_sized is None]))
    return [mh.Scored(r.case, None, skipped=r.not_sized) if r.not_sized else next(scored) for r in rows]


# --- prefix caching: on by default in vLLM V1 and SGLang ----------------------------------------------------------


def prefix_default_on(engine: Engine, version: str | None, generation: str | None) -> bool:
    """Whether the engine ran with prefix caching on without being asked: SGLang's radix cache always; vLLM from V1's
    first default release (0.8) on, an unstated release counted by its generation."""
    if engine is Engine.SGLANG:
        return True
    if engine is not Engine.VLLM or generation == "v0":
        return False
    if not version:
        return generation == "v1"
    return ec.parse_version(version)[:2] >= _FIRST_V1_RELEASE


@dataclass(frozen=True, slots=True)
class PrefixGroups:
    """Errors (pool, tokens) of the logs that ran with prefix caching on by default and of those that set it on."""

    default_pool: tuple[float, ...]
    default_tokens: tuple[float, ...]
    explicit_pool: tuple[float, ...]
    explicit_tokens: tuple[float, ...]


def _explicit(raw: dict[str, Any]) -> bool | None:
    """True: the command sets prefix caching on (`--enable-prefix-caching`, vLLM's non-default args); False: off;
    None: not said, the engine's default (a printed config's `enable_prefix_caching=True` is only the default)."""
    if raw.get("enable_prefix_caching") is False:
        return False
    text = str(raw.get("command") or "") + str(raw.get("log_excerpt") or "")
    if "--no-enable-prefix-caching" in text or "--disable-radix-cache" in text or "disable_radix_cache=True" in text:
        return False
    return True if "--enable-prefix-caching" in text or "'enable_prefix_caching': True" in text else None


def reference_prefix_groups() -> PrefixGroups:
    """The in-sample vLLM and SGLang studies' errors, split by how prefix caching was on."""
    from evaluation import engine_logs as el
    from evaluation.measurements import compare
    from models_registry.sources.gpu_catalog import find_gpu_sku
    from tools.vllm_accuracy import resolve_model

    pairs: list[tuple[bool | None, float | None, float | None]] = []
    for c in compare(load_measurements(), resolve_model, find_gpu_sku, dp_rows=True):
        r = c.row
        on = _explicit(r.raw)
        if c.predicted is not None and (
            on or prefix_default_on(Engine.VLLM, r.prediction_version, r.engine_generation)
        ):
            pairs.append((on, c.kv_pool_error, c.kv_tokens_error))
    scored, _ = el.shipped_scores(el.load_engine_logs(), resolve_model, find_gpu_sku)
    for s in scored:
        if s.predicted is not None and s.row.engine is Engine.SGLANG:
            pairs.append((_explicit(s.row.raw), s.pool_error, s.tokens_error))
    return _groups(pairs)


def holdout_prefix_groups(scored: Sequence[mh.Scored]) -> PrefixGroups:
    """The blind cases' errors, split the same way."""
    pairs = [
        (on, s.pool_error, s.tokens_error)
        for s in scored
        if s.skipped is None
        and (
            (on := _explicit({"command": s.case.command}))
            or prefix_default_on(s.case.engine, s.case.engine_version, None if s.case.engine_version else "v1")
        )
    ]
    return _groups(pairs)


def _groups(pairs: Sequence[tuple[bool | None, float | None, float | None]]) -> PrefixGroups:
    def errors(index: int, explicit: bool) -> tuple[float, ...]:
        return tuple(
            e for p in pairs if (p[0] is True) == explicit and p[0] is not False and (e := p[index]) is not None
        )

    return PrefixGroups(errors(1, False), errors(2, False), errors(1, True), errors(2, True))


# --- the report ---------------------------------------------------------------------------------------------------


def _summary(members: Sequence[mh.Scored]) -> str:
    sized = [s for s in members if s.skipped is None]
    return f"{len(members):>2} rows, {len(sized):>2} sized  " + mh.Summary.of(sized).line("").strip()


def report(
    reference: Sequence[mh.Scored],
    blind: Sequence[mh.Scored],
    prefix: tuple[PrefixGroups, PrefixGroups],
    *,
    rows: bool,
    emit: Callable[[str], None] = print,
) -> None:
    """Per feature: in-sample (reference) beside out-of-sample (feature_logs); prefix caching by how it was on."""
    emit("pool / tokens within 5 % (median |error|); starts = start decisions right / scored")
    for feature in mh.Feature:
        ref = [s for s in reference if feature in s.case.features]
        out = [s for s in blind if feature in s.case.features]
        if not ref and not out:
            emit(f"{feature:16} no log collected")
            continue
        emit(f"{feature:16} IN-SAMPLE  (reference, fits the overhead terms): {_summary(ref) if ref else '-'}")
        emit(f"{'':16} OUT-OF-SAMPLE (feature_logs, blind):             {_summary(out) if out else '-'}")
    for name, groups in zip(("IN-SAMPLE (reference)", "OUT-OF-SAMPLE (holdout + feature_logs)"), prefix, strict=True):
        for label, pool, tokens in (
            ("prefix caching on (default)", groups.default_pool, groups.default_tokens),
            ("prefix caching set explicitly", groups.explicit_pool, groups.explicit_tokens),
        ):
            emit(f"{label:30} {name:40} pool {mh.Summary._text(pool)}   tokens {mh.Summary._text(tokens)}")
    if rows:
        emit("")
        for s in [*reference, *blind]:
            emit(f"[{','.join(s.case.features)}] " + mh.row_line(s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", action="store_true", help="print every row and case")
    args = parser.parse_args()
    reference = score_reference(load_reference_rows())
    blind = mh.score(mh.load_cases(mh.FEATURE_LOGS_DIR))
    holdout = mh.score(mh.load_cases(mh.HOLDOUT_PATH))
    prefix = (reference_prefix_groups(), holdout_prefix_groups([*holdout, *blind]))
    report(reference, blind, prefix, rows=args.rows)


if __name__ == "__main__":
    main()
