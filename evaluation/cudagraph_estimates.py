"""vLLM's CUDA-graph memory estimate (deducted from the KV budget from 0.21) against public logs.

`profile_cudagraph_memory` (0.33.0 `v1/worker/gpu_model_runner.py`) captures the first two graphs of
each mode and charges the largest first capture once plus the second capture's cost for every other
graph. The public logs (evaluation/data/vllm_cudagraph_estimates.yaml) show the total barely moves with
model size (0.52-0.79 GiB for 4B-31B models with the default 51 + 35 graphs) but with the number of
graphs, so the model is

    estimate = base + per_graph x graphs      (TP > 1: per_graph_custom_ar or per_graph_nccl x graphs)

with `graphs` the PIECEWISE + FULL capture counts (`capacity.engines.vllm.overhead.cudagraph_capture_counts`
derives them from max_num_seqs and max_num_batched_tokens). At TP > 1 the charge per graph follows the
all-reduce the graphs capture: vLLM's custom all-reduce (it registers the graphs' addresses in its IPC
buffers) or NCCL's. Which one a row ran is what its log states (`custom_all_reduce`: "Registering N cuda
graph addresses", --disable-custom-all-reduce), else the engine's rule (`custom_all_reduce_on`) on the
row's GPU when `gpu` names a catalog SKU, else the rule for an unknown GPU (on, as the estimate assumes).
The four coefficients are fitted by least absolute deviation and scored leave-one-source-out. Rows a
deployment-independent model cannot speak for are kept in the data and left out of the fit, each with its
reason: unified-memory GPUs (GB10: the driver's free memory is not the pool's), speculative decoding (its
own capture sizes and drafter graphs), logs without the capture counts.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from capacity.dtypes import GIB
from capacity.engines.vllm.overhead import custom_all_reduce_on
from evaluation.overhead_cv import source_group
from models_registry.sources.gpu_catalog import find_gpu_sku

ESTIMATES_PATH = Path(__file__).resolve().parent / "data" / "vllm_cudagraph_estimates.yaml"
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
    custom_all_reduce: bool = False  # TP > 1: the graphs use vLLM's custom all-reduce (else NCCL's)
    custom_all_reduce_from: str = ""  # "log", "rule on <sku>" or "rule, unknown GPU" (TP > 1 only)


@dataclass(frozen=True, slots=True)
class GraphCoefficients:
    base_bytes: int
    per_graph_bytes: int  # TP = 1
    per_graph_custom_ar_bytes: int  # TP > 1, custom all-reduce on
    per_graph_nccl_bytes: int  # TP > 1, custom all-reduce off (NCCL's kernels in the graphs)

    def predict(self, tp: int, graphs: int, custom_all_reduce: bool) -> int:
        per = self.per_graph_bytes
        if tp > 1:
            per = self.per_graph_custom_ar_bytes if custom_all_reduce else self.per_graph_nccl_bytes
        return self.base_bytes + per * graphs


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


def _custom_all_reduce(entry: dict[str, Any], tp: int) -> tuple[bool, str]:
    """(on, where that comes from) for a TP > 1 row: the log's statement, else the rule on its GPU."""
    stated = entry.get("custom_all_reduce")
    if isinstance(stated, bool):
        return stated, "log"
    text = re.sub(r"^\d+\s*x\s*", "", str(entry.get("gpu") or "").split(",")[0].split("(")[0].strip())
    try:
        sku = find_gpu_sku(text) if text else None
    except LookupError:
        sku = None
    if sku is None:
        return custom_all_reduce_on(tp, None), "rule, unknown GPU"
    return custom_all_reduce_on(tp, sku.peer_link_gpus), f"rule on {sku.id}"


def load_rows(path: Path = ESTIMATES_PATH) -> list[GraphRow]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    rows = []
    for entry in document["estimates"]:
        estimate = entry.get("estimate_gib")
        graphs = entry.get("piecewise_count")
        tp = int(entry.get("tp") or 1)
        custom_ar, custom_ar_from = _custom_all_reduce(entry, tp) if tp > 1 else (False, "")
        rows.append(
            GraphRow(
                id=str(entry["id"]),
                group=str(
                    entry.get("source_group") or source_group(str(entry.get("source_url") or ""), str(entry["id"]))
                ),
                tp=tp,
                graphs=int(graphs) + int(entry.get("full_count") or 0) if graphs is not None else None,
                estimate_bytes=round(float(estimate) * GIB) if isinstance(estimate, int | float) else None,
                excluded=_excluded(entry),
                custom_all_reduce=custom_ar,
                custom_all_reduce_from=custom_ar_from,
            )
        )
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
    that base, once on the custom all-reduce rows and once on the NCCL rows (a side without rows takes
    the other's value, then the TP = 1 one)."""
    usable = [r for r in rows if r.excluded is None]
    single = [r for r in usable if r.tp == 1]
    custom = [r for r in usable if r.tp > 1 and r.custom_all_reduce]
    nccl = [r for r in usable if r.tp > 1 and not r.custom_all_reduce]
    best = (float("inf"), 0, 0)
    for gib in BASE_GRID_GIB:
        base = round(gib * GIB)
        per = _lad(single, base, PER_GRAPH_GRID_MIB)
        loss = sum(abs(base + per * (r.graphs or 0) - (r.estimate_bytes or 0)) for r in single)
        if loss < best[0] - 1e-9:
            best = (loss, base, per)
    _, base, per = best
    custom_per = _lad(custom, base, PER_GRAPH_GRID_MIB) if custom else None
    nccl_per = _lad(nccl, base, PER_GRAPH_GRID_MIB) if nccl else None
    fallback = custom_per if custom_per is not None else nccl_per if nccl_per is not None else per
    return GraphCoefficients(base, per, fallback if custom_per is None else custom_per,
                             fallback if nccl_per is None else nccl_per)


def errors_gib(rows: Sequence[GraphRow], coefficients: GraphCoefficients) -> dict[str, float]:
    """predicted - logged, GiB, per fitted row (absolute: most estimates are a fraction of a GiB, so a
    share of the estimate says little about the KV budget it comes out of)."""
    return {
        r.id: (coefficients.predict(r.tp, r.graphs or 0, r.custom_all_reduce) - (r.estimate_bytes or 0)) / GIB
        for r in rows
        if r.excluded is None and r.estimate_bytes is not None
    }


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
        return (
            f"n {self.n:>2}  median |error| {self.median_abs_error_gib:.2f} GiB  within 0.25 GiB "
            f"{self.within_quarter_gib:4.0%}  within 0.5 GiB {self.within_half_gib:4.0%}"
        )


def accuracy(errors: dict[str, float], ids: set[str] | None = None) -> GraphAccuracy:
    values = [abs(e) for k, e in errors.items() if ids is None or k in ids]
    if not values:
        return GraphAccuracy(0, float("nan"), float("nan"), float("nan"))
    return GraphAccuracy(
        len(values),
        statistics.median(values),
        sum(v <= 0.25 for v in values) / len(values),
        sum(v <= 0.5 for v in values) / len(values),
    )
