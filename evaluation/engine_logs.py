"""capplan's SGLang and TensorRT-LLM profiles scored on public startup logs (evaluation/data/
sglang_public_measurements.yaml, trtllm_public_measurements.yaml).

Each row is predicted twice: with the release rules the log's version calls for (`version_aware`: an SGLang
release before 0.5 takes its own default `mem_fraction_static`) and, as the previous model, with the newest
modelled release's rules whatever the log says. Scored: the KV pool (SGLang: K size + V size; TensorRT-LLM:
"Allocated X GiB for max tokens in paged KV cache"), the KV tokens (`#tokens` / the count in brackets) and the
start decision (a server that started must be predicted as starting).

The one fitted term of the SGLang profile, the non-KV bytes its fraction does not leave free
(`engine_constants.SGLANG_CONTEXT_BYTES`), is scored leave-one-source-out like the vLLM overhead terms
(`overhead_cv.source_group`): a fold sets it to the median of what the other sources' logs imply
(predicted pool + shipped term - measured pool) and re-estimates the held-out rows with that overhead.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from capacity.dtypes import GIB
from capacity.engines import Engine
from capacity.engines import sglang_constants as sc
from capacity.engines.sglang import is_legacy_release, tp_switch_context_bytes
from capacity.estimate import Estimate, estimate
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec, SpecError
from evaluation.overhead_cv import Accuracy, accuracy, source_group

DATA_DIR = Path(__file__).resolve().parent / "data"
ENGINE_LOG_FILES = (DATA_DIR / "sglang_public_measurements.yaml", DATA_DIR / "trtllm_public_measurements.yaml")
# what a row's `features` may name, and why each makes the row unmodelled (scored, never fitted)
UNMODELLED_FEATURES = {
    "lora": "LoRA adapters and buffers",
    "cpu_offload": "CPU offload of weights or experts",
    "speculative": "speculative decoding draft model and its KV pool",
    "dp_attention": "DP attention (per-rank pools of a data-parallel attention group)",
    "max_tokens": "a max_tokens / max_total_tokens cap on the pool",
    "hybrid_mamba": "a hybrid model's Mamba / linear-attention state pool, which shares the static budget with the KV pool",
    "dsa": "DeepSeek sparse attention (an indexer key cache next to the MLA latent)",
    "amd_rocm": "an AMD ROCm build (no ROCm profile: HIP graphs, RCCL and ROCm's memory accounting)",
    "ascend_npu": "an Ascend NPU build (no NPU profile: NPU graphs and the NPU runtime's memory accounting)",
    "unified_memory": "unified CPU/GPU memory (Jetson, GB10): what is free is what the OS and other processes leave",
    "shared_gpu": "memory other processes held at load begin, which capplan cannot see",
    "memory_saver": "torch_memory_saver (--enable-memory-saver, which release/resume_memory_occupation need): weights and KV through its virtual-memory pools",
    "bench_one_batch": "sglang.bench_one_batch (a benchmark process, not a server)",
    "prebuilt_engine": "a prebuilt TensorRT engine (engine, runtime buffers and decoder memory)",
}
# tags that do not change what the engine allocates before serving (the row stays modelled)
NEUTRAL_FEATURES = {"block_reuse_off": "KV-cache block reuse off (it changes reuse, not the pool's size)"}

ResolveModel = Callable[[str], tuple[ModelSpec, int | None]]
ResolveGpu = Callable[[str], GpuSku]


@dataclass(frozen=True, slots=True)
class EngineLogRow:
    """One public startup log, in the fields the scorer needs (the yaml entry in `raw`)."""

    id: str
    group: str
    engine: Engine
    version: str | None
    era: str
    model: str
    gpu: str | None
    tp: int
    pp: int
    fraction: float | None
    kv_dtype: str
    context_length: int | None
    pool_bytes: int | None
    tokens: int | None
    outcome: str  # 'started', 'failed' (out of memory) or 'unknown' (not a start decision capplan can be held to)
    unmodelled: str | None
    start_note: str | None = None  # why the start decision is not scored, where it is not
    tokens_note: str | None = None  # why the logged token count is not scored, where it is not
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    # the checkpoint's weight format where it differs from `config_model`'s (a block-FP8 release of a bf16
    # config: the log's "quant=fp8"); "auto": the config's own
    weight_dtype: str = "auto"


def _era(entry: dict[str, Any]) -> str:
    """SGLang: '0.4' / '0.5' by the logged release (or `release_era` where the log implies it), else
    'unknown'; TensorRT-LLM: the backend ('pytorch' or 'tensorrt' engines)."""
    if Engine(entry["engine"]) is Engine.TRTLLM:
        return str(entry.get("backend") or "unknown")
    version = entry.get("sglang_version") or entry.get("rules_version")
    if version:
        return "0.4" if is_legacy_release(str(version)) else "0.5"
    return str(entry.get("release_era") or "unknown")


def _unmodelled(entry: dict[str, Any]) -> str | None:
    reasons: list[str] = []
    for tag in entry.get("features") or []:
        if tag in UNMODELLED_FEATURES:
            reasons.append(UNMODELLED_FEATURES[tag])
        elif tag not in NEUTRAL_FEATURES:
            reasons.append(f"unrecognised feature tag {str(tag)[:40]!r}")
    if entry.get("max_tokens"):
        reasons.append(UNMODELLED_FEATURES["max_tokens"])
    if Engine(entry["engine"]) is Engine.TRTLLM and entry.get("backend") == "tensorrt":
        reasons.append(UNMODELLED_FEATURES["prebuilt_engine"])
    return "; ".join(dict.fromkeys(reasons)) or None


def _outcome(entry: dict[str, Any]) -> tuple[str, str | None]:
    """The start outcome the decision is scored against, and why it is not scored where it is not: a server
    that started ('started', 'started; later ...'), one that ran out of memory starting ('oom', 'failed'), or
    neither: an error after the KV pool was allocated (a kernel or graph-capture failure says nothing about
    memory), a failure the row marks as the engine's (`start_not_scored`), or no outcome."""
    text = str(entry.get("outcome") or "unknown").strip()
    if entry.get("start_not_scored"):
        return "unknown", str(entry["start_not_scored"])
    if text.startswith("started"):
        return "started", None
    if text.startswith(("oom", "failed")):
        return "failed", None
    if text.startswith("error"):
        return "unknown", f"not a memory failure: {text}"
    return "unknown", f"outcome {text[:60]!r}"


