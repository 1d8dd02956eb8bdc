"""vLLM's CUDA-graph memory estimate (deducted from the KV budget from 0.21) against public logs.

`profile_cudagraph_memory` (0.33.0 `v1/worker/gpu_model_runner.py`) captures the first two graphs of
each mode and charges the largest first capture once plus the second capture's cost for every other
graph. The public logs (capacity/data/vllm_cudagraph_estimates.yaml) show the total barely moves with
model size (0.52-0.79 GiB for 4B-31B models with the default 51 + 35 graphs) but with the number of
graphs, so the model is

    estimate = base + per_graph x graphs            (per_graph_tp x graphs with TP > 1)

with `graphs` the PIECEWISE + FULL capture counts (`capacity.engines.vllm_overhead.cudagraph_capture_counts`
derives them from max_num_seqs and max_num_batched_tokens). The three coefficients are fitted by least
absolute deviation and scored leave-one-source-out. Rows a deployment-independent model cannot speak
for are kept in the data and left out of the fit, each with its reason: unified-memory GPUs (GB10:
the driver's free memory is not the pool's), speculative decoding (its own capture sizes and drafter
graphs), logs without the capture counts.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from capacity.memory import GIB
from models_registry.sources.overhead_cv import source_group

ESTIMATES_PATH = Path(__file__).resolve().parents[2] / "capacity" / "data" / "vllm_cudagraph_estimates.yaml"
MIB = 1 << 20
BASE_GRID_GIB = tuple(i / 100 for i in range(101))
PER_GRAPH_GRID_MIB = tuple(i / 10 for i in range(601))


@dataclass(frozen=True, slots=True)
class GraphRow:
    id: str
    group: str
    tp: int
    graphs: int | None  # PIECEWISE + FULL captures the log lists
    estimate_bytes: int | None
    excluded: str | None  # why the fit leaves the row out (None: fitted and scored)


@dataclass(frozen=True, slots=True)
class GraphCoefficients:
    base_bytes: int
    per_graph_bytes: int
    per_graph_tp_bytes: int

    def predict(self, tp: int, graphs: int) -> int:
        return self.base_bytes + (self.per_graph_tp_bytes if tp > 1 else self.per_graph_bytes) * graphs


def _excluded(entry: dict[str, Any]) -> str | None:
    text = " ".join(str(entry.get(k) or "") for k in ("id", "gpu", "notes", "cudagraph_mode")).lower()
    if not isinstance(entry.get("estimate_gib"), int | float):
        return "no estimate line"
    if entry.get("piecewise_count") is None:
        return "no capture counts"
    if "gb10" in text or "spark" in text:
        return "unified memory (GB10)"
    if any(word in text for word in ("mtp", "eagle", "dflash", "speculative", "drafter")):
        return "speculative decoding"
    return None


def load_rows(path: Path = ESTIMATES_PATH) -> list[GraphRow]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    rows = []
    for entry in document["estimates"]:
        estimate = entry.get("estimate_gib")
        graphs = entry.get("piecewise_count")
        rows.append(GraphRow(
            id=str(entry["id"]),
            group=str(entry.get("source_group") or source_group(str(entry.get("source_url") or ""), str(entry["id"]))),
            tp=int(entry.get("tp") or 1),
            graphs=int(graphs) + int(entry.get("full_count") or 0) if graphs is not None else None,
            estimate_bytes=round(float(estimate) * GIB) if isinstance(estimate, int | float) else None,
            excluded=_excluded(entry),
        ))  # fmt: skip
    return rows


def _lad(rows: Sequence[GraphRow], base: int, grid_mib: Sequence[float]) -> int:
    best, best_loss = 0, float("inf")
    for mib in grid_mib:
        per = round(mib * MIB)
        loss = sum(abs(base + per * (r.graphs or 0) - (r.estimate_bytes or 0)) for r in rows)
        if loss < best_loss - 1e-9:
            best, best_loss = per, loss
    return best


def fit(rows: Sequence[GraphRow]) -> GraphCoefficients:
    """Least absolute deviation: base and per-graph on the TP = 1 rows, then per-graph at TP > 1 with
    that base."""
    usable = [r for r in rows if r.excluded is None]
    single = [r for r in usable if r.tp == 1]
    multi = [r for r in usable if r.tp > 1]
    best = (float("inf"), 0, 0)
    for gib in BASE_GRID_GIB:
        base = round(gib * GIB)
        per = _lad(single, base, PER_GRAPH_GRID_MIB)
        loss = sum(abs(base + per * (r.graphs or 0) - (r.estimate_bytes or 0)) for r in single)
        if loss < best[0] - 1e-9:
            best = (loss, base, per)
    _, base, per = best
    return GraphCoefficients(base, per, _lad(multi, base, PER_GRAPH_GRID_MIB) if multi else per)


def errors_gib(rows: Sequence[GraphRow], coefficients: GraphCoefficients) -> dict[str, float]:
    """predicted - logged, GiB, per fitted row (absolute: most estimates are a fraction of a GiB, so a
    share of the estimate says little about the KV budget it comes out of)."""
    return {r.id: (coefficients.predict(r.tp, r.graphs or 0) - (r.estimate_bytes or 0)) / GIB
            for r in rows if r.excluded is None and r.estimate_bytes is not None}  # fmt: skip


def cross_validated_errors_gib(rows: Sequence[GraphRow]) -> dict[str, float]:
    """Each source's rows scored by a fit on the other sources."""
    out: dict[str, float] = {}
    for group in sorted({r.group for r in rows if r.excluded is None}):
        held = [r for r in rows if r.group == group]
        out |= errors_gib(held, fit([r for r in rows if r.group != group]))
    return out


@dataclass(frozen=True, slots=True)
class GraphAccuracy:
    n: int
    median_abs_error_gib: float
    within_quarter_gib: float  # share of rows within 0.25 GiB
    within_half_gib: float

    def __str__(self) -> str:
        if not self.n:
            return "n 0"
        return (f"n {self.n:>2}  median |error| {self.median_abs_error_gib:.2f} GiB  within 0.25 GiB "
                f"{self.within_quarter_gib:4.0%}  within 0.5 GiB {self.within_half_gib:4.0%}")  # fmt: skip


def accuracy(errors: dict[str, float], ids: set[str] | None = None) -> GraphAccuracy:
    values = [abs(e) for k, e in errors.items() if ids is None or k in ids]
    if not values:
        return GraphAccuracy(0, float("nan"), float("nan"), float("nan"))
    return GraphAccuracy(len(values), statistics.median(values), sum(v <= 0.25 for v in values) / len(values),
                         sum(v <= 0.5 for v in values) / len(values))  # fmt: skip
