"""What a decode GEMM costs on each GPU, read from NVIDIA's published kernel tables (issue 21, item 2: step costs
from measured GEMM curves, without a GPU of our own).

    python tools/kernel_laws.py [--aic PATH] [--engine vllm] [--write]

AIConfigurator (NVIDIA, Apache-2.0) ships measured kernel latencies in `aiconfigurator-core` (0.12.0:
`aiconfigurator_core/systems/data/<gpu>/gemm/<engine>/<release>/gemm_perf.parquet`, columns m, n, k, gemm_dtype,
latency in ms). Get it without installing it: `pip download --no-deps aiconfigurator-core==0.12.0 -d DIR` and
unzip the wheel; `--aic` is the unzipped `aiconfigurator_core` folder.

A decode step's GEMMs have few rows (m = the tokens in the step) and read a whole weight matrix (n x k). Per GPU
and GEMM dtype, over the tables' shapes with m <= 16 and at least 1 MiB of weights, this fits

    latency = floor + weight bytes / (efficiency x the catalog's peak bandwidth)

by least squares (`fit_law`): `floor` is what every GEMM costs however small (launch, the kernel's own ramp), and
`efficiency` the share of the datasheet bandwidth a large matrix reaches. Large-m GEMMs (m >= 4,096, at least
64M weights) give the share of the catalog's dense peak FLOPS they reach. `--write` keeps the laws, with the
wheel, table and release each was read from, in evaluation/data/kernel_laws.yaml. Nothing in capplan reads the
file yet: it is the measured side of the step-cost study (README-perf-measurements.md, "Kernel tables").
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl
import yaml

from models_registry.sources.gpu_catalog import find_gpu_sku

LAWS_PATH = Path(__file__).resolve().parents[1] / "evaluation" / "data" / "kernel_laws.yaml"
AIC_VERSION = "0.12.0"
# AIConfigurator's system folder -> the catalog GPU whose datasheet peaks the shares are of
GPUS = {
    "a100_sxm": "a100-sxm-80gb",
    "h100_sxm": "h100-sxm-80gb",
    "h200_sxm": "h200-sxm-141gb",
    "b200_sxm": "b200-180gb",
    "gb200": "gb200",
    "l40s": "l40s-48gb",
    "rtx_pro_6000_server": "rtx-pro-6000-blackwell-server-96gb",
}
DTYPE_BYTES = {"bfloat16": 2.0, "fp8": 1.0}
DECODE_MAX_M = 16
MIN_WEIGHT_BYTES = 2**20
PREFILL_MIN_M = 4096
PREFILL_MIN_WEIGHTS = 64 * 2**20


@dataclass(frozen=True, slots=True)
class Law:
    """latency_s = floor_s + weight bytes / (efficiency x bandwidth): a decode GEMM on one GPU."""

    floor_s: float
    efficiency: float
    points: int


def fit_law(weight_bytes: Sequence[float], latency_s: Sequence[float], bandwidth_bytes_per_s: float) -> Law:
    """Least squares of latency on weight bytes: the intercept is the floor, the slope 1 / (efficiency x bandwidth)."""
    if len(weight_bytes) != len(latency_s) or len(weight_bytes) < 2:
        raise ValueError("a law needs at least two (bytes, latency) points")
    mean_x, mean_y = statistics.fmean(weight_bytes), statistics.fmean(latency_s)
    sxx = sum((x - mean_x) ** 2 for x in weight_bytes)
    if sxx == 0:
        raise ValueError("a law needs points of different sizes")
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(weight_bytes, latency_s, strict=True)) / sxx
    return Law(floor_s=mean_y - slope * mean_x, efficiency=1.0 / (slope * bandwidth_bytes_per_s), points=len(weight_bytes))


def _table(system: Path, engine: str) -> tuple[Path, str] | None:
    """The GEMM table of an engine's newest release in a system folder, and that release."""
    found = sorted((system / "gemm" / engine).glob("*/gemm_perf.parquet"))
    return (found[-1], found[-1].parent.name) if found else None