def _pool_bytes(entry: dict[str, Any]) -> int | None:
    """The KV pool as logged: SGLang K size + V size, or the one "KV size" of an MLA / DSA pool; TensorRT-LLM
    "Allocated X GiB for max tokens in paged KV cache", or the bytes of "Allocate N bytes for k/v cache" (<= 0.9)."""
    if Engine(entry["engine"]) is Engine.SGLANG:
        k, v, kv = entry.get("k_size_gb"), entry.get("v_size_gb"), entry.get("kv_size_gb")
        if k is not None and v is not None:
            return round((float(k) + float(v)) * GIB)
        return round(float(kv) * GIB) if kv is not None else None
    gib, exact = entry.get("kv_cache_gib"), entry.get("kv_cache_bytes")
    if gib is not None:
        return round(float(gib) * GIB)
    return int(exact) if exact is not None else None


def load_engine_logs(paths: Sequence[Path] = ENGINE_LOG_FILES) -> list[EngineLogRow]:
    rows: list[EngineLogRow] = []
    for path in paths:
        for entry in yaml.safe_load(path.read_text(encoding="utf-8"))["measurements"]:
            engine = Engine(entry["engine"])  # the edge: the yaml's engine name becomes an Engine
            sglang = engine is Engine.SGLANG
            tokens = entry.get("max_total_num_tokens" if sglang else "kv_cache_tokens")
            fraction = entry.get("mem_fraction_static" if sglang else "free_gpu_memory_fraction")
            outcome, start_note = _outcome(entry)
            tokens_note = entry.get("tokens_not_scored")
            rows.append(
                EngineLogRow(
                    id=str(entry["id"]),
                    group=source_group(str(entry["source"]), str(entry["id"])),
                    engine=engine,
                    version=entry.get("sglang_version" if sglang else "trtllm_version"),
                    era=_era(entry),
                    model=str(entry.get("config_model") or entry.get("model") or ""),
                    gpu=entry.get("catalog_gpu") or entry.get("gpu"),
                    tp=int(entry.get("tensor_parallel_size") or 0),
                    pp=int(entry.get("pipeline_parallel_size") or 1),
                    fraction=float(fraction) if fraction is not None and entry.get("mem_fraction_static_stated", True)
                    else None,
                    kv_dtype=str(entry.get("kv_cache_dtype") or "auto"),
                    context_length=entry.get("context_length"),
                    pool_bytes=_pool_bytes(entry),
                    tokens=int(tokens) if tokens is not None and not tokens_note else None,
                    outcome=outcome,
                    unmodelled=_unmodelled(entry),
                    start_note=start_note,
                    tokens_note=str(tokens_note) if tokens_note else None,
                    raw=entry,
                    weight_dtype=str(entry.get("weight_dtype") or "auto"),
                )
            )
    return rows


