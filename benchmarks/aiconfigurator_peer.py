"""capplan beside NVIDIA AIConfigurator 0.12 on the same public measurements, in one run.

    python -m benchmarks.aiconfigurator_peer [--set fit|holdout|both] [--json OUT.json] [--rows] [--limit N]

Scores output tokens/s, TPOT and TTFT on the reference set (evaluation/data/perf_measurements.yaml:
capplan's efficiency factors were fitted on it, so its columns there are in-sample) and on the blind
holdout (evaluation/data/perf_holdout.yaml: neither tool was fitted on it), for capplan's steady-state
model, its serving simulation (`evaluation.perf_sim.sim_report`, shipped factors, nothing refitted) and what
`capplan estimate` reports (a closed loop's TPOT, TTFT and tokens/s simulated, the rest steady state), and for
AIConfigurator's own estimate. Every figure is taken over the rows and metrics all of them answer;
the counts of rows each answers, and the rows it cannot be asked or refuses (by reason), are printed.

AIConfigurator (`aiconfigurator` + `aiconfigurator-core` from PyPI, whose wheel carries NVIDIA's measured
kernel tables) lives in `.venv-aiconfigurator` (tools/aiconfigurator/setup_venv.sh) and answers every row
in one subprocess (`benchmarks/aiconfigurator_runner.py`, `python -I`: nothing of capplan is importable
there), offline: local config folders (the catalog's, `models_registry/catalog/configs/`), the hub off
and its sockets refused.

Translation (capplan row -> `aiconfigurator cli estimate`), and what it cannot carry:
- load: a capped client concurrency C is `--estimate-mode agg --batch-size C` (its in-flight batching
  estimate at C requests in flight); a static batch (or vLLM's benchmark_latency) of B is
  `--estimate-mode static --batch-size B`. A burst of all prompts at once and Poisson arrivals at a
  rate are not asked: its estimate takes a fixed batch and has no queue.
- lengths: the row's mean input / output tokens, as capplan predicts it (`evaluation.perf_cv.row_lengths`).
- GPU: its system by product (`AIC_SYSTEMS`); GPUs it has no system for (MI300X, RTX 4090, GH200,
  A100 40 GB: its A100 systems are 80 GB) are not asked.
- backend: the row's engine; the data version is AIConfigurator's `current` slot for the system (the
  engine release the row ran is not mapped: its database holds one or two releases per backend).
- weights: the format capplan sizes the row with (`row_weight_dtype`): a quantized checkpoint is left to
  AIConfigurator's reading of the same config; fp8, nvfp4 and int4 stated for a 16-bit checkpoint are
  passed as its GEMM and MoE quant modes; KV: fp8 where the row states it, else bfloat16
  (the engines' default and capplan's assumption), so both tools size the same cache.
- parallelism: TP and PP; experts split over TP (`--moe-tp-size TP`) unless the row states expert
  parallelism (passed for every model: it ignores them for a dense one, and decides itself which
  architectures are MoE, e.g. Gemma 4). Rows with attention data parallelism are not asked.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.peer import ROOT, default_venv
from capacity.engines.kinds import Engine
from capacity.perf_fit import predict
from capacity.spec import ModelSpec
from evaluation.perf_cv import (
    _catalog_resolver,
    observations_for,
    row_kv_dtype,
    row_lengths,
    row_weight_dtype,
    shipped_params,
)
from evaluation.perf_measurements import PerfLoadResult, PerfMeasurement, load_perf_holdout, load_perf_measurements
from evaluation.perf_sim import SimScore, regime, sim_report, simulate_row

RUNNER = Path(__file__).resolve().parent / "aiconfigurator_runner.py"
METRICS = ("output_throughput", "tpot", "ttft")  # capplan's metric names (tokens/s, seconds, seconds)
COLUMNS = ("steady", "simulated", "reported", "aiconfigurator")
# capplan's columns: its steady state, its serving simulation, and what `capplan estimate` reports (a closed
# loop's TPOT, TTFT and tokens/s simulated, the rest the steady state's: `evaluation.perf_sim.SimScore.reported`)
CAPPLAN_COLUMNS = COLUMNS[:-1]

# catalog GPU id -> AIConfigurator 0.12 system (aiconfigurator_core/systems/*.yaml, same memory)
AIC_SYSTEMS = {
    "a100-sxm-80gb": "a100_sxm",
    "a100-pcie-80gb": "a100_pcie",
    "h100-sxm-80gb": "h100_sxm",
    "h100-pcie-80gb": "h100_pcie",
    "h200-sxm-141gb": "h200_sxm",
    "b200-180gb": "b200_sxm",
    "b300-288gb": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
    "l4-24gb": "l4",
    "l40s-48gb": "l40s",
    "rtx-pro-6000-blackwell-server-96gb": "rtx_pro_6000_server",
}
AIC_BACKENDS = {Engine.VLLM: "vllm", Engine.SGLANG: "sglang", Engine.TRTLLM: "trtllm"}
# capplan's sized weight format -> AIConfigurator's GEMM / MoE quant mode (16-bit and "auto": its own reading)
AIC_WEIGHT_QUANT = {"fp8": "fp8", "nvfp4": "nvfp4", "int4": "int4_wo"}


class AicMode(StrEnum):
    """AIConfigurator's `--estimate-mode`s this benchmark asks for."""

    AGG = "agg"  # in-flight batching at a fixed number of requests in flight
    STATIC = "static"  # one static batch: the context phase, then the generation steps

    def batch_of(self, row: PerfMeasurement) -> int | None:
        """Requests in the batch: the static batch's size, or the client's concurrency cap."""
        return row.batch_size or row.concurrency if self is AicMode.STATIC else row.concurrency


