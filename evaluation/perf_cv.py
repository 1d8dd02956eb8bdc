"""The performance model against public benchmark measurements (evaluation/data/perf_measurements.yaml).

Turns each measured row into `capacity.perf_fit` observations (the deployment sized by
`capacity.estimate.estimate`, the step terms by `capacity.performance`), then reports in-sample and
leave-one-source-group-out accuracy per metric, engine and GPU class (`tools/perf_fit.py` prints it).
A row capplan cannot size (model or GPU not in the catalog, no bandwidth / FLOPS, does not fit,
unbounded concurrency) is skipped with a one-line reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cache
from typing import NamedTuple, TypeVar

import numpy as np

from capacity.estimate import Estimate, estimate
from capacity.numeric import cdiv
from capacity.perf_fit import Accuracy, Observation, Params, StepTerms, accuracy, fit, leave_one_group_out, predict
from capacity.performance import (
    PerfEfficiency,
    PerfInputs,
    allreduce_seconds,
    perf_inputs,
    step_bytes,
    step_flops,
    vendor_class,
)
from capacity.serving.closed_loop import waited_share, wave_mean_steps, wave_share
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec, SpecError
from evaluation.perf_measurements import PerfMeasurement, load_perf_measurements

_LATENCY_ONLY = PerfEfficiency(memory_bandwidth=1.0, compute=1.0, step_overhead_s=0.0)
_TRTLLM_CHUNK = 8192  # max_num_tokens default
# a capped client concurrency at an unlimited rate is observed as the closed loop `capplan estimate --concurrency`
# reports (`capacity.serving.closed_loop`, held to the simulation): the factors are fitted on what it prints
CLOSED_LOOP_OBSERVATIONS = True


@dataclass(frozen=True, slots=True)
class Skipped:
    row_id: str
    reason: str


def run_checkpoint(row: PerfMeasurement, model: ModelSpec) -> ModelSpec:
    """The spec of the checkpoint the row ran: its catalog model, or where that is a quantized repackaging of another
    checkpoint that the run states it served in 16 bits, the architecture alone (no quantization: neither the proxy's
    weight format nor the KV cache it declares is the run's)."""
    stated = (row.weight_dtype or "").lower()
    sixteen_bit = stated.startswith(("bf16", "fp16", "float16", "bfloat16"))
    if model.quantization is not None and row.config_model != row.model and sixteen_bit:
        return replace(model, quantization=None)
    return model


def row_weight_dtype(row: PerfMeasurement, model: ModelSpec) -> str:
    """The weight dtype the row's deployment is sized with: the checkpoint's own format, else the stated one."""
    stated = (row.weight_dtype or "").lower()
    if model.quantization is not None:
        return "auto"  # the checkpoint is served as published
    if stated.startswith("fp8"):
        return "fp8"
    if stated.startswith("fp4") or stated.startswith("nvfp4"):
        return "nvfp4"
    if stated.startswith("int4") or "awq" in stated or "gptq" in stated:
        return "int4"
    if stated.startswith("fp16") or stated.startswith("float16"):
        return "fp16"
    return "bf16" if model.torch_dtype == "bfloat16" else "auto"


def row_kv_dtype(row: PerfMeasurement) -> str:
    """fp8 where the row states an fp8 KV cache, else the engine's default (the model's dtype)."""
    return "fp8" if (row.kv_cache_dtype or "").lower().startswith("fp8") else "auto"


def _terms(
    p: PerfInputs, tokens: float, batch: float, context: float, prefill_context: float | None = None
) -> StepTerms:
    """A step at efficiency 1; `prefill_context` when `tokens` are prompt tokens beside `batch` decodes."""
    if prefill_context is None:
        flops = float(step_flops(p, tokens, context))
    else:
        flops = float(step_flops(p, tokens, prefill_context)) + float(step_flops(p, batch, context))
    new_tokens = tokens + batch if prefill_context is not None else tokens
    memory = float(step_bytes(p, tokens + batch, batch, context))
    weights = float(step_bytes(p, tokens + batch, 0, context))
    gemm = 2.0 * p.active_params * new_tokens
    unit = PerfEfficiency(allreduce_latency_s=0.0)
    comm_bytes = float(allreduce_seconds(p, tokens, unit))
    return StepTerms(
        memory_s=memory / p.bandwidth_bytes_per_s,
        compute_s=flops / p.flops_per_s,
        comm_s=float(allreduce_seconds(p, tokens, PerfEfficiency())),
        weight_s=weights / p.bandwidth_bytes_per_s,
        kv_s=(memory - weights) / p.bandwidth_bytes_per_s,
        gemm_s=gemm / p.flops_per_s,
        attention_s=max(flops - gemm, 0.0) / p.flops_per_s,
        comm_bytes_s=comm_bytes,
        comm_calls=2.0 * p.layers_on_rank * float(p.tp > 1),
        sequences=float(batch + (prefill_context is not None)),
        tokens=float(new_tokens),
    )


def _chunks(total: int, chunk: int) -> list[int]:
    return [min(chunk, total - i * chunk) for i in range(cdiv(total, chunk))]


class SizedRow(NamedTuple):
    input_len: int
    output_len: int
    deployment: DeploymentSpec
    est: Estimate


def row_lengths(row: PerfMeasurement) -> tuple[int, int] | str:
    """The (input, output) tokens a row is predicted at: its mean lengths, rounded; or why it has none."""
    prompt, out = row.mean_input_len, row.mean_output_len
    if not prompt or not out:
        return "no input / output length"
    return max(1, round(prompt)), max(1, round(out))


def sized_row(row: PerfMeasurement, model: ModelSpec, gpu: GpuSku, checkpoint_bytes: int | None) -> SizedRow | str:
    """The row's mean lengths, its deployment and the estimate at their sum, or why it cannot be sized."""
    if gpu.memory_bandwidth_gbps is None or gpu.bf16_dense_tflops is None:
        return f"{gpu.id} has no bandwidth / TFLOPS in the catalog"
    lengths = row_lengths(row)
    if isinstance(lengths, str):
        return lengths
    i_len, o_len = lengths
    context = i_len + o_len
    deployment = DeploymentSpec(
        tp=row.tp,
        pp=row.pp,
        weight_dtype=row_weight_dtype(row, model),
        kv_dtype=row_kv_dtype(row),
        engine=row.engine,
        max_model_len=max(context, 16),
    )
    try:
        est = estimate(model, deployment, gpu=gpu, checkpoint_bytes=checkpoint_bytes, context_tokens=context)
    except SpecError as exc:
        return str(exc)
    if not est.fits:
        return f"does not fit: {est.reason}"
    return SizedRow(i_len, o_len, deployment, est)


def _tags(
    row: PerfMeasurement, model: ModelSpec, deployment: DeploymentSpec, est: Estimate, burst: bool
) -> tuple[str, ...]:
    fp8 = deployment.weight_dtype == "fp8" or "fp8" in est.weight_dtype
    named = {"moe": model.num_experts > 0, "tp>1": row.tp > 1, "pp>1": row.pp > 1, "fp8": fp8, "burst": burst}
    return tuple(t for t, on in named.items() if on)


def _prefills(
    p: PerfInputs, i_len: int, running: int, chunk: int, decode_ctx: float
) -> tuple[tuple[StepTerms, ...], tuple[StepTerms, ...]]:
    """A prompt's prefill steps beside the running batch, and a wave's prefill steps together."""
    # a prompt prefilled beside the running batch (steady serving), chunk by chunk
    room = max(1, chunk - (running - 1))
    beside: list[StepTerms] = []
    done = 0
    for n in _chunks(i_len, room):
        beside.append(_terms(p, n, running - 1, decode_ctx, prefill_context=done + n / 2))
        done += n
    # a wave of prompts prefilled together (each attends within its own prompt)
    together = tuple(_terms(p, n, 0, 0, prefill_context=i_len / 2) for n in _chunks(running * i_len, chunk))
    return tuple(beside), together


def _closed_loop_terms(
    engine: str,
    o_len: int,
    running: int,
    decode: StepTerms,
    beside: tuple[StepTerms, ...],
    together: tuple[StepTerms, ...],
) -> tuple[dict[str, object], dict[str, object]]:
    """The step terms of a closed loop's TPOT and TTFT observations, as `capacity.serving.closed_loop` (what the
    simulation `capplan estimate --concurrency` reports comes to) forms them: TPOT = (o decode steps + B prefills
    beside the others - the wave's wait) / (o - 1); TTFT = the wave's wait (plus the request overhead)."""
    steps = len(together)
    waited = float(waited_share(wave_share(engine), steps) * wave_mean_steps(steps, running)) / steps
    tpot: dict[str, object] = {"decode": decode, "decode_steps": o_len / (o_len - 1)}
    tpot |= {"prefill": beside, "prefill_repeats": running / (o_len - 1)}
    tpot |= {"wave": together, "wave_repeats": -waited / (o_len - 1)}
    ttft: dict[str, object] = {"decode": None, "decode_steps": 0, "requests": 1.0, "wave": together, "wave_repeats": waited}
    return tpot, ttft


def observations_for(
    row: PerfMeasurement,
    model: ModelSpec,
    gpu: GpuSku,
    checkpoint_bytes: int | None,
    tpot_interference: bool = False,
    closed_loop: bool = CLOSED_LOOP_OBSERVATIONS,
) -> list[Observation] | str:
    """The row's measured metrics as observations, or why it cannot be sized. `tpot_interference`: a
    served row's TPOT also carries the prefills of the requests that join while it decodes ((B - 1) / o
    prompts per decode step, beside the batch; evaluation/step_cost_candidate.py), not the bare step."""
    sized = sized_row(row, model, gpu, checkpoint_bytes)
    if isinstance(sized, str):
        return sized
    i_len, o_len, deployment, est = sized
    batch = row.effective_concurrency
    burst = row.request_rate is not None and math.isinf(row.request_rate)
    if batch is None:
        if burst:
            batch = row.num_prompts or est.b_max  # all queued at once
        else:
            return "neither a concurrency nor a batch size (a finite request rate)"
    if batch < 1:
        return "no sequence in flight"
    running = max(1, min(batch, est.b_max))  # what the KV pool (and max_num_seqs) holds at once
    waves = cdiv(batch, running)
    p = perf_inputs(model, est, gpu, deployment.weight_dtype)
    chunk = est.pool.max_num_batched_tokens or _TRTLLM_CHUNK
    decode_ctx = i_len + o_len / 2
    decode = _terms(p, running, running, decode_ctx)
    vendor = vendor_class(gpu)
    tags = _tags(row, model, deployment, est, burst)
    beside, together = _prefills(p, i_len, running, chunk, decode_ctx)

    def observation(metric: str, measured: float, **terms: object) -> Observation:
        row_terms: dict[str, object] = {"row_id": row.id, "group": row.source_group, "vendor": vendor, "tags": tags}
        row_terms |= {"engine": row.engine, "pp": row.pp, "metric": metric, "measured": measured}
        return Observation(**row_terms, **terms)  # type: ignore[arg-type]

    found: list[Observation] = []
    static = row.benchmark_kind in ("static_batch", "static_batch_ttft", "offline_batch_latency")
    joined = (running - 1) / o_len if tpot_interference and not static and (waves > 1 or not burst) else 0.0
    # a capped client concurrency at an unlimited rate is a closed loop: its TPOT and TTFT are the closed form's
    closed = closed_loop and burst and not static and row.concurrency is not None and waves == 1 and o_len > 1
    loop = _closed_loop_terms(row.engine, o_len, running, decode, beside, together) if closed else None
    if row.tpot_ms:
        if loop is not None:
            found.append(observation("tpot", row.tpot_ms / 1e3, **loop[0]))
        else:
            tpot_prefill = {"prefill": beside, "prefill_repeats": joined} if joined else {}
            found.append(observation("tpot", row.tpot_ms / 1e3, decode=decode, decode_steps=1, **tpot_prefill))
    if row.ttft_ms:
        if loop is not None:
            found.append(observation("ttft", row.ttft_ms / 1e3, **loop[1]))
        elif static:
            found.append(observation("ttft", row.ttft_ms / 1e3, decode=None, decode_steps=0, prefill=together))
        elif burst:
            # all requests at once: on average a request waits for half its wave's prefills, and for
            # (waves - 1) / 2 earlier waves to finish generating
            found.append(
                observation(
                    "ttft",
                    row.ttft_ms / 1e3,
                    decode=decode,
                    decode_steps=o_len * (waves - 1) / 2,
                    prefill=together,
                    prefill_repeats=(running + 1) / (2 * running) + (waves - 1) / 2,
                    requests=1.0,
                )
            )
        else:
            found.append(
                observation("ttft", row.ttft_ms / 1e3, decode=None, decode_steps=0, prefill=beside, requests=1.0)
            )
    if row.batch_latency_s:
        found.append(
            observation("batch_latency", row.batch_latency_s, decode=decode, decode_steps=o_len, prefill=together)
        )
    throughput = row.output_throughput
    if throughput and row.benchmark_kind != "static_batch_ttft":
        if static or burst:
            # waves of `running` requests: each wave prefilled together, then o_len decode steps
            prefill, repeats = together, float(waves)
        else:
            # steady serving: each of the `running` requests in a generation is prefilled beside the others
            prefill, repeats = beside, float(running)
        found.append(
            observation(
                "output_throughput",
                throughput,
                decode=decode,
                decode_steps=o_len * waves,
                prefill=prefill,
                prefill_repeats=repeats,
                tokens=float(running * waves * o_len),
            )
        )
    return found or "no metric capplan predicts (TPOT, TTFT, output throughput, batch latency)"


T = TypeVar("T")
Resolver = Callable[[str], tuple[ModelSpec, int | None]]
GpuFinder = Callable[[str], GpuSku]


def read_rows(
    rows: Iterable[PerfMeasurement],
    resolve: Resolver,
    find_gpu: GpuFinder,
    read: Callable[[PerfMeasurement, ModelSpec, GpuSku, int | None], T | str],
) -> tuple[list[tuple[PerfMeasurement, T]], list[Skipped]]:
    """`read` on each row whose model and GPU resolve; the rows it cannot read, with the reason."""
    done: list[tuple[PerfMeasurement, T]] = []
    skipped: list[Skipped] = []
    for row in rows:
        try:
            model, checkpoint = resolve(row.config_model)
            gpu = find_gpu(row.gpu)
        except (LookupError, SpecError, OSError) as exc:
            skipped.append(Skipped(row.id, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
            continue
        found = read(row, run_checkpoint(row, model), gpu, checkpoint)
        if isinstance(found, str):
            skipped.append(Skipped(row.id, found))
        else:
            done.append((row, found))
    return done, skipped


def build(
    rows: Iterable[PerfMeasurement], resolve: Resolver, find_gpu: GpuFinder, tpot_interference: bool = False
) -> tuple[list[Observation], list[Skipped]]:
    def read(row: PerfMeasurement, model: ModelSpec, gpu: GpuSku, checkpoint: int | None) -> list[Observation] | str:
        return observations_for(row, model, gpu, checkpoint, tpot_interference)

    done, skipped = read_rows(rows, resolve, find_gpu, read)
    return [o for _, found in done for o in found], skipped


@cache
def _catalog_resolver() -> tuple[Resolver, GpuFinder]:
    from models_registry.resolve import spec_and_checkpoint
    from models_registry.sources.gpu_catalog import find_gpu_sku, load_gpu_skus

    skus = load_gpu_skus()
    resolve = cache(spec_and_checkpoint)

    def find(gpu_id: str) -> GpuSku:
        return find_gpu_sku(gpu_id, skus)

    return resolve, find


@dataclass(frozen=True, slots=True)
class CvReport:
    observations: list[Observation]
    skipped: list[Skipped]
    params: Params
    in_sample: np.ndarray
    cross_validated: np.ndarray
    baseline: np.ndarray  # the defaults before fitting, for comparison in the same run
    # leave-one-source-FAMILY-out (each owner's rows predicted by a fit that saw none of them); empty
    # where the report was built without it
    family_out: np.ndarray = field(default_factory=lambda: np.array([]))

    def family_table(self, key: Callable[[Observation], str | None]) -> dict[str, tuple[Accuracy, float]]:
        """(leave-one-family-out accuracy, median signed error %) per value of `key` (None: left out)."""
        measured = np.array([o.measured for o in self.observations])
        out: dict[str, tuple[Accuracy, float]] = {}
        for value in sorted({k for o in self.observations if (k := key(o)) is not None}):
            mask = np.array([key(o) == value for o in self.observations])
            predicted = self.family_out[mask]
            ok = np.isfinite(predicted) & (predicted > 0)
            signed = (predicted[ok] / measured[mask][ok] - 1) * 100
            out[value] = (accuracy(measured[mask], predicted), float(np.median(signed)) if len(signed) else math.nan)
        return out

    def table(self, key: Callable[[Observation], str | None]) -> dict[str, tuple[Accuracy, Accuracy, Accuracy]]:
        """(in-sample, cross-validated, defaults) accuracy per value of `key` (None: left out)."""
        measured = np.array([o.measured for o in self.observations])
        out: dict[str, tuple[Accuracy, Accuracy, Accuracy]] = {}
        for value in sorted({k for o in self.observations if (k := key(o)) is not None}):
            mask = np.array([key(o) == value for o in self.observations])
            out[value] = (
                accuracy(measured[mask], self.in_sample[mask]),
                accuracy(measured[mask], self.cross_validated[mask]),
                accuracy(measured[mask], self.baseline[mask]),
            )
        return out


def family_of(rows: Iterable[PerfMeasurement]) -> Callable[[Observation], str]:
    """An observation's source family (its group where the row names none): the leave-out unit of the
    stricter cross-validation."""
    family = {row.id: row.source_family or row.source_group for row in rows}
    return lambda o: family.get(o.row_id, o.group)


def cv_report(rows: Iterable[PerfMeasurement] | None = None, by_family: bool = False) -> CvReport:
    """Fit on every row, score in-sample and leave-one-source-group-out (the number to report);
    `by_family`: also leave one source family out at a time."""
    from capacity.perf_fit import default_params

    resolve, find = _catalog_resolver()
    data = list(rows) if rows is not None else load_perf_measurements().rows
    observations, skipped = build(data, resolve, find)
    params = fit(observations)
    return CvReport(
        observations=observations,
        skipped=skipped,
        params=params,
        in_sample=predict(observations, params),
        cross_validated=leave_one_group_out(observations),
        baseline=predict(observations, default_params(observations)),
        family_out=leave_one_group_out(observations, family_of(data)) if by_family else np.array([]),
    )


def shipped_params() -> Params:
    """The efficiency factors capplan ships (capacity/performance.py), as `Params` for `predict`."""
    from capacity.performance import (
        ALLREDUCE_LATENCY_S,
        COMPUTE_EFFICIENCY,
        MEMORY_EFFICIENCY,
        REQUEST_OVERHEAD_S,
        STEP_OVERHEAD_S,
    )

    return Params(
        memory_bandwidth=dict(MEMORY_EFFICIENCY),
        compute=dict(COMPUTE_EFFICIENCY),
        step_overhead_s={str(engine): value for engine, value in STEP_OVERHEAD_S.items()},
        request_overhead_s={str(engine): value for engine, value in REQUEST_OVERHEAD_S.items()},
        allreduce_latency_s={"*": ALLREDUCE_LATENCY_S},
    )


@dataclass(frozen=True, slots=True)
class HoldoutReport:
    """Blind scores: every observation predicted with the shipped factors, nothing fitted on these rows."""

    observations: list[Observation]
    skipped: list[Skipped]
    params: Params
    predicted: np.ndarray
    family: dict[str, str]  # row id -> source family (the group where the row names none)

    def signed_errors_pct(self) -> np.ndarray:
        """(predicted / measured - 1) x 100 per observation (NaN where the model gives no number)."""
        measured = np.array([o.measured for o in self.observations], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            errors = (self.predicted / measured - 1) * 100
        ok = np.isfinite(self.predicted) & (self.predicted > 0)
        return np.where(ok, errors, np.nan)

    def table(self, key: Callable[[Observation], str | None]) -> dict[str, tuple[Accuracy, float]]:
        """(accuracy, median signed error %) per value of `key` (None: left out)."""
        measured = np.array([o.measured for o in self.observations], dtype=float)
        signed = self.signed_errors_pct()
        out: dict[str, tuple[Accuracy, float]] = {}
        for value in sorted({k for o in self.observations if (k := key(o)) is not None}):
            mask = np.array([key(o) == value for o in self.observations])
            chosen = signed[mask]
            chosen = chosen[np.isfinite(chosen)]
            median = float(np.median(chosen)) if len(chosen) else math.nan
            out[value] = (accuracy(measured[mask], self.predicted[mask]), median)
        return out


def holdout_report(rows: Iterable[PerfMeasurement] | None = None, params: Params | None = None) -> HoldoutReport:
    """Score the blind holdout (evaluation/data/perf_holdout.yaml) with the shipped factors: the same
    observations and the same `predict` as the cross-validation, no fitting."""
    from evaluation.perf_measurements import load_perf_holdout

    resolve, find = _catalog_resolver()
    data = list(rows) if rows is not None else load_perf_holdout().rows
    observations, skipped = build(data, resolve, find)
    chosen = params if params is not None else shipped_params()
    return HoldoutReport(
        observations=observations,
        skipped=skipped,
        params=chosen,
        predicted=predict(observations, chosen),
        family={row.id: row.source_family or row.source_group for row in data},
    )
