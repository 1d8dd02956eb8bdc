"""The peer in the same run as `benchmarks/grid.py`: ridgepoint 0.1.2 on the grid's own rows.

ridgepoint (PyPI; a Rust core behind a thin Python adapter) lives in a venv of its own,
`.venv-ridgepoint` (benchmarks/setup_ridgepoint.sh), and runs as a subprocess
(`benchmarks/ridgepoint_peer.py`, `python -I`, so nothing of capplan is importable there). This side
samples rows from the published `capacity_grid` view where ridgepoint knows the GPU, the engine and the
dtypes, translates them to ridgepoint's names, and writes them with each model's config.json (the
catalog's, or the synthetic variant's: the layer count changed as `benchmarks.grid.variant` changes it)
and parameter count into a JSON payload.

Translation (capplan -> ridgepoint), and what it cannot carry:
- GPU: by product (`RIDGEPOINT_GPUS`); ridgepoint sizes each card with its own memory figure (B200 "192gb"
  where the catalog has 180 GB, GB200 "192gb" for 186 GB). GPUs it does not know are left out.
- GPU count: TP x PP (ridgepoint takes a count of GPUs, no split into tensor and pipeline stages).
- engine: vllm, sglang (ridgepoint has no TensorRT-LLM); weights: the format the row resolved to
  (bfloat16, float16, fp8, AWQ -> awq, GPTQ and the grid's int4 -> gptq-int4; mxfp4, nvfp4 have no
  ridgepoint dtype and are left out); KV: the resolved KV dtype (bf16, fp16, fp8).
- parameter count: capplan's (`ModelSpec.total_params`), where ridgepoint's adapter would read the
  safetensors headers on the Hub (no network here, and the variants have no checkpoint).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from benchmarks.estimate import CATALOG
from capacity.grid import GridModel

ROOT = Path(__file__).resolve().parent.parent


def default_venv(root: Path = ROOT, name: str = ".venv-ridgepoint", variable: str = "RIDGEPOINT_VENV") -> Path:
    """A peer's venv (ridgepoint's unless told): $`variable` (as for its setup script), else `name` at the repo
    root; in a linked git worktree (`.git` is a file `gitdir: <main>/.git/worktrees/<name>`) without one of
    its own, the main checkout's, so that a worktree runs the peer the main checkout set up."""
    if env := os.environ.get(variable):
        return Path(env)
    own = root / name
    dot_git = root / ".git"
    if own.exists() or not dot_git.is_file():
        return own
    gitdir = Path(dot_git.read_text().partition("gitdir:")[2].strip())
    if gitdir.parent.name == "worktrees" and gitdir.parent.parent.name == ".git":
        main = gitdir.parent.parent.parent / name
        if main.exists():
            return main
    return own


DEFAULT_VENV = default_venv()
PEER_SCRIPT = Path(__file__).resolve().parent / "ridgepoint_peer.py"
PROMPT_TOKENS = 2048  # ridgepoint's default prompt (its TTFT term); capplan's grid has no prompt length

# catalog GPU id -> ridgepoint's registry id (ridgepoint 0.1.2 knows 11 cards)
RIDGEPOINT_GPUS = {
    "a100-pcie-40gb": "a100-40gb",
    "a100-sxm-40gb": "a100-40gb",
    "a100-sxm-80gb": "a100-80gb",
    "a100-pcie-80gb": "a100-80gb",
    "h100-pcie-80gb": "h100-80gb",
    "h100-sxm-80gb": "h100-80gb",
    "h200-sxm-141gb": "h200-141gb",
    "h200-nvl-141gb": "h200-141gb",
    "b200-180gb": "b200-192gb",
    "gb200": "gb200-192gb",
    "l40s-48gb": "l40s-48gb",
    "rtx-3090-24gb": "rtx3090-24gb",
    "rtx-4090-24gb": "rtx4090-24gb",
    "rtx-5090-32gb": "rtx5090-32gb",
    "mi300x-192gb": "mi300x-192gb",
}
RIDGEPOINT_ENGINES = {"vllm": "vllm", "sglang": "sglang"}
RIDGEPOINT_KV = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


