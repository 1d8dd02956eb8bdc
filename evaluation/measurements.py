"""Public vLLM startup-log measurements (evaluation/data/vllm_public_measurements.yaml) and how
capplan's predictions compare with them: the reference set behind the overhead fit and the
accuracy figures.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from capacity import engine_constants as ec
from capacity.calibration import ObservedSettings, engine_version_for, observed_deployment
from capacity.dtypes import GIB
from capacity.engines import Engine
from capacity.engines.command_line import read_command
from capacity.estimate import Estimate, estimate
from capacity.features.offload_sizing import kv_offload_for
from capacity.features.parallel_layout import expert_parallel_width
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec, SpecError

MEASUREMENTS_PATH = Path(__file__).resolve().parent / "data" / "vllm_public_measurements.yaml"


@dataclass(frozen=True, slots=True)
class Measurement:
    """One row of the public set, with the fields the comparison needs."""

    id: str
    model: str
    gpu: str | None
    vllm_version: str | None
    engine_generation: str
    tp: int
    pp: int
    quantization: str | None
    dtype: str | None
    kv_cache_dtype: str | None
    gpu_memory_utilization: float | None
    max_model_len: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    block_size: int | None
    enforce_eager: bool | None
    total_gpu_memory_gib: float | None
    weights_gib: float | None
    activation_peak_gib: float | None
    non_torch_gib: float | None
    cuda_graph_gib: float | None
    kv_cache_memory_gib: float | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    max_concurrency_tokens: int | None
    outcome: str | None
    raw: dict[str, Any]
    # a release the source implies without printing it (the row's `inferred:`, its evidence in `notes`):
    # used for the prediction, never reported as a stated version
    vllm_version_inferred: str | None = None
    triton_kernels: bool | None = None  # the log shows whether the optional package ran (DeploymentSpec.triton_kernels)
    # the catalog repo whose config.json the served checkpoint has, where `model` is a variant the catalog
    # lacks (an -Instruct-2507 or -it release of the same architecture; a quantized upload with `quantization`)
    config_model: str | None = None

    @property
    def config_repo(self) -> str:
        """The repo the prediction reads the architecture from: `config_model`, else the served `model`."""
        return self.config_model or self.model

    @property
    def prediction_version(self) -> str | None:
        """The release the prediction takes: the stated one, else the inferred one (None: neither)."""
        return self.vllm_version or self.vllm_version_inferred


def _clean_model(name: str) -> str:
    return re.sub(r"\s*\(.*\)\s*$", "", name).strip()


INFERRED_SETTINGS = frozenset({"vllm_version", "gpu_memory_utilization"})


def _inferred_settings(entry: dict[str, Any]) -> dict[str, Any]:
    """A row's `inferred:` block: settings its source implies but does not print (a release dated by the
    code paths it shows, a utilization its own figures add up to), kept apart from the copied numbers."""
    inferred = entry.get("inferred") or {}
    where = f"measurement {entry.get('id')}: inferred"
    if not isinstance(inferred, dict) or set(inferred) - INFERRED_SETTINGS:
        raise ValueError(f"{where} must be a mapping of {sorted(INFERRED_SETTINGS)}")
    version = inferred.get("vllm_version")
    if version is not None:
        try:
            if not isinstance(version, str):
                raise ValueError
            ec.parse_version(version)
        except ValueError:
            raise ValueError(f"{where}.vllm_version must be a quoted release like '0.12', got {version!r}") from None
    util = inferred.get("gpu_memory_utilization")
    if util is not None and (isinstance(util, bool) or not isinstance(util, int | float) or not 0 < util <= 1):
        raise ValueError(f"{where}.gpu_memory_utilization must be a number in (0, 1], got {util!r}")
    return inferred


def _stated_flag(entry: dict[str, Any], key: str) -> bool | None:
    """A yes/no the row states (absent or null: not said); anything else is a data error, said in one line."""
    value = entry.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"measurement {entry.get('id')}: {key} must be true, false or null, got {value!r}")


def load_measurements(path: Path = MEASUREMENTS_PATH) -> list[Measurement]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    rows: list[Measurement] = []
    for entry in document["measurements"]:
        inferred = _inferred_settings(entry)
        # `quoted_rank: non_driver`: the profiling line quoted is a worker that does not bound the pool (V0 at
        # TP > 1: only the driver samples, and vLLM keeps the minimum over workers, the driver's): its KV memory and
        # activation peak are not the pool's (its weights and non-torch memory are the same on every rank)
        bounds_pool = entry.get("quoted_rank") != "non_driver"
        rows.append(
            Measurement(
                id=entry["id"],
                model=_clean_model(str(entry.get("model") or "")),
                gpu=entry.get("gpu"),
                vllm_version=str(entry["vllm_version"]) if entry.get("vllm_version") else None,
                engine_generation=str(entry.get("engine_generation") or "v1"),
                tp=int(entry.get("tensor_parallel_size") or 1),
                pp=int(entry.get("pipeline_parallel_size") or 1),
                quantization=entry.get("quantization"),
                dtype=entry.get("dtype"),
                kv_cache_dtype=entry.get("kv_cache_dtype"),
                gpu_memory_utilization=inferred.get("gpu_memory_utilization", entry.get("gpu_memory_utilization")),
                max_model_len=entry.get("max_model_len"),
                max_num_seqs=entry.get("max_num_seqs"),
                max_num_batched_tokens=entry.get("max_num_batched_tokens"),
                block_size=entry.get("block_size"),
                enforce_eager=bool(entry["enforce_eager"]) if entry.get("enforce_eager") is not None else None,
                total_gpu_memory_gib=entry.get("total_gpu_memory_gib"),
                weights_gib=entry.get("weights_gib"),
                activation_peak_gib=entry.get("activation_peak_gib") if bounds_pool else None,
                non_torch_gib=entry.get("non_torch_gib"),
                cuda_graph_gib=entry.get("cuda_graph_gib"),
                kv_cache_memory_gib=entry.get("kv_cache_memory_gib") if bounds_pool else None,
                kv_cache_tokens=entry.get("kv_cache_tokens"),
                max_concurrency=entry.get("max_concurrency"),
                max_concurrency_tokens=entry.get("max_concurrency_tokens"),
                outcome=entry.get("outcome"),
                raw=entry,
                vllm_version_inferred=inferred.get("vllm_version"),  # a release string (`_inferred_settings`)
                triton_kernels=_stated_flag(entry, "triton_kernels"),
                config_model=_clean_model(str(entry["config_model"])) if entry.get("config_model") else None,
            )
        )
    return rows


def measurement_version(row: Measurement) -> str:
    """The row's vLLM version; when unstated, a representative release of its generation
    (`capacity.calibration.engine_version_for`)."""
    return engine_version_for(row.prediction_version, row.engine_generation)


def deployment_for(row: Measurement, model: ModelSpec) -> DeploymentSpec:
    """The deployment a log describes, in capplan's terms (unknown settings left to defaults);
    the same mapping telemetry observations go through (`capacity.calibration.observed_deployment`)."""
    return observed_deployment(
        model,
        ObservedSettings(
            tp=row.tp,
            pp=row.pp,
            dtype=row.dtype,
            quantization=row.quantization,
            kv_cache_dtype=row.kv_cache_dtype,
            engine="vllm",
            engine_version=row.prediction_version,
            engine_generation=row.engine_generation,
            triton_kernels=row.triton_kernels,
            gpu_memory_utilization=row.gpu_memory_utilization,
            max_model_len=row.max_model_len,
            max_num_seqs=row.max_num_seqs,
            max_num_batched_tokens=row.max_num_batched_tokens,
            block_size=row.block_size,
            total_gpu_memory_bytes=round(row.total_gpu_memory_gib * GIB) if row.total_gpu_memory_gib else None,
            enforce_eager=row.enforce_eager,
        ),
    )


def feature_deployment(row: Measurement, deployment: DeploymentSpec) -> DeploymentSpec:
    """The serving features the row ran with (`feature_command`: the flags its log shows) on its deployment, so the
    feature rules size it as `capplan estimate --from-command` does: DP ranks, the EP width, a KV connector; the
    parameters the row states, the engine's defaults for the rest (tools/feature_accuracy.py reports them)."""
    text = row.raw.get("feature_command")
    if not text:
        return deployment
    options = read_command(str(text), row.prediction_version).options
    dp = int(str(options.get("dp") or 1))
    wide = options.get("enable_expert_parallel")
    ep = expert_parallel_width(Engine.VLLM, deployment.tp, dp) if wide else int(str(options.get("ep") or 1))
    transfer = options.get("kv_transfer_config")
    connector = json.loads(str(transfer))["kv_connector"] if transfer else None
    return replace(deployment, dp=dp, ep=ep, kv_offload=kv_offload_for(Engine.VLLM, connector=connector))