def _version(row: EngineLogRow, version_aware: bool) -> str | None:
    """The release whose rules predict the row: the logged one, else `rules_version` (a release whose rules
    every release the log's date allows shares, e.g. 0.4.10 for August 2025: 0.4.10 and 0.5.0rc both take the
    tiered default fraction), else a representative of its era."""
    if not version_aware or row.engine != Engine.SGLANG:
        return None
    if row.version:
        return row.version
    if row.raw.get("rules_version"):
        return str(row.raw["rules_version"])
    return "0.4" if row.era == "0.4" else None


@dataclass(frozen=True, slots=True)
class Scored:
    row: EngineLogRow
    predicted: Estimate | None
    skipped: str | None = None
    link_bytes: int = 0  # the part of SGLang's non-KV term the GPU's links set (not refit: read off two logs)

    def _error(self, measured: int | None, predicted: int | None) -> float | None:
        if not measured or predicted is None:
            return None
        return (predicted - measured) / measured

    @property
    def pool_error(self) -> float | None:
        if self.predicted is None:
            return None
        return self._error(self.row.pool_bytes, self.predicted.kv_budget_bytes_per_gpu)

    @property
    def tokens_error(self) -> float | None:
        if self.predicted is None:
            return None
        return self._error(self.row.tokens, self.predicted.kv_cache_tokens)

    @property
    def start_correct(self) -> bool | None:
        """A started server predicted as starting, a failed one as not (None: outcome or prediction unknown)."""
        if self.predicted is None or self.row.outcome not in ("started", "failed"):
            return None
        return self.predicted.starts == (self.row.outcome == "started")


def predict(
    row: EngineLogRow,
    resolve_model: ResolveModel,
    resolve_gpu: ResolveGpu,
    *,
    version_aware: bool = True,
    overhead_bytes: int | None = None,
) -> Scored:
    """capplan's estimate of one logged deployment (a skip reason where the log does not say the model, GPU
    or TP size, or the catalog lacks the model or GPU)."""
    if not row.model:
        return Scored(row, None, "model not stated in the log")
    if not row.gpu:
        return Scored(row, None, "GPU not stated in the log")
    if row.tp < 1:
        return Scored(row, None, "tensor-parallel size not stated in the log")
    try:
        spec, checkpoint = resolve_model(row.model)
    except (LookupError, SpecError) as exc:
        return Scored(row, None, f"model not in catalog: {exc}")
    try:
        gpu = resolve_gpu(str(row.gpu or "").split("(")[0].strip())
    except LookupError:
        return Scored(row, None, f"unknown GPU {row.gpu!r}")
    link_bytes = tp_switch_context_bytes(row.tp, gpu.nvlink_multicast) if row.engine == Engine.SGLANG else 0
    deployment = DeploymentSpec(
        tp=row.tp,
        pp=row.pp,
        weight_dtype=row.weight_dtype,
        kv_dtype=row.kv_dtype,
        engine=row.engine,
        engine_version=_version(row, version_aware),
        gpu_memory_utilization=row.fraction,
        max_model_len=row.context_length,
        allow_long_max_model_len=True,  # the length the log shows the engine with: accepted, not refused
        overhead_bytes_per_gpu=None if overhead_bytes is None else overhead_bytes + link_bytes,
    )
    try:
        # a variant's own checkpoint is not the config repo's: its weights are modelled (as for the vLLM rows)
        checkpoint = None if row.raw.get("config_model") else checkpoint
        return Scored(
            row,
            estimate(spec, deployment, gpu=gpu, model_name=row.model, checkpoint_bytes=checkpoint),
            link_bytes=link_bytes,
        )
    except SpecError as exc:
        return Scored(row, None, f"cannot estimate: {exc}")


