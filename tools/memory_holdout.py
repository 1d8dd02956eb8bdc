"""Score capplan blind on the memory holdout (evaluation/data/memory_holdout.yaml): public startup logs from
sources the reference data does not use, collected before issue 22's rule changes and never fitted on.

    python tools/memory_holdout.py [--rows] [--cases evaluation/data/feature_logs]

Each case goes through `capplan estimate --json --from-command '<the engine command>' --gpu <catalog GPU>`, the
path a new user takes with a pasted command (plus `--engine-version` where the log names its release). Scored per
case: the KV pool (vLLM "Available KV cache memory", SGLang K size + V size, TensorRT-LLM "Allocated X GiB for max
tokens in paged KV cache") against `kv_budget_bytes_per_gpu` (SGLang's allocated pool: capped at capplan's token
slots times its per-token bytes, as --max-total-tokens caps it); the printed KV tokens against `kv_cache_tokens`; and
whether the engine started (a refusal or an out-of-memory start must not be predicted as starting). Summary, as
issue 22 asks: the share within 5 % and the median |error| of pool and tokens, and the start decisions right,
overall, per engine and per class (windowed, hybrid/state, multimodal, MoE, dense). Nothing here is fitted: the
file is for measurement (README-memory-holdout.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capacity.dtypes import GIB
from capacity.engines import Engine

HOLDOUT_PATH = Path(__file__).resolve().parents[1] / "evaluation" / "data" / "memory_holdout.yaml"
FEATURE_LOGS_DIR = Path(__file__).resolve().parents[1] / "evaluation" / "data" / "feature_logs"
WITHIN = 0.05  # the bar: within 5 %


class CaseClass(StrEnum):
    """What a case is reported under besides its engine (a case may be in several)."""

    DENSE = "dense"
    MOE = "moe"
    WINDOWED = "windowed"
    HYBRID = "hybrid"  # state layers (Mamba / GDN / linear attention) beside attention
    MULTIMODAL = "multimodal"


class Feature(StrEnum):
    """An engine feature the case runs with (evaluation/data/feature_logs/: issue 23's cases)."""

    LORA = "lora"
    SPECULATIVE = "speculative"
    KV_OFFLOAD = "kv_offload"  # vLLM native offloading, LMCache, SGLang HiCache, TensorRT-LLM host cache
    WEIGHT_OFFLOAD = "weight_offload"  # --cpu-offload-gb
    PREFIX_CACHING = "prefix_caching"
    DP_ATTENTION = "dp_attention"
    EXPERT_PARALLEL = "expert_parallel"
    CONTEXT_PARALLEL = "context_parallel"
    KV_BUDGET = "kv_budget"  # an explicit KV budget (--kv-cache-memory-bytes, a utilization slice): packing


class Outcome(StrEnum):
    """What the engine did at start: served, or stopped before serving (its message in `refusal`)."""

    STARTED = "started"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Measured:
    """The numbers the log prints, copied (GiB / tokens as printed), and the start outcome."""

    outcome: Outcome
    kv_pool_bytes: int | None
    kv_tokens: int | None
    kv_blocks: int | None  # releases before the token line (vLLM < 0.8 V0: "# GPU blocks")
    weights_bytes: int | None
    refusal: str | None


@dataclass(frozen=True, slots=True)
class Case:
    """One public startup log: where it is, what was run, what the engine printed."""

    id: str
    source: str
    source_group: str
    engine: Engine
    engine_version: str | None
    model: str
    catalog_model: str | None  # None: capplan's catalog cannot size the checkpoint (reported, not scored)
    gpu: str | None  # catalog GPU id; None: not stated or not in the catalog
    command: str
    classes: tuple[CaseClass, ...]
    measured: Measured
    quote: str
    features: tuple[Feature, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


def _gib_bytes(value: object) -> int | None:
    return None if value is None else round(float(str(value)) * GIB)


def _int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _pool_bytes(entry: dict[str, Any]) -> int | None:
    """vLLM / TensorRT-LLM print one pool figure in GiB; SGLang prints K size and V size ("GB" = GiB)."""
    if entry.get("k_size_gb") is not None and entry.get("v_size_gb") is not None:
        return round((float(entry["k_size_gb"]) + float(entry["v_size_gb"])) * GIB)
    return _gib_bytes(entry.get("kv_pool_gib"))


def case_files(path: Path) -> list[Path]:
    """The case files at `path`: the file itself, or a folder's `*.yaml` in name order."""
    return sorted(path.glob("*.yaml")) if path.is_dir() else [path]


def load_cases(path: Path = HOLDOUT_PATH) -> list[Case]:
    """Every case of a case file, or of each file in a folder (a malformed one raises: the files are
    hand-written and tested)."""
    entries = [
        entry
        for file in case_files(path)
        for entry in (yaml.safe_load(file.read_text(encoding="utf-8")) or {}).get("cases") or []
    ]
    cases: list[Case] = []
    for entry in entries:
        measured = entry["measured"]
        cases.append(
            Case(
                id=str(entry["id"]),
                source=str(entry["source"]),
                source_group=str(entry["source_group"]),
                engine=Engine(entry["engine"]),  # the edge: the yaml's engine name becomes an Engine
                engine_version=None if entry.get("engine_version") is None else str(entry["engine_version"]),
                model=str(entry["model"]),
                catalog_model=entry.get("catalog_model"),
                gpu=entry.get("gpu"),
                command=str(entry["command"]),
                classes=tuple(CaseClass(c) for c in entry["classes"]),
                measured=Measured(
                    outcome=Outcome(measured["outcome"]),
                    kv_pool_bytes=_pool_bytes(measured),
                    kv_tokens=_int(measured.get("kv_tokens")),
                    kv_blocks=_int(measured.get("kv_blocks")),
                    weights_bytes=_gib_bytes(measured.get("weights_gib")),
                    refusal=measured.get("refusal"),
                ),
                quote=str(entry["quote"]),
                features=tuple(Feature(f) for f in entry.get("features") or ()),
                raw=entry,
            )
        )
    return cases


@dataclass(frozen=True, slots=True)
class Scored:
    """capplan's answer for one case (`estimate`: the JSON of `capplan estimate`; `error`: its one-line error)."""

    case: Case
    estimate: dict[str, Any] | None
    error: str | None = None
    skipped: str | None = None

    def _error(self, measured: int | None, key: str) -> float | None:
        if self.estimate is None or not measured or self.estimate.get(key) is None:
            return None
        return float(self.estimate[key]) / measured - 1

    @property
    def predicted_pool_bytes(self) -> int | None:
        """vLLM and TensorRT-LLM print the budget; SGLang prints the pool it allocated (K size + V size), which is the
        budget only while nothing caps the token count: with --max-total-tokens it is those tokens' bytes."""
        if self.estimate is None or self.estimate.get("kv_budget_bytes_per_gpu") is None:
            return None
        budget_bytes = int(self.estimate["kv_budget_bytes_per_gpu"])
        if self.case.engine is not Engine.SGLANG:
            return budget_bytes
        slots = int(self.estimate["physical_kv_token_slots"])
        return min(budget_bytes, slots * int(self.estimate["kv_bytes_per_token_per_gpu"]))

    @property
    def pool_error(self) -> float | None:
        measured = self.case.measured.kv_pool_bytes
        predicted = self.predicted_pool_bytes
        return None if not measured or predicted is None else predicted / measured - 1

    @property
    def tokens_error(self) -> float | None:
        """The printed KV capacity: tokens, or blocks where the release prints blocks."""
        if self.case.measured.kv_tokens is None and self.case.measured.kv_blocks is not None:
            return self._error(self.case.measured.kv_blocks, "num_blocks")
        return self._error(self.case.measured.kv_tokens, "kv_cache_tokens")

    @property
    def weights_error(self) -> float | None:
        return self._error(self.case.measured.weights_bytes, "weights_bytes_per_gpu")

    @property
    def predicted_starts(self) -> bool | None:
        """capplan says it starts; a one-line refusal by capplan counts as "does not start"."""
        if self.skipped:
            return None
        return bool(self.estimate["starts"]) if self.estimate is not None else False

    @property
    def start_right(self) -> bool | None:
        starts = self.predicted_starts
        return None if starts is None else starts == (self.case.measured.outcome is Outcome.STARTED)


def estimate_args(case: Case) -> list[str]:
    """The `capplan estimate` arguments a user types for this case."""
    args = ["estimate", "--json", "--from-command", case.command, "--gpu", str(case.gpu)]
    return args + (["--engine-version", case.engine_version] if case.engine_version else [])


def score(cases: Sequence[Case]) -> list[Scored]:
    """Every case through `capplan estimate` in process (the CLI's own parsing, resolution and errors)."""
    from typer.testing import CliRunner

    from pipelines.cli import app

    runner = CliRunner()
    out: list[Scored] = []
    for case in cases:
        if case.catalog_model is None:
            out.append(Scored(case, None, skipped="checkpoint not in capplan's catalog"))
            continue
        if case.gpu is None:
            out.append(Scored(case, None, skipped="GPU not stated or not in the catalog"))
            continue
        result = runner.invoke(app, estimate_args(case))
        if result.exit_code == 0:
            out.append(Scored(case, json.loads(result.stdout)))
        else:
            out.append(Scored(case, None, error=(result.output or str(result.exception)).strip().splitlines()[-1]))
    return out


@dataclass(frozen=True, slots=True)
class Summary:
    """Pool and token accuracy and start decisions of a group of cases."""

    pool: tuple[float, ...]
    tokens: tuple[float, ...]
    starts_right: int
    starts_scored: int

    @staticmethod
    def of(scored: Iterable[Scored]) -> Summary:
        rows = list(scored)
        pool = tuple(e for s in rows if (e := s.pool_error) is not None)
        tokens = tuple(e for s in rows if (e := s.tokens_error) is not None)
        decisions = [r for s in rows if (r := s.start_right) is not None]
        return Summary(pool, tokens, sum(decisions), len(decisions))

    @staticmethod
    def _text(errors: tuple[float, ...]) -> str:
        if not errors:
            return f"{'-':>22}"
        within = sum(abs(e) <= WITHIN for e in errors)
        median = statistics.median(abs(e) for e in errors)
        return f"{within:>3}/{len(errors):<3} {within / len(errors):4.0%} ({median:6.2%})"

    def line(self, name: str) -> str:
        pool, tokens = self._text(self.pool), self._text(self.tokens)
        return f"{name:34} pool {pool}   tokens {tokens}   starts {self.starts_right}/{self.starts_scored}"


def groups(scored: Sequence[Scored]) -> dict[str, list[Scored]]:
    """Overall, per engine and per class (cases capplan cannot size are left out of every group)."""
    sized = [s for s in scored if s.skipped is None]
    out: dict[str, list[Scored]] = {"overall": sized}
    out["modelled (no 'not modelled' flag)"] = [
        s for s in sized if s.estimate is None or not s.estimate.get("not_modelled")
    ]
    for engine in Engine:
        out[f"engine {engine}"] = [s for s in sized if s.case.engine is engine]
    for kind in CaseClass:
        out[f"class {kind}"] = [s for s in sized if kind in s.case.classes]
    for feature in Feature:
        out[f"feature {feature}"] = [s for s in sized if feature in s.case.features]
    return {name: rows for name, rows in out.items() if rows}


def _pct(error: float | None) -> str:
    return f"{error:+7.1%}" if error is not None else f"{'-':>7}"


def _capacity_text(est: dict[str, Any], m: Measured) -> str:
    if m.kv_tokens is None and m.kv_blocks is not None:
        return f"blocks {est.get('num_blocks', '-')!s:>9} vs {m.kv_blocks:>9}"
    return f"tokens {est.get('kv_cache_tokens', '-')!s:>9} vs {m.kv_tokens if m.kv_tokens else '-'!s:>9}"


def _gib(value: object) -> str:
    return f"{int(str(value)) / GIB:7.2f}" if value is not None else f"{'-':>7}"


def row_line(s: Scored) -> str:
    """One case: predicted vs measured pool (GiB) and tokens, the error, and the start decision."""
    if s.skipped:
        return f"{s.case.id[:52]:52} not scored: {s.skipped}"
    est, m = s.estimate or {}, s.case.measured
    parts = [
        f"pool {_gib(s.predicted_pool_bytes)} vs {_gib(m.kv_pool_bytes)} GiB {_pct(s.pool_error)}",
        _capacity_text(est, m) + f" {_pct(s.tokens_error)}",
        f"weights {_pct(s.weights_error)}",
        f"starts {s.predicted_starts} ({m.outcome}) {'ok' if s.start_right else 'WRONG'}",
    ]
    if s.error:
        parts.append(f"capplan: {s.error[:90]}")
    elif est.get("not_modelled"):
        parts.append(f"not modelled: {str(est['not_modelled'])[:60]}")
    return f"{s.case.id[:52]:52} " + "  ".join(parts)


def report(scored: Sequence[Scored], *, rows: bool, emit: Callable[[str], None] = print) -> None:
    """The summary table (and every case with `rows`)."""
    skipped = [s for s in scored if s.skipped]
    sources = len({s.case.source_group for s in scored})
    sized = len(scored) - len(skipped)
    emit(f"{len(scored)} cases from {sources} sources; {sized} sized by capplan, {len(skipped)} not (catalog)")
    emit("within 5 % (median |error|); starts = start / refusal decisions right")
    for name, members in groups(scored).items():
        emit(Summary.of(members).line(name))
    if rows:
        emit("")
        for s in scored:
            emit(row_line(s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", action="store_true", help="print every case")
    parser.add_argument(
        "--cases",
        type=Path,
        default=HOLDOUT_PATH,
        help=f"a case file or a folder of them (default: the memory holdout; issue 23's: {FEATURE_LOGS_DIR})",
    )
    args = parser.parse_args()
    report(score(load_cases(args.cases)), rows=args.rows)


if __name__ == "__main__":
    main()