# capplan's load regimes (`evaluation.perf_sim.regime`) a fixed-batch estimate can stand for
AIC_MODES = {"static batch": AicMode.STATIC, "capped concurrency": AicMode.AGG}


@dataclass(frozen=True, slots=True)
class AicRequest:
    """One row in AIConfigurator's names: the keyword arguments of `aiconfigurator.cli.api.cli_estimate`."""

    id: str
    model_path: str
    system_name: str
    backend_name: str
    mode: AicMode
    isl: int
    osl: int
    batch_size: int
    tp_size: int
    pp_size: int
    moe_tp_size: int
    moe_ep_size: int
    gemm_quant_mode: str | None
    moe_quant_mode: str | None
    kvcache_quant_mode: str


def aic_request(row: PerfMeasurement, model: ModelSpec, config_dir: Path) -> AicRequest | str:
    """The row as AIConfigurator's estimate, or why it cannot be asked (one line)."""
    system = AIC_SYSTEMS.get(row.gpu)
    if system is None:
        return f"no AIConfigurator system for {row.gpu}"
    if row.dp_attention:
        return "attention data parallelism (not mapped)"
    load = regime(row)
    mode = AIC_MODES.get(load)
    if mode is None:
        return f"{load}: its estimate takes a fixed batch (no queue, no arrivals)"
    batch = mode.batch_of(row)
    if not batch:
        return "no batch size or concurrency"
    lengths = row_lengths(row)
    if isinstance(lengths, str):
        return lengths
    weights = AIC_WEIGHT_QUANT.get(row_weight_dtype(row, model))
    moe_ep = row.ep or 1  # passed for every model: a dense one ignores them, and its reading of MoE is its own
    if row.tp % moe_ep:
        return f"expert parallelism {moe_ep} does not divide TP {row.tp}"
    return AicRequest(
        id=row.id,
        model_path=str(config_dir),
        system_name=system,
        backend_name=AIC_BACKENDS[Engine(row.engine)],
        mode=mode,
        isl=lengths[0],
        osl=lengths[1],
        batch_size=batch,
        tp_size=row.tp,
        pp_size=row.pp,
        moe_tp_size=row.tp // moe_ep,
        moe_ep_size=moe_ep,
        gemm_quant_mode=weights,
        moe_quant_mode=weights,
        kvcache_quant_mode="fp8" if row_kv_dtype(row) == "fp8" else "bfloat16",
    )


def config_dir_of(repo_id: str) -> Path | None:
    """The catalog's local folder holding `repo_id`'s config.json (None: not bundled)."""
    from models_registry.sources.bundled import find_entry

    entry = find_entry(repo_id)
    return entry.config_path.parent if entry is not None else None