def gpu_laws(system: Path, engine: str) -> dict[str, Any] | None:
    """The decode laws and large-GEMM compute shares of one GPU (None: no table for the engine), as the YAML keeps
    them: catalog_gpu, engine, release, table, and per GEMM dtype floor_us, bandwidth_share, points and
    large_gemm_flops_share."""
    table = _table(system, engine)
    catalog_id = GPUS.get(system.name)
    if table is None or catalog_id is None:
        return None
    gpu = find_gpu_sku(catalog_id)
    assert gpu is not None and gpu.memory_bandwidth_gbps and gpu.bf16_dense_tflops
    bandwidth = gpu.memory_bandwidth_gbps * 1e9
    rows = pl.read_parquet(table[0], columns=["gemm_dtype", "m", "n", "k", "latency"])
    laws: dict[str, dict[str, Any]] = {}
    for dtype, element in DTYPE_BYTES.items():
        peak = (gpu.fp8_dense_tflops if dtype == "fp8" else gpu.bf16_dense_tflops) or 0.0
        part = rows.filter(pl.col("gemm_dtype") == dtype).with_columns(
            (pl.col("n") * pl.col("k") * element).alias("bytes"), (pl.col("latency") / 1e3).alias("seconds")
        )
        decode = part.filter((pl.col("m") <= DECODE_MAX_M) & (pl.col("bytes") >= MIN_WEIGHT_BYTES))
        if decode.height < 2:
            continue
        law = fit_law(decode["bytes"].to_list(), decode["seconds"].to_list(), bandwidth)
        entry: dict[str, Any] = {
            "floor_us": round(law.floor_s * 1e6, 2), "bandwidth_share": round(law.efficiency, 3), "points": law.points,
        }  # fmt: skip
        big = part.filter((pl.col("m") >= PREFILL_MIN_M) & (pl.col("n") * pl.col("k") >= PREFILL_MIN_WEIGHTS))
        if peak and big.height:
            shares = (2.0 * big["m"] * big["n"] * big["k"] / big["seconds"] / (peak * 1e12)).to_list()
            entry["large_gemm_flops_share"] = round(statistics.median(shares), 3)
        laws[dtype] = entry
    if not laws:
        return None
    return {"catalog_gpu": catalog_id, "engine": engine, "release": table[1], "table": f"{system.name}/gemm/"
            f"{engine}/{table[1]}/gemm_perf.parquet", "laws": laws}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aic", type=Path, default=Path("/tmp/aic/x/aiconfigurator_core"),
                        help="the unzipped aiconfigurator_core folder of aiconfigurator-core 0.12.0")  # fmt: skip
    parser.add_argument("--engine", default="vllm", choices=("vllm", "sglang", "trtllm"))
    parser.add_argument("--write", action="store_true", help=f"keep the laws in {LAWS_PATH.name}")
    args = parser.parse_args()
    data = args.aic / "systems" / "data"
    if not data.is_dir():
        parser.exit(2, f"kernel_laws: error: {data} is not a folder of aiconfigurator-core {AIC_VERSION} tables\n")
    found = [laws for system in sorted(data.iterdir()) if (laws := gpu_laws(system, args.engine)) is not None]
    for entry in found:
        for dtype, law in entry["laws"].items():
            print(f"{entry['catalog_gpu']:38} {dtype:9} floor {law['floor_us']:6.2f} us  bandwidth share "
                  f"{law['bandwidth_share']:.3f}  large-GEMM FLOPS share {law.get('large_gemm_flops_share', '-')}"
                  f"  ({law['points']} shapes, {entry['engine']} {entry['release']})")  # fmt: skip
    if args.write:
        document = {
            "source": f"aiconfigurator-core {AIC_VERSION} (PyPI, NVIDIA, Apache-2.0): measured GEMM latencies",
            "fitted_by": "python tools/kernel_laws.py --write (fit_law: latency = floor + bytes / (share x bandwidth))",
            "decode_shapes": f"m <= {DECODE_MAX_M}, weights >= {MIN_WEIGHT_BYTES} bytes",
            "large_gemm_shapes": f"m >= {PREFILL_MIN_M}, n x k >= {PREFILL_MIN_WEIGHTS}",
            "gpus": found,
        }
        LAWS_PATH.write_text(yaml.safe_dump(document, sort_keys=False, width=120), encoding="utf-8")
        print(f"wrote {LAWS_PATH}")


if __name__ == "__main__":
    main()
