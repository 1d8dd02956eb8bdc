"""The peer half of `benchmarks/grid.py --peer`: ridgepoint 0.1.2 timed on the grid's own configs, on one core.

Runs inside `.venv-ridgepoint` (benchmarks/setup_ridgepoint.sh) and imports nothing from capplan: the
payload (a JSON file written by `benchmarks/peer.py`) carries each model's config.json (the catalog's, or a
synthetic variant's with its layer count), its parameter count, and the sampled grid rows already
translated to ridgepoint's names (GPU id, GPU count, engine, weight and KV dtype, context).

Each config goes through ridgepoint's own adapter (`ridgepoint.hf.fetch_shape`) with its two network reads
replaced by the payload: the config.json, and the parameter count it would take from the safetensors headers
on the Hub. That is done once per model, before the clock, as a batch user of ridgepoint would; the timed
loops then call the Rust core with the dims, which is what `ridgepoint.fit` / `ridgepoint.scan` do per call
after fetching:
- fit: `_core.fit_shape(..., ctx, as_json=True)` once per sampled row: one estimate = one (model, GPU x count,
  engine, dtypes, context), the same unit as a capplan grid row;
- scan: `_core.scan_shape(..., as_json=True)` once per distinct deployment of the sample: ridgepoint's
  batched path, a fixed sweep of contexts (512 ... 131,072) whatever the model's limit, counted as one
  estimate per context it returns.
Each loop runs `repeat` times on the whole input; the best pass counts. Prints one JSON object.

    .venv-ridgepoint/bin/python benchmarks/ridgepoint_peer.py PAYLOAD.json [--repeat 3] [--cpu N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

import ridgepoint
import ridgepoint.hf as rp_hf
from ridgepoint import _core

Shape = tuple[Any, ...]


def shape_of(name: str, config: dict[str, Any], n_params: int) -> Shape:
    """The positional dims `_core.fit_shape` takes, from ridgepoint's adapter fed the payload instead of the Hub."""
    fetch_json, count_params = rp_hf._download_json, rp_hf._params_from_index
    rp_hf._download_json = lambda repo, filename, revision: config  # type: ignore[assignment]
    rp_hf._params_from_index = lambda repo, revision, cfg, tc: n_params  # type: ignore[assignment]
    try:
        s = rp_hf.fetch_shape(name)
    finally:
        rp_hf._download_json, rp_hf._params_from_index = fetch_json, count_params
    dims = ("layers", "kv_layers", "d_model", "n_params", "active_params", "geom")
    optional = ("head_dim", "n_heads", "n_kv_heads", "d_c", "d_rope")
    return (
        s["id"],
        *(s.get(k, s["layers"]) if k == "kv_layers" else s[k] for k in dims),
        *(s.get(k, 0) for k in optional),
    )


def best_pass_seconds(calls: list[tuple[Any, ...]], fn: Any, repeat: int) -> tuple[float, float, str]:
    """(wall, CPU) seconds of the fastest of `repeat` passes over `calls`, and the last answer."""
    best_wall = best_cpu = float("inf")
    out = ""
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        for args in calls:
            out = fn(*args)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if wall < best_wall:
            best_wall, best_cpu = wall, cpu
    return best_wall, best_cpu, out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("payload", help="JSON written by benchmarks/peer.py")
    parser.add_argument("--repeat", type=int, default=3, help="passes per loop; the best counts")
    parser.add_argument("--cpu", type=int, default=None, help="the core to pin to (default: the last usable)")
    args = parser.parse_args(argv)

    with open(args.payload) as f:
        payload = json.load(f)
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})  # one core: ridgepoint's core is single-threaded; so is this loop

    shapes: dict[str, Shape] = {}
    refused: dict[str, str] = {}
    for name, model in payload["models"].items():
        try:
            shapes[name] = shape_of(name, model["config"], int(model["n_params"]))
        except (KeyError, TypeError, ValueError) as exc:
            refused[name] = f"{type(exc).__name__}: {exc}"

    # each deployment checked once before the clock: a GPU, dtype or engine ridgepoint refuses is left out
    deployments: dict[int, tuple[Any, ...]] = {}
    scan_rows = 0
    unknown: dict[str, int] = {}
    for i, (model, gpu, count, engine, dtype, kv_dtype) in enumerate(payload["deployments"]):
        if model not in shapes:
            continue
        head = (*shapes[model], gpu, count, engine, dtype, kv_dtype)
        try:
            scan_rows += len(json.loads(_core.scan_shape(*head, payload["prompt"], True))["rows"])
        except ValueError as exc:
            unknown[str(exc)] = unknown.get(str(exc), 0) + 1
            continue
        deployments[i] = head
    fit_calls = [(*deployments[d], ctx, payload["prompt"], True) for d, ctx in payload["rows"] if d in deployments]
    scan_calls = [(*head, payload["prompt"], True) for head in deployments.values()]

    fit_wall, fit_cpu, last_fit = best_pass_seconds(fit_calls, _core.fit_shape, args.repeat)
    scan_wall, scan_cpu, last_scan = best_pass_seconds(scan_calls, _core.scan_shape, args.repeat)
    for out in (last_fit, last_scan):
        json.loads(out or "{}")  # what was timed is ridgepoint's JSON answer
    report = {
        "ridgepoint": ridgepoint.__version__,
        "python": platform.python_version(),
        "cpu": cpu,
        "models": len(shapes),
        "models_refused": refused,
        "deployments": len(deployments),
        "deployments_refused": unknown,
        "fit": {"estimates": len(fit_calls), "wall_s": fit_wall, "cpu_s": fit_cpu, "passes": args.repeat},
        "scan": {
            "calls": len(scan_calls),
            "estimates": scan_rows,
            "wall_s": scan_wall,
            "cpu_s": scan_cpu,
            "passes": args.repeat,
        },
    }
    print(json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