@dataclass(frozen=True, slots=True)
class EngineScores:
    """Per row: pool and token errors, and the start decision, of one way of predicting."""

    pool: dict[str, float | None]
    tokens: dict[str, float | None]
    starts: dict[str, bool | None]


def shipped_scores(
    rows: Sequence[EngineLogRow], resolve_model: ResolveModel, resolve_gpu: ResolveGpu, *, version_aware: bool = True
) -> tuple[list[Scored], EngineScores]:
    scored = [predict(r, resolve_model, resolve_gpu, version_aware=version_aware) for r in rows]
    return scored, EngineScores(
        {s.row.id: s.pool_error for s in scored},
        {s.row.id: s.tokens_error for s in scored},
        {s.row.id: s.start_correct for s in scored},
    )


def implied_overhead(s: Scored) -> int | None:
    """The SGLang non-KV term a log implies: what makes the predicted budget equal the measured pool, less the
    part the GPU's links set (`Scored.link_bytes`), which is not refit."""
    if s.predicted is None or s.row.pool_bytes is None or s.row.engine != Engine.SGLANG:
        return None
    return s.predicted.overhead_bytes_per_gpu - s.link_bytes + s.predicted.kv_budget_bytes_per_gpu - s.row.pool_bytes


def fitted_overhead(scored: Sequence[Scored]) -> int:
    """The SGLang term a refit on these rows gives (the median implied term; the shipped one without rows)."""
    implied = [o for s in scored if s.row.unmodelled is None and (o := implied_overhead(s)) is not None]
    return round(statistics.median(implied)) if implied else sc.SGLANG_CONTEXT_BYTES


def refit_scores(
    scored: Sequence[Scored],
    resolve_model: ResolveModel,
    resolve_gpu: ResolveGpu,
    *,
    cross_validated: bool,
    version_aware: bool = True,
) -> EngineScores:
    """SGLang rows re-estimated with the term refit on every row (in-sample) or on the other sources only
    (leave-one-source-out); TensorRT-LLM rows have no fitted term and keep their shipped figures."""
    pool: dict[str, float | None] = {}
    tokens: dict[str, float | None] = {}
    starts: dict[str, bool | None] = {}
    every = fitted_overhead(scored)
    for s in scored:
        if s.row.engine == Engine.SGLANG and s.predicted is not None:
            term = fitted_overhead([t for t in scored if t.row.group != s.row.group]) if cross_validated else every
            s = predict(s.row, resolve_model, resolve_gpu, version_aware=version_aware, overhead_bytes=term)
        pool[s.row.id], tokens[s.row.id], starts[s.row.id] = s.pool_error, s.tokens_error, s.start_correct
    return EngineScores(pool, tokens, starts)


def tags(row: EngineLogRow) -> tuple[str, ...]:
    """What a row is reported under: its engine, its engine and era, TP > 1; a row whose deployment uses
    what no profile sizes only under '<engine> not modelled' (as the vLLM tables do: scored, reported apart,
    never fitted), so the per-engine figures are those of the deployments capplan claims to size."""
    if row.unmodelled:
        return (f"{row.engine} not modelled",)
    out: tuple[str, ...] = (row.engine, f"{row.engine} {row.era}")
    return (*out, f"{row.engine} TP>1") if row.tp > 1 else out


def table(rows: Sequence[EngineLogRow], errors: dict[str, float | None]) -> dict[str, Accuracy]:
    names: list[str] = []
    for r in rows:
        names.extend(t for t in tags(r) if t not in names)
    return {t: accuracy(errors.get(r.id) for r in rows if t in tags(r)) for t in names}


def start_table(rows: Sequence[EngineLogRow], starts: dict[str, bool | None]) -> dict[str, tuple[int, int]]:
    """Per tag: (start decisions right, start decisions scored)."""
    out: dict[str, tuple[int, int]] = {}
    for r in rows:
        decision = starts.get(r.id)
        if decision is None:
            continue
        for t in tags(r):
            right, n = out.get(t, (0, 0))
            out[t] = (right + int(decision), n + 1)
    return out