@dataclass(frozen=True, slots=True)
class Comparison:
    row: Measurement
    predicted: Estimate | None
    skipped: str | None = None

    def error(self, measured: float | None, predicted: float | None) -> float | None:
        if measured is None or predicted is None or measured == 0:
            return None
        return (predicted - measured) / measured

    @property
    def kv_pool_error(self) -> float | None:
        if self.predicted is None or self.row.kv_cache_memory_gib is None:
            return None
        return self.error(self.row.kv_cache_memory_gib * GIB, self.predicted.kv_budget_bytes_per_gpu)

    @property
    def kv_tokens_error(self) -> float | None:
        if self.predicted is None or self.row.kv_cache_tokens is None:
            return None
        return self.error(self.row.kv_cache_tokens, self.predicted.kv_cache_tokens)


def compare(
    rows: list[Measurement],
    resolve_model: Any,
    resolve_gpu: Any,
    *,
    dp_rows: bool = False,
) -> list[Comparison]:
    """Predict every row with capplan. `resolve_model(repo_id) -> (ModelSpec, checkpoint_bytes)` and
    `resolve_gpu(name) -> GpuSku` raise LookupError for what the catalog does not know. `dp_rows`: also the
    rows that ran engine DP ranks, sized by the DP / EP rules from their `feature_command` (the overhead study
    leaves them out: its terms are a single rank's)."""
    results: list[Comparison] = []
    for row in rows:
        gpus = row.raw.get("num_gpus_total")
        if isinstance(gpus, int) and gpus > row.tp * row.pp and not (dp_rows and row.raw.get("feature_command")):
            results.append(Comparison(row, None, f"data/expert parallel over {gpus} GPUs is not modeled"))
            continue
        try:
            spec, checkpoint = resolve_model(row.config_repo)
        except (LookupError, SpecError) as exc:
            results.append(Comparison(row, None, f"model not in catalog: {exc}"))
            continue
        gpu: GpuSku | None = None
        if row.gpu:
            try:
                gpu = resolve_gpu(str(row.raw.get("feature_gpu") or _clean_gpu(row.gpu)))
            except LookupError:
                gpu = None
        deployment = feature_deployment(row, deployment_for(row, spec))
        if gpu is None and deployment.gpu_memory_bytes is None:
            results.append(Comparison(row, None, f"unknown GPU {row.gpu!r}"))
            continue
        try:
            predicted = estimate(
                spec,
                deployment,
                gpu=gpu,
                model_name=row.model,
                # a variant's own checkpoint is not the config repo's: its weights are modelled
                checkpoint_bytes=None if row.config_model else checkpoint,
                context_tokens=row.max_concurrency_tokens or row.max_model_len,
            )
        except SpecError as exc:
            results.append(Comparison(row, None, f"cannot estimate: {exc}"))
            continue
        results.append(Comparison(row, predicted))
    return results


def _clean_gpu(name: str) -> str:
    cleaned = re.sub(r"\s*\(.*\)\s*$", "", name).strip()
    return re.sub(r"\s+\d+\s*MiB$", "", cleaned)


@dataclass(frozen=True, slots=True)
class AccuracySummary:
    n: int
    median_abs_error: float
    within_5pct: float


def summarize(errors: list[float]) -> AccuracySummary:
    if not errors:
        return AccuracySummary(0, float("nan"), float("nan"))
    absolute = [abs(e) for e in errors]
    return AccuracySummary(len(errors), statistics.median(absolute), sum(a <= 0.05 for a in absolute) / len(absolute))
