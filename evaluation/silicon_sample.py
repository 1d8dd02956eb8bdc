"""A second blind speed set: NVIDIA's measured TTFT / TPOT of aggregated serving runs (evaluation/data/
aic_silicon_agg.csv), read as `PerfMeasurement` rows so the holdout's scorer predicts them unchanged.

The file is the `mode == agg` part of `aiconfigurator_core/systems/silicon_sample.csv` in aiconfigurator-core
0.12.0 (PyPI, NVIDIA, Apache-2.0; the wheel's sha256 is `WHEEL_SHA256`): 3,619 runs of vLLM 0.11-0.19, SGLang
0.5.1-0.5.10 and TensorRT-LLM 0.7-1.3 on H100, H200, B200, B300 and GB200, each one deployment (TP, attention DP,
expert parallel, weight precision) at a fixed client concurrency with fixed input and output lengths, and the
mean TTFT and TPOT it measured. It was never fitted on (capacity/performance.py's factors come from
perf_measurements.yaml alone); runs that repeat a reference row's configuration are left out (`overlaps`).

What a run does not state, capplan assumes as a new user's command would: the KV cache dtype (the engine's
default), the engine release (capplan's newest), and no speculative decoding. Runs capplan cannot take as stated are
skipped with the reason: a model not in the catalog (GLM-5, Qwen3.5), a DP-attention or expert-parallel layout (the
scorer sizes TP only), an NVFP4 copy of a checkpoint that ships in another format, a GPU not in the catalog.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from evaluation.perf_measurements import PerfMeasurement

SILICON_PATH = Path(__file__).resolve().parent / "data" / "aic_silicon_agg.csv"
WHEEL = "aiconfigurator_core-0.12.0-cp311-abi3-manylinux_2_28_x86_64.whl"
WHEEL_SHA256 = "aadc4aad0a00bf8a61c477c62bef43de479849c3aa0b1c3078068e08309eccc4"
SOURCE = f"{WHEEL} (PyPI aiconfigurator-core 0.12.0), aiconfigurator_core/systems/silicon_sample.csv, mode agg"
FAMILY = "NVIDIA aiconfigurator-core silicon_sample"

GPUS = {
    "h100_sxm": "h100-sxm-80gb",
    "h200_sxm": "h200-sxm-141gb",
    "b200_sxm": "b200-180gb",
    "b300_sxm": "b300-288gb",
    "gb200": "gb200",
}
# the run's model -> (the catalog config sized, whether it is that model's own); None: not in the catalog
MODELS: dict[str, tuple[str, bool] | None] = {
    "deepseek-ai/DeepSeek-R1": ("deepseek-ai/DeepSeek-R1", True),
    "deepseek-ai/DeepSeek-V3": ("deepseek-ai/DeepSeek-V3", True),
    "openai/gpt-oss-120b": ("openai/gpt-oss-120b", True),
    "meta-llama/Llama-3.1-70B": ("meta-llama/Llama-3.1-70B-Instruct", False),  # the same layers
    "meta-llama/Llama-3.1-8B-Instruct": ("meta-llama/Llama-3.1-8B-Instruct", True),
    "nvidia/Llama-3.1-8B-Instruct-FP8": ("meta-llama/Llama-3.1-8B-Instruct", False),  # served as --dtype fp8
    "Qwen/Qwen3-32B": ("Qwen/Qwen3-32B", True),
    "Qwen/Qwen3-235B-A22B-FP8": ("Qwen/Qwen3-235B-A22B-FP8", True),
    "MiniMaxAI/MiniMax-M2.5": ("MiniMaxAI/MiniMax-M2", False),  # M2's architecture and FP8 checkpoint
    "moonshotai/Kimi-K2.5": None,  # a vision tower and INT4 experts the catalog's Kimi-K2 lacks
    "zhipuai/GLM-5": None,
    "Qwen/Qwen3.5-397B-A17B": None,
    "nvidia/DeepSeek-R1-NVFP4": None,
    "nvidia/DeepSeek-V3.1-NVFP4": None,
    "nvidia/Qwen3-32B-NVFP4": ("Qwen/Qwen3-32B", False),  # served as --dtype nvfp4
}
# checkpoints that ship quantized: a run at another precision serves another checkpoint, not in the catalog
NATIVE_PRECISION = {
    "deepseek-ai/DeepSeek-R1": "fp8",
    "deepseek-ai/DeepSeek-V3": "fp8",
    "Qwen/Qwen3-235B-A22B-FP8": "fp8",
    "MiniMaxAI/MiniMax-M2.5": "fp8",
    "openai/gpt-oss-120b": "fp4",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "fp8",
    "nvidia/Qwen3-32B-NVFP4": "fp4",
}
PRECISION = {"fp8": "fp8", "fp4": "nvfp4", "bf16": "bf16", "int4": "int4"}


@dataclass(frozen=True, slots=True)
class SiliconSkip:
    row_id: str
    reason: str


def _int(value: str) -> int | None:
    """A CSV cell as an integer ("8", "8.0"); None where it is empty."""
    return int(float(value)) if value else None


def _release(value: str) -> str | None:
    """A numbered release ("0.19.0", "1.2.0rc6.post2"), else None (nightly and branch builds)."""
    return value if value[:1].isdigit() else None


def read_silicon(path: Path = SILICON_PATH) -> tuple[list[PerfMeasurement], list[SiliconSkip]]:
    """The runs capplan can size as stated, as serving rows at a fixed concurrency; the others with a reason."""
    rows: list[PerfMeasurement] = []
    skipped: list[SiliconSkip] = []
    with path.open(newline="", encoding="utf-8") as handle:
        for raw in csv.DictReader(handle):
            found = _row(raw)
            if isinstance(found, SiliconSkip):
                skipped.append(found)
            else:
                rows.append(found)
    return rows, skipped


def _row(raw: dict[str, str]) -> PerfMeasurement | SiliconSkip:
    run, model = raw["id"], raw["model_path"]
    mapped = MODELS.get(model)
    if mapped is None:
        return SiliconSkip(run, f"{model} is not in capplan's catalog (nor a checkpoint of the same layers)")
    gpu = GPUS.get(raw["system"])
    if gpu is None:
        return SiliconSkip(run, f"GPU {raw['system']} is not in capplan's catalog")
    tp, dp, ep = _int(raw["tp_size"]) or 1, _int(raw["attention_dp_size"]) or 1, _int(raw["moe_ep_size"]) or 1
    if dp > 1 or ep > 1:
        return SiliconSkip(run, f"attention DP {dp} x expert parallel {ep}: the scorer sizes tensor parallel only")
    precision = (raw["precision"] or "").lower()
    native = NATIVE_PRECISION.get(model)
    if native and precision and precision != native:
        return SiliconSkip(run, f"{model} at {precision}: a {precision} copy of a {native} checkpoint, not in the catalog")
    config, own = mapped
    concurrency = _int(raw["batch_size"])
    return PerfMeasurement(
        id=f"aic-silicon-{run}",
        source=f"{SOURCE}, id {run} ({raw['silicon_data_source'].split(';')[0]})",
        source_group=f"aic-silicon-{raw['system']}-{raw['backend']}",
        source_family=FAMILY,
        engine=raw["backend"],
        engine_version=_release(raw["backend_version"] or ""),
        benchmark_kind="serving",
        model=model,
        model_in_catalog=own,
        catalog_model=None if own else config,
        gpu=gpu,
        tp=tp,
        pp=_int(raw["pp_size"]) or 1,
        num_gpus=tp,
        weight_dtype=PRECISION.get(precision) if precision and not native else None,
        dataset="random",
        input_len=_int(raw["isl"]),
        output_len=_int(raw["osl"]),
        concurrency=concurrency,
        mean_ttft_ms=float(raw["silicon_ttft_ms"]),
        mean_tpot_ms=float(raw["silicon_tpot_ms"]),
    )


def _key(row: PerfMeasurement) -> tuple[object, ...]:
    return (row.config_model, row.gpu, row.engine, row.tp, row.input_len, row.output_len, row.effective_concurrency)


def overlaps(rows: Sequence[PerfMeasurement], reference: Iterable[PerfMeasurement]) -> set[str]:
    """Ids of runs whose configuration (model, GPU, engine, TP, lengths, concurrency) a reference row measured."""
    seen = {_key(row) for row in reference}
    return {row.id for row in rows if _key(row) in seen}