def aic_value(answer: dict[str, Any], metric: str) -> float:
    """AIConfigurator's answer in capplan's units (tokens/s, seconds); NaN where it refused."""
    if "refused" in answer:
        return math.nan
    if metric == "output_throughput":
        return float(answer["output_tokens_per_s"])
    return float(answer[f"{metric}_ms"]) / 1e3


@dataclass(frozen=True, slots=True)
class ErrorStats:
    """Errors as predicted / measured - 1, in percent: + means the tool predicts more."""

    n: int
    median_abs_pct: float
    p90_abs_pct: float
    signed_median_pct: float


def error_stats(measured: Sequence[float], predicted: Sequence[float]) -> ErrorStats:
    """Median and 90th-percentile |error| and the signed median over the pairs."""
    if not measured:
        return ErrorStats(0, math.nan, math.nan, math.nan)
    signed = (np.asarray(predicted, dtype=float) / np.asarray(measured, dtype=float) - 1) * 100
    return ErrorStats(
        len(signed),
        float(np.median(np.abs(signed))),
        float(np.percentile(np.abs(signed), 90)),
        float(np.median(signed)),
    )


@dataclass(frozen=True, slots=True)
class Paired:
    """One measured metric of one row with the three predictions (NaN where a tool gives none)."""

    row_id: str
    engine: str
    metric: str
    measured: float
    steady: float
    simulated: float
    reported: float
    aiconfigurator: float

    def answered_by_all(self) -> bool:
        return all(math.isfinite(v) and v > 0 for v in (self.steady, self.simulated, self.reported, self.aiconfigurator))


def pair(scores: Iterable[SimScore], answers: dict[str, dict[str, Any]]) -> list[Paired]:
    """capplan's scores of output tokens/s, TPOT and TTFT beside AIConfigurator's answer for the same row."""
    out = []
    for s in scores:
        if s.metric in METRICS:
            peer = aic_value(answers[s.row_id], s.metric) if s.row_id in answers else math.nan
            out.append(Paired(s.row_id, s.engine, s.metric, s.measured, s.steady, s.simulated, s.reported, peer))
    return out


def table(paired: Sequence[Paired]) -> dict[str, dict[str, Any]]:
    """Per engine ("all" first) and metric: each column's errors, and the rows each is closer on than
    AIConfigurator, over the pairs all three answer."""
    out: dict[str, dict[str, Any]] = {}
    engines = ["all", *sorted({p.engine for p in paired})]
    for engine in engines:
        for metric in METRICS:
            chosen = [p for p in paired if p.metric == metric and engine in ("all", p.engine) and p.answered_by_all()]
            if not chosen:
                continue
            measured = [p.measured for p in chosen]
            cell: dict[str, Any] = {
                c: dataclasses.asdict(error_stats(measured, [getattr(p, c) for p in chosen])) for c in COLUMNS
            }
            for c in CAPPLAN_COLUMNS:
                ours = [abs(getattr(p, c) / p.measured - 1) for p in chosen]
                theirs = [abs(p.aiconfigurator / p.measured - 1) for p in chosen]
                cell[f"{c}_closer"] = sum(a < b for a, b in zip(ours, theirs, strict=True))
                cell[f"aiconfigurator_closer_than_{c}"] = sum(b < a for a, b in zip(ours, theirs, strict=True))
            out[f"{engine}/{metric}"] = cell
    return out


@dataclass(frozen=True, slots=True)
class PeerSet:
    """One measurement set: the rows, capplan's scores, and the requests AIConfigurator is asked."""

    name: str
    rows: list[PerfMeasurement]
    scores: list[SimScore]
    requests: list[AicRequest]
    not_asked: Counter[str]

    def capplan_rows(self) -> set[str]:
        return {s.row_id for s in self.scores if s.metric in METRICS}