def ridgepoint_weights(weight_format: str) -> str | None:
    """ridgepoint's weight dtype for the format a grid row resolved to (None: it has none)."""
    if weight_format.startswith("int4 (awq"):
        return "awq"
    if weight_format.startswith("int4"):  # GPTQ, and the grid's own int4 (group 128): weight-only int4
        return "gptq-int4"
    return {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8"}.get(weight_format)


def catalog_configs() -> dict[str, dict[str, Any]]:
    """config.json of every catalog model, by repo id."""
    from models_registry.sources.bundled import read_catalog_entries

    entries, _ = read_catalog_entries(CATALOG)
    return {e.repo_id: json.loads(e.config_path.read_text()) for e in entries}


def variant_config(config: dict[str, Any], base_layers: int, layers: int) -> dict[str, Any]:
    """A base config with its layer count moved by `layers - base_layers` (and `layer_types`, where stated,
    the base pattern repeated), as `benchmarks.grid.variant` builds the variant's spec."""
    out = copy.deepcopy(config)
    text = out.get("text_config") or out
    holder = text if "num_hidden_layers" in text else out
    stated = int(holder["num_hidden_layers"])
    holder["num_hidden_layers"] = max(1, stated + layers - base_layers)
    for part in (text, out):
        kinds = part.get("layer_types")
        if isinstance(kinds, list) and kinds:
            part["layer_types"] = [kinds[i % len(kinds)] for i in range(holder["num_hidden_layers"])]
    return out


def model_payload(names: Iterable[str], fleet: Mapping[str, GridModel]) -> dict[str, dict[str, Any]]:
    """{name: {config, n_params}} for the models the sampled rows name."""
    configs = catalog_configs()
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        base_name = name.split("@v", 1)[0]
        model, base = fleet[name], fleet[base_name]
        config = configs[base_name]
        if name != base_name:
            config = variant_config(config, base.spec.num_layers, model.spec.num_layers)
        out[name] = {"config": config, "n_params": model.spec.total_params}
    return out


def sample_rows(con: duckdb.DuckDBPyConnection, rows: int, seed: int) -> pl.DataFrame:
    """Up to `rows` rows of the view on GPUs and engines ridgepoint knows (reservoir sample)."""
    gpus = ", ".join(f"'{g}'" for g in RIDGEPOINT_GPUS)
    engines = ", ".join(f"'{e}'" for e in RIDGEPOINT_ENGINES)
    return con.execute(
        "SELECT * FROM (SELECT model, gpu, engine, weight_format, kv_cache_dtype, tp, pp, context "
        f"FROM capacity_grid WHERE gpu IN ({gpus}) AND engine IN ({engines})) "
        f"USING SAMPLE {int(rows)} ROWS (reservoir, {int(seed)})"
    ).pl()


def payload_of(sample: pl.DataFrame, fleet: Mapping[str, GridModel]) -> tuple[dict[str, Any], int]:
    """The peer's payload (deployments in ridgepoint's names, rows as (deployment, context)) and the
    number of sampled rows left out for a weight or KV dtype ridgepoint does not have."""
    deployments: dict[tuple[Any, ...], int] = {}
    rows: list[tuple[int, int]] = []
    left_out = 0
    for r in sample.iter_rows(named=True):
        weights, kv = ridgepoint_weights(str(r["weight_format"])), RIDGEPOINT_KV.get(str(r["kv_cache_dtype"]))
        if weights is None or kv is None:
            left_out += 1
            continue
        key = (r["model"], RIDGEPOINT_GPUS[r["gpu"]], r["tp"] * r["pp"], RIDGEPOINT_ENGINES[r["engine"]], weights, kv)
        rows.append((deployments.setdefault(key, len(deployments)), r["context"]))
    models = model_payload(sorted({key[0] for key in deployments}), fleet)
    return {"prompt": PROMPT_TOKENS, "models": models, "deployments": list(deployments), "rows": rows}, left_out


@dataclass(frozen=True)
class PeerResult:
    sampled: int  # rows sampled from the view (GPUs and engines ridgepoint knows)
    left_out: int  # of those, rows with a weight / KV dtype ridgepoint does not have
    report: dict[str, Any]  # what ridgepoint_peer.py printed
    load_before: float  # 1-minute load average when the peer started and when it ended
    load_after: float

    def rate(self, loop: str) -> float:
        part = self.report[loop]
        return part["estimates"] / part["wall_s"] if part["wall_s"] else float("nan")

    def cpu_rate(self, loop: str) -> float:
        part = self.report[loop]
        return part["estimates"] / part["cpu_s"] if part["cpu_s"] else float("nan")


def run_peer(
    con: duckdb.DuckDBPyConnection, fleet: Mapping[str, GridModel], venv: Path, rows: int, seed: int, repeat: int
) -> PeerResult:
    """Sample, write the payload, run ridgepoint_peer.py in the peer's venv (isolated: `python -I`)."""
    sample = sample_rows(con, rows, seed)
    payload, left_out = payload_of(sample, fleet)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "peer.json"
        path.write_text(json.dumps(payload))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        command = [str(venv / "bin" / "python"), "-I", str(PEER_SCRIPT), str(path), "--repeat", str(repeat)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"ridgepoint peer failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return PeerResult(sample.height, left_out, json.loads(done.stdout), load_before, os.getloadavg()[0])


def peer_lines(result: PeerResult, rows: int, wall_s: float, cpu_s: float, cores: int) -> list[str]:
    """The printout: what each side counted, on how many cores, and the ratios."""
    r = result.report
    fit, scan = r["fit"], r["scan"]
    capplan_rate, capplan_cpu_rate = rows / wall_s, rows / cpu_s
    lines = [
        f"peer (same run): ridgepoint {r['ridgepoint']} (Rust core; Python {r['python']}, .venv-ridgepoint), "
        f"pinned to core {r['cpu']}, on {result.sampled:,} grid rows sampled from the view where it knows the GPU "
        f"and engine ({len(set(RIDGEPOINT_GPUS.values()))} cards for {len(RIDGEPOINT_GPUS)} catalog GPUs; "
        f"vllm, sglang); {result.left_out:,} left out for weights it has no dtype for (mxfp4, nvfp4); "
        f"{r['models']} model configs through its own adapter ({len(r['models_refused'])} refused), "
        f"{r['deployments']:,} deployments ({sum(r['deployments_refused'].values())} refused); load average "
        f"{result.load_before:.2f} before, {result.load_after:.2f} after",
        f"  fit, one estimate per grid row (model config, GPU x TP*PP, engine, weight and KV dtype, the row's "
        f"context): {fit['estimates']:,} in {fit['wall_s']:.2f} s (best of {fit['passes']}) = "
        f"{result.rate('fit'):,.0f} estimates/s on 1 core",
        f"  scan, one call per sampled deployment (its own 9 contexts 512..131,072, not the grid's): "
        f"{scan['calls']:,} calls = {scan['estimates']:,} estimates in {scan['wall_s']:.2f} s = "
        f"{result.rate('scan'):,.0f} estimates/s on 1 core",
        f"capplan / ridgepoint: capplan {capplan_rate:,.0f} rows/s on {cores} cores ({cpu_s / wall_s:.1f} busy: "
        f"{capplan_cpu_rate:,.0f} rows per CPU-second); ratio {capplan_rate / result.rate('fit'):.1f}x vs fit "
        f"(per CPU-second {capplan_cpu_rate / result.cpu_rate('fit'):.1f}x), "
        f"{capplan_rate / result.rate('scan'):.1f}x vs scan (per CPU-second "
        f"{capplan_cpu_rate / result.cpu_rate('scan'):.1f}x); on a loaded machine the per-CPU-second ratios are "
        "the fairer ones (the two ran one after the other)",
        "  like for like: a capplan row is one (deployment, context) of the whole grid, computed (budget, pool, "
        "B_max, concurrency, fit, max_model_len auto-fit, speed) and published to DuckDB; a ridgepoint estimate "
        "is one (deployment, context) answer (weights, overhead and KV pool intervals, max sequences, TTFT and "
        "decode roofline) as a JSON string in memory. capplan keeps TP and PP apart, prices TensorRT-LLM and "
        "39 GPUs; ridgepoint sees TP*PP GPUs of 11 cards, vllm and sglang only",
    ]
    return lines
