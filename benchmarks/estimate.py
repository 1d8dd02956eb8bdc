"""Estimates per second of the scalar path (`capacity.estimate.estimate`), one deployment at a time.

Walks the bundled catalog x GPUs x weight dtypes x TP x grid contexts (the grid's own rules, in a
shuffled order) until the time budget or the walk runs out, and prints the rate.

    .venv/bin/python -m benchmarks.estimate [--seconds 10] [--all]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

from capacity.estimate import estimate
from capacity.grid import GridModel, GridOptions, grid_contexts, weight_dtype_choices
from capacity.parallel import validate_parallelism
from capacity.spec import DeploymentSpec, GpuSku, SpecError

CATALOG = Path(__file__).resolve().parent.parent / "models_registry" / "catalog"


def catalog_models() -> tuple[list[GridModel], list[str]]:
    """Every catalog model the parser accepts, and one line for each it refuses."""
    from capacity.hf_config import parse_config
    from models_registry.sources.bundled import read_catalog_entries
    from models_registry.sources.common import checkpoint_bytes_from_index

    entries, errors = read_catalog_entries(CATALOG)
    models: list[GridModel] = []
    skipped = [f"{e.item_key}: {e.reason}" for e in errors]
    for entry in entries:
        try:
            spec = parse_config(json.loads(entry.config_path.read_text()), name=entry.repo_id)
        except ValueError as exc:
            skipped.append(str(exc))
            continue
        checkpoint = checkpoint_bytes_from_index(entry.index_path) if entry.index_path else None
        models.append(GridModel(entry.repo_id, spec, checkpoint))
    return models, skipped


def catalog_gpus() -> list[GpuSku]:
    from models_registry.sources.gpu_catalog import load_gpu_skus

    return load_gpu_skus(CATALOG / "gpus.yaml")


def cores() -> str:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{os.cpu_count()} cores ({usable} usable), load average {os.getloadavg()[0]:.2f}"


def walk(
    models: list[GridModel], gpus: list[GpuSku], options: GridOptions
) -> Iterator[tuple[GridModel, GpuSku, DeploymentSpec, int]]:
    """(model, GPU, deployment, context) in the grid's enumeration (PP = 1, vLLM, KV auto)."""
    for model in models:
        contexts = grid_contexts(model.spec.context_limit_tokens, options.min_context)
        for gpu in gpus:
            for weight_dtype, needs_fp8, needs_fp4 in weight_dtype_choices(model.spec, options.weight_dtypes):
                if (needs_fp8 and not gpu.fp8_support) or (needs_fp4 and not gpu.fp4_support):
                    continue
                for tp in options.tp_sizes:
                    try:
                        validate_parallelism(model.spec, tp, 1, gpu)
                    except SpecError:
                        continue
                    for context in contexts:
                        yield model, gpu, DeploymentSpec(tp=tp, weight_dtype=weight_dtype), context


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="time budget (default 10 s)")
    parser.add_argument("--all", action="store_true", help="walk everything, whatever it takes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    models, skipped = catalog_models()
    gpus = catalog_gpus()
    cases = list(walk(models, gpus, GridOptions()))
    random.Random(args.seed).shuffle(cases)
    print(f"machine: {cores()}")
    print(f"catalog: {len(models)} models ({len(skipped)} refused by the parser), {len(gpus)} GPUs")
    print(f"walk: {len(cases):,} (model, GPU, dtype, TP, context) estimates")

    done = failed = 0
    start = time.perf_counter()
    deadline = start + args.seconds
    for model, gpu, deployment, context in cases:
        try:
            estimate(model.spec, deployment, gpu=gpu, model_name=model.repo_id,
                     checkpoint_bytes=model.checkpoint_bytes, context_tokens=context)  # fmt: skip
        except SpecError:
            failed += 1
        done += 1
        if not args.all and done % 256 == 0 and time.perf_counter() > deadline:
            break
    elapsed = time.perf_counter() - start
    print(
        f"scalar estimate: {done:,} in {elapsed:.2f} s = {done / elapsed:,.0f} estimates/s (one core; {failed} refused)"
    )


if __name__ == "__main__":
    main()
