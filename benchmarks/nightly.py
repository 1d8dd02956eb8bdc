"""The whole nightly on a fleet-sized catalog: time, peak memory and history bytes per run.

The catalog is the bundled one made `--copies` times larger (default 10: 690 models) by renamed
copies: copy k of `org/name` is `org/name-copy<k>` with its own copy of the config (and of the
safetensors index), the same family and GPUs; copy 0 keeps the real name. Deterministic: the same
catalog on every machine.

Each path runs three nights in a fresh directory, each `capplan nightly` in a process of its own:
1. cold: an empty warehouse;
2. unchanged: the same catalog again;
3. one model changed: one copy's config edited (max_position_embeddings halved).
For each night: wall seconds, peak RSS of the nightly process (`ru_maxrss`), and the warehouse's
growth (bytes per run of history: nights 2 and 3 against the one before, history kept in full).

The same-run baseline is the nightly as it was before the partitioned grid (`--baseline-ref`,
default BASELINE_REF, extracted with `git archive` into a temporary directory and run from
there with the same venv). `--skip-baseline` runs the current code only.

    .venv/bin/python -m benchmarks.nightly [--copies 10] [--baseline-ref REF] [--skip-baseline] [--keep DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import yaml

from models_registry.sources.bundled import CATALOG_DIR

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BASELINE_REF = "6e35d61"  # the nightly before the partitioned grid (one grid build, history by run)
NIGHTS = ("cold", "unchanged", "one model changed")
GIB = 1024**3

# Runs the nightly in a child and reports the child's wall time and peak RSS (the measuring process
# itself stays small: RUSAGE_CHILDREN is the largest waited-for descendant).
_MEASURE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - start
print(json.dumps({"rc": done.returncode, "wall_s": wall,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
                  "tail": (done.stdout + done.stderr)[-3000:]}))
"""


def synthesize_catalog(dest: Path, copies: int) -> int:
    """The bundled catalog times `copies` under `dest`; returns the number of models."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copyfile(CATALOG_DIR / "gpus.yaml", dest / "gpus.yaml")
    catalog = yaml.safe_load((CATALOG_DIR / "models.yaml").read_text(encoding="utf-8"))
    entries: list[dict[str, Any]] = []
    for k in range(copies):
        for original in catalog["models"]:
            entry = dict(original)
            if k:
                entry["repo_id"] = f"{original['repo_id']}-copy{k}"
            for field in ("config", "safetensors_index"):
                if not original.get(field):
                    continue
                source = Path(original[field])
                relative = source.parent.with_name(source.parent.name + (f"-copy{k}" if k else "")) / source.name
                target = dest / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(CATALOG_DIR / source, target)
                entry[field] = relative.as_posix()
            entries.append(entry)
    catalog["models"] = entries
    (dest / "models.yaml").write_text(yaml.safe_dump(catalog, sort_keys=False), encoding="utf-8")
    return len(entries)


def edit_one_model(catalog: Path) -> str:
    """Night 3's registry change: the last copy of the first model with a context limit, halved."""
    entries = yaml.safe_load((catalog / "models.yaml").read_text(encoding="utf-8"))["models"]
    for entry in reversed(entries):
        path = catalog / entry["config"]
        config = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(config.get("max_position_embeddings"), int) and config["max_position_embeddings"] >= 8192:
            config["max_position_embeddings"] //= 2
            path.write_text(json.dumps(config, indent=2), encoding="utf-8")
            return str(entry["repo_id"])
    raise RuntimeError("no model with max_position_embeddings in the catalog")


def extract(ref: str, dest: Path) -> Path:
    """The project at git ref `ref`, as files under `dest` (no .git)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref], cwd=PROJECT_ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def night(code: Path, workdir: Path, catalog: Path) -> dict[str, Any]:
    """One `capplan nightly` of the code at `code`, from `workdir` (its var/ holds the warehouse)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAPPLAN_", "DAGSTER_HOME"))}
    env |= {"PYTHONPATH": str(code), "CAPPLAN_CATALOG_DIR": str(catalog)}
    command = [sys.executable, "-c", "from pipelines.cli import app; app()", "nightly"]
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command], cwd=workdir, env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["rc"] != 0:
        raise RuntimeError(f"nightly failed (exit {result['rc']}):\n{result['tail']}")
    warehouse = workdir / "var" / "warehouse.duckdb"
    result["warehouse_bytes"] = warehouse.stat().st_size
    con = duckdb.connect(str(warehouse), read_only=True)
    try:  # blocks in use: the file keeps freed blocks for reuse, so its size alone hides what history adds
        block_size, used = con.execute("select block_size, used_blocks from pragma_database_size()").fetchone()  # type: ignore[misc]
    finally:
        con.close()
    result["used_bytes"] = int(block_size) * int(used)
    return result


def run_path(label: str, code: Path, root: Path, copies: int) -> list[dict[str, Any]]:
    """Three nights of one code path in a fresh directory, each with its own copy of the catalog."""
    workdir = root / label
    workdir.mkdir(parents=True)
    catalog = workdir / "catalog"
    models = synthesize_catalog(catalog, copies)
    results = []
    for name in NIGHTS:
        edited = edit_one_model(catalog) if name == "one model changed" else None
        result = night(code, workdir, catalog)
        result |= {"night": name, "models": models, "edited": edited}
        print(
            f"  {label:<12} {name:<18} {result['wall_s']:7.1f} s  peak RSS {result['peak_rss_bytes'] / GIB:5.3f} GiB  "
            f"warehouse {result['warehouse_bytes'] / 1e6:7.1f} MB ({result['used_bytes'] / 1e6:.1f} MB in use)"
            + (f"  (edited {edited})" if edited else ""),
            flush=True,
        )
        results.append(result)
    return results


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=10, help="catalog copies (10: 690 models)")
    parser.add_argument("--baseline-ref", default=BASELINE_REF, help="git ref of the baseline nightly")
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--keep", type=Path, help="keep the run directories here (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.copies < 1:
        parser.error("--copies must be >= 1")
    print(f"cores {os.cpu_count()}, load average {load()} (1, 5, 15 min)")
    root = args.keep or Path(tempfile.mkdtemp(prefix="capplan-nightly-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        paths: dict[str, list[dict[str, Any]]] = {}
        if not args.skip_baseline:
            code = extract(args.baseline_ref, root / "baseline-code")
            paths[f"baseline {args.baseline_ref}"] = run_path("baseline", code, root, args.copies)
        paths["partitioned"] = run_path("partitioned", PROJECT_ROOT, root, args.copies)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"load average after {load()}")
    print()
    print(f"| night ({paths['partitioned'][0]['models']} models) | " + " | ".join(paths) + " |")
    print("|---|" + "---|" * len(paths))
    for i, name in enumerate(NIGHTS):
        cells = [f"{r[i]['wall_s']:.1f} s, {r[i]['peak_rss_bytes'] / GIB:.3f} GiB" for r in paths.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for i in (1, 2):
        cells = [
            f"{(r[i]['used_bytes'] - r[i - 1]['used_bytes']) / 1e6:+.1f} MB in use, "
            f"file {(r[i]['warehouse_bytes'] - r[i - 1]['warehouse_bytes']) / 1e6:+.1f} MB"
            for r in paths.values()
        ]
        print(f"| history bytes of night {i + 1} ({NIGHTS[i]}) | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