def prepare(name: str, rows: list[PerfMeasurement]) -> PeerSet:
    """capplan's steady-state and simulated scores of the set, and each row translated for the peer."""
    resolve, _ = _catalog_resolver()
    report = sim_report(rows)
    requests: list[AicRequest] = []
    not_asked: Counter[str] = Counter()
    for row in rows:
        config_dir = config_dir_of(row.config_model)
        try:
            model, _checkpoint = resolve(row.config_model)
        except (LookupError, ValueError, OSError) as exc:
            not_asked[f"model not resolved: {str(exc).splitlines()[0][:120]}"] += 1
            continue
        found = aic_request(row, model, config_dir) if config_dir else f"no local config for {row.config_model}"
        if isinstance(found, str):
            not_asked[found] += 1
        else:
            requests.append(dataclasses.replace(found, id=f"{name}/{row.id}"))
    return PeerSet(name, rows, report.scores, requests, not_asked)


def run_aiconfigurator(requests: Sequence[AicRequest], venv: Path) -> dict[str, Any]:
    """Every request through the runner in the peer's venv, one process (`python -I`, offline)."""
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no AIConfigurator venv at {venv}: run tools/aiconfigurator/setup_venv.sh")
    with tempfile.TemporaryDirectory() as tmp:
        payload, out = Path(tmp) / "requests.json", Path(tmp) / "answers.json"
        payload.write_text(json.dumps({"requests": [dataclasses.asdict(r) for r in requests]}))
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        command = [str(python), "-I", str(RUNNER), str(payload), str(out)]
        load_before, wall = os.getloadavg()[0], time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
        wall = time.perf_counter() - wall
        if done.returncode:
            raise SystemExit(f"AIConfigurator runner failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        report: dict[str, Any] = json.loads(out.read_text())
    report["process_wall_s"] = wall
    report["load_average"] = [load_before, os.getloadavg()[0]]  # 1-minute, before and after: a shared machine
    return report


def capplan_seconds(rows: Iterable[PerfMeasurement]) -> dict[str, float]:
    """Median seconds per answer of the steady state (its observations and `predict`) and of the
    simulation (`simulate_row`), one row at a time, the model and GPU already resolved (as the peer's
    database is loaded once per process)."""
    resolve, find = _catalog_resolver()
    params = shipped_params()
    steady: list[float] = []
    simulated: list[float] = []
    for row in rows:
        model, checkpoint = resolve(row.config_model)
        gpu = find(row.gpu)
        start = time.perf_counter()
        found = observations_for(row, model, gpu, checkpoint)
        if not isinstance(found, str):
            predict(found, params)
            steady.append(time.perf_counter() - start)
        start = time.perf_counter()
        simulate_row(row, model, gpu, checkpoint)
        simulated.append(time.perf_counter() - start)
    return {
        "steady_s": float(np.median(steady)) if steady else math.nan,
        "simulated_s": float(np.median(simulated)) if simulated else math.nan,
    }


def set_result(peer_set: PeerSet, answers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The machine-readable result of one set: counts, refusals by reason, the error table, time per answer."""
    mine = {k.split("/", 1)[1]: a for k, a in answers.items() if k.startswith(f"{peer_set.name}/")}
    answered = {rid for rid, a in mine.items() if "refused" not in a}
    paired = pair(peer_set.scores, mine)
    both = {p.row_id for p in paired if p.answered_by_all()}
    by_id = {row.id: row for row in peer_set.rows}
    aic_wall = [a["wall_s"] for rid, a in mine.items() if rid in answered]
    return {
        "rows": len(peer_set.rows),
        "capplan_rows": len(peer_set.capplan_rows()),
        "asked_rows": len(peer_set.requests),
        "aiconfigurator_rows": len(answered),
        "both_rows": len(both),
        "not_asked": dict(peer_set.not_asked.most_common()),
        "refused": dict(Counter(a["refused"] for a in mine.values() if "refused" in a).most_common()),
        "table": table(paired),
        "seconds_per_answer": {
            **capplan_seconds(by_id[rid] for rid in sorted(both)),
            "aiconfigurator_s": float(np.median(aic_wall)) if aic_wall else math.nan,
        },
        "pairs": [dataclasses.asdict(p) for p in paired if p.answered_by_all()],
    }


def _stats_text(stats: dict[str, float]) -> str:
    return f"{stats['median_abs_pct']:6.1f}% {stats['p90_abs_pct']:6.1f}% {stats['signed_median_pct']:+6.1f}%"


def print_set(name: str, result: dict[str, Any], show_rows: bool) -> None:
    """One set's counts, table, refusals and timings."""
    print(
        f"\n== {name}: {result['rows']} rows; capplan answers {result['capplan_rows']}, AIConfigurator was asked "
        f"{result['asked_rows']} and answers {result['aiconfigurator_rows']}; both: {result['both_rows']}"
    )
    head = "median |err|, p90 |err|, signed median"
    print(
        f"{'':28} {'n':>4}  {'capplan steady':>22}  {'capplan simulated':>22}  {'capplan reported':>22}  "
        f"{'AIConfigurator':>22}  closer reported/AIC"
    )
    print(f"{'':28} {'':>4}  ({head})")
    for key, cell in result["table"].items():
        n = cell["steady"]["n"]
        columns = "  ".join(_stats_text(cell[c]) for c in COLUMNS)
        closer = f"{cell['reported_closer']}/{cell['aiconfigurator_closer_than_reported']}"
        others = ", ".join(f"{c} {cell[f'{c}_closer']}/{cell[f'aiconfigurator_closer_than_{c}']}" for c in COLUMNS[:2])
        print(f"{key:28} {n:4}  {columns}  {closer:>8} ({others})")
    t = result["seconds_per_answer"]
    print(
        f"time per answer (median): capplan steady {t['steady_s'] * 1e3:.2f} ms, simulated {t['simulated_s'] * 1e3:.1f} ms; "
        f"AIConfigurator {t['aiconfigurator_s']:.2f} s ({t['aiconfigurator_s'] / t['steady_s']:,.0f}x the steady "
        f"state, {t['aiconfigurator_s'] / t['simulated_s']:,.0f}x the simulation)"
    )
    for title, counts in (("not asked", result["not_asked"]), ("refused by AIConfigurator", result["refused"])):
        print(f"{title}: {sum(counts.values())} rows")
        for reason, count in counts.items():
            print(f"  {count:4}  {reason}")
    if show_rows:
        for p in result["pairs"]:
            errs = " ".join(f"{c} {(p[c] / p['measured'] - 1) * 100:+6.1f}%" for c in COLUMNS)
            print(f"  {p['row_id']} {p['metric']}: measured {p['measured']:.4g}  {errs}")


SETS: dict[str, Callable[[], PerfLoadResult]] = {"fit": load_perf_measurements, "holdout": load_perf_holdout}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=[*SETS, "both"], default="both", help="measurement set(s) to score")
    parser.add_argument("--json", type=Path, default=None, help="write the machine-readable result here")
    parser.add_argument("--rows", action="store_true", help="print every scored row")
    parser.add_argument("--limit", type=int, default=None, help="only the first N rows of each set (a quick try)")
    parser.add_argument("--venv", type=Path, default=None, help="AIConfigurator's venv (default .venv-aiconfigurator)")
    args = parser.parse_args(argv)
    venv = args.venv or default_venv(ROOT, ".venv-aiconfigurator", "AICONFIGURATOR_VENV")
    names = list(SETS) if args.set == "both" else [args.set]
    sets = [prepare(name, SETS[name]().rows[: args.limit]) for name in names]
    peer = run_aiconfigurator([r for s in sets for r in s.requests], venv)
    answers = {a["id"]: a for a in peer.pop("answers")}
    print(
        f"AIConfigurator {peer['aiconfigurator']} (core {peer['aiconfigurator_core']}, Python {peer['python']}, "
        f"{venv}): {len(answers)} requests in one process, {peer['process_wall_s']:.1f} s "
        f"(import {peer['import_s']:.1f} s; load average {peer['load_average'][0]:.1f} before, "
        f"{peer['load_average'][1]:.1f} after); its data: the `current` slot per system and backend"
    )
    result: dict[str, Any] = {"aiconfigurator": peer, "sets": {}}
    for peer_set in sets:
        result["sets"][peer_set.name] = set_result(peer_set, answers)
        print_set(peer_set.name, result["sets"][peer_set.name], args.rows)
    result["aiconfigurator"]["answers"] = list(answers.values())
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1, default=str))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
