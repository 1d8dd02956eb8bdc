"""`capplan estimate`: size one deployment and show the math (see DESIGN.md, Contracts)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

from capacity.dtypes import GIB
from capacity.engines import Engine
from capacity.engines.command_line import CommandLineError, EngineCommand, read_command, table_release
from capacity.engines.registry import engine_profile
from capacity.engines.vllm.multimodal import parse_mm_limits
from capacity.estimate import Estimate
from capacity.explain import derivation, speed_derivation
from capacity.features.lora import LoraSpec, lora_spec
from capacity.features.parallel_layout import expert_parallel_width
from capacity.features.prefix_caching import PrefixCaching
from capacity.hf_config.overrides import ConfigOverrides
from capacity.performance import (
    LatencyTargets,
    Performance,
    assumption_speed_note,
    efficiency_for,
    perf_inputs,
    performance,
)
from capacity.serving import SIMULATED_SPEED_FIELDS, Lengths, Load, ServingResult, reported_speed, simulate
from capacity.serving.targets import WithinTargets, batch_within_targets
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec, SpecError
from pipelines.commands import offload_options as oo
from pipelines.commands.common import config_overrides, estimate_resolved, fail, resolve_gpu, resolve_model
from pipelines.commands.options import ESTIMATE_OPTIONS, dtype_name, stated_deployment, takes
from pipelines.commands.speculative import SpeculativeArgs

if TYPE_CHECKING:
    from models_registry.resolve import ResolvedModel


def _gib_to_bytes(value: float | None) -> int | None:
    return None if value is None else round(value * GIB)


@takes(ESTIMATE_OPTIONS)
def estimate(ctx: typer.Context, **options: Any) -> None:
    """Estimate one deployment: KV bytes per token, weights, budget, blocks, B_max, max context."""
    params = {name: value for name, value in options.items() if name != "from_command"}
    pasted: _Pasted | None = None
    if options["from_command"] is not None:
        pasted = _Pasted.read(ctx, options["from_command"], options["model"])
        params |= pasted.values | {"model": pasted.command.model}
        params["dtype"], params["kv_dtype"] = dtype_name(params["dtype"]), dtype_name(params["kv_dtype"])
    speculative_args = SpeculativeArgs.pop(params)
    source = ctx.get_parameter_source("kv_dtype")
    kv_stated = (source is not None and source.name == "COMMANDLINE") or "kv_dtype" in (pasted.values if pasted else {})
    stated = stated_deployment(params)
    _estimate(pasted=pasted, stated=stated, speculative=speculative_args, kv_dtype_stated=kv_stated, **params)


def _estimate(
    *, pasted: _Pasted | None, stated: DeploymentSpec, model: str | None, gpu: str | None, tp: int, pp: int, dtype: str, kv_dtype: str,
    context: int | None, concurrency: int | None, input_len: int | None, output_len: int | None,
    max_model_len: int | None, async_scheduling: bool | None, enforce_eager: bool, allow_long_max_model_len: bool,
    triton_kernels: bool | None,
    disable_custom_all_reduce: bool, gpu_peer_access: bool | None, enable_lora: bool, max_loras: int | None,
    max_lora_rank: int | None, max_cpu_loras: int | None, lora_dtype: str | None, lora_target_modules: str | None,
    fully_sharded_loras: bool,
    speculative: SpeculativeArgs, enable_dp_attention: bool, dp: int, ep: int,
    enable_expert_parallel: bool, dcp: int, redundant_experts: int,
    limit_mm_per_prompt: str | None, language_model_only: bool, enable_prefix_caching: bool | None,
    shared_prefix_tokens: int | None, prefix_hit_rate: float | None, gpu_memory_utilization: float | None, engine: str, engine_version: str | None, block_size: int | None,
    max_num_batched_tokens: int | None, max_num_seqs: int | None, gpu_memory_gib: float | None,
    weights_gib: float | None, overhead_gib: float | None, other_process_gib: float | None,
    kv_cache_memory_gib: float | None, kv_cache_memory_bytes: int | None, max_total_tokens: int | None,
    cuda_graph_max_batch: int | None, request_rate: float | None,
    burst: int | None, num_prompts: int, simulate_load: bool, as_json: bool, tpot_ms: float | None = None,
    ttft_ms: float | None = None, kv_dtype_stated: bool = False, random_range_ratio: float = 0.0, **offload: Any,
) -> None:
    """The estimate of the options as given (or as a pasted command set them); `stated`: the deployment the
    layout options state; `offload`: the offload options."""
    if model is None:
        fail("give MODEL, or the engine's command line with --from-command")
    _check_ranges(
        {"--tp": tp, "--pp": pp, "--dp": dp, "--ep": ep, "--dcp": dcp},
        {
            "--context": context,
            "--concurrency": concurrency,
            "--input-len": input_len,
            "--output-len": output_len,
            "--max-model-len": None if max_model_len == -1 else max_model_len,
            "--block-size": block_size,
            "--max-num-batched-tokens": max_num_batched_tokens,
            "--max-num-seqs": max_num_seqs,
            "--max-total-tokens": max_total_tokens,
            "--cuda-graph-max-batch": cuda_graph_max_batch,
        },
        {
            "--gpu-memory-gib": gpu_memory_gib,
            "--weights-gib": weights_gib,
            "--overhead-gib": overhead_gib,
            "--other-process-gib": other_process_gib,
            "--kv-cache-memory-gib": kv_cache_memory_gib,
        },
    )
    kv_cache_memory_gib = _kv_cache_gib(kv_cache_memory_gib, kv_cache_memory_bytes)
    mm_limits = _mm_limits(limit_mm_per_prompt)
    if gpu is None and gpu_memory_gib is None and kv_cache_memory_gib is None:
        fail("give --gpu SKU, or --gpu-memory-gib for hardware not in the catalog")
    bench = _Bench.checked(request_rate, burst, num_prompts, simulate_load, random_range_ratio)
    prefix = _prefix_caching(enable_prefix_caching, shared_prefix_tokens, prefix_hit_rate)
    lora = _lora(enable_lora, max_loras, max_lora_rank, max_cpu_loras, lora_dtype, lora_target_modules, fully_sharded_loras)
    overrides = config_overrides(offload.pop("hf_overrides", None), engine, engine_version)
    resolved, sku = _resolved(model, gpu, overrides)
    weight_offload, kv_offload = oo.offload_specs(engine, offload)
    extra_notes = [overrides.note] if overrides else []
    expert_offload = oo.expert_offload(engine, offload, extra_notes)
    deployment = dataclasses.replace(
        stated,
        enforce_eager=enforce_eager or None,
        disable_custom_all_reduce=disable_custom_all_reduce or None,
        lora=lora,
        weight_offload=weight_offload,
        expert_offload=expert_offload,
        speculative=speculative.spec(resolved.spec),
        kv_offload=kv_offload,
        ep=expert_parallel_width(Engine(engine), tp, dp) if enable_expert_parallel else ep,
        mm_text_only=language_model_only or None,
        mm_limits=mm_limits,
        prefix_caching=prefix,
        gpu_memory_bytes=_gib_to_bytes(gpu_memory_gib),
        weights_bytes_per_gpu=_gib_to_bytes(weights_gib),
        overhead_bytes_per_gpu=_gib_to_bytes(overhead_gib),
        kv_cache_memory_bytes=_gib_to_bytes(kv_cache_memory_gib),
        other_process_bytes=_gib_to_bytes(other_process_gib) or 0,
    )
    if context is None and input_len is not None:
        context = input_len + (output_len if output_len is not None else min(256, input_len))
    try:
        result = estimate_resolved(resolved, deployment, gpu=sku, context_tokens=context, concurrency=concurrency)
    except SpecError as exc:
        fail(str(exc))
    if pasted is not None:
        result = pasted.noted(result)
    if extra_notes:
        result = dataclasses.replace(result, notes=(*result.notes, *extra_notes))
    speed = _speed(resolved.spec, result, sku, dtype, concurrency, input_len, output_len, benchmark=bench.open_load)
    asked = _Lengths(concurrency, input_len, output_len)
    sim = bench.run(resolved.spec, result, sku, dtype, asked)
    answers = bench.answers_speed(asked)
    if not kv_dtype_stated:
        result = _kv_dtype_noted(result, resolved, deployment, sku, _reported(speed, sim, answers), asked, context, bench)
    speed = speculative.speed(speed, resolved.spec, deployment, result)
    within = _within(resolved.spec, result, sku, dtype, LatencyTargets(tpot_ms, ttft_ms), asked, bench.asked)
    _print(result, resolved.spec, speed, sim, within, as_json=as_json, reported=_reported(speed, sim, answers))


def _within(
    model: ModelSpec,
    result: Estimate,
    sku: GpuSku | None,
    weight_dtype: str,
    targets: LatencyTargets,
    asked: _Lengths,
    simulated: bool,
) -> WithinTargets | None:
    """The largest batch within --tpot-ms / --ttft-ms (none without a target); a one-line error where
    the targets cannot be checked."""
    if not targets.any:
        return None
    for name, value in (("--tpot-ms", targets.tpot_ms), ("--ttft-ms", targets.ttft_ms)):
        if value is not None and not 0 < value < 1e9:
            fail(f"{name} must be a positive number of milliseconds, got {value:g}")
    if sku is None or sku.memory_bandwidth_gbps is None or sku.bf16_dense_tflops is None:
        fail("--tpot-ms / --ttft-ms need a catalog GPU with memory bandwidth and peak FLOPS (--gpu)")
    if not result.starts or result.b_max < 1:
        fail(f"no batch to search: {result.reason}")
    prompt, out = _lengths(result, asked.input_len, asked.output_len)
    try:
        return batch_within_targets(
            model,
            result,
            sku,
            targets,
            input_tokens=prompt,
            output_tokens=out,
            weight_dtype=weight_dtype,
            simulated_p99=simulated,
        )
    except SpecError as exc:
        fail(str(exc))


# `capplan estimate` parameters a pasted command can set, with the capplan option that sets them
_PASTED_OPTIONS = {
    name: "--" + name.replace("_", "-")
    for name in (
        "tp", "pp", "dtype", "kv_dtype", "max_model_len", "gpu_memory_utilization", "max_num_seqs",
        "max_num_batched_tokens", "block_size", "enforce_eager", "async_scheduling", "disable_custom_all_reduce",
        "allow_long_max_model_len", "vllm_v0_engine", "extensible_kv_cache",
        "kv_cache_memory_bytes", "enable_lora", "cpu_offload_gb", "speculative", "speculative_config",
        "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "kv_transfer_config", "enable_dp_attention", "dp", "ep", "enable_expert_parallel", "dcp",
        "redundant_experts", "engine", "engine_version", "limit_mm_per_prompt",
        "language_model_only", "kv_offloading_size", "kv_offloading_backend", "enable_hierarchical_cache",
        "hicache_ratio", "hicache_size", "lmcache_max_local_cpu_size", "lmcache_max_local_disk_size", "lmcache_chunk_size",
        "enable_prefix_caching", "max_total_tokens", "cuda_graph_max_batch", "max_loras", "max_lora_rank", "max_cpu_loras", "lora_dtype",
        "lora_target_modules", "fully_sharded_loras", "hf_overrides", "kt_weight_path", "kt_num_gpu_experts", "kt_method",
    )
}


@dataclass(frozen=True, slots=True)
class _Pasted:
    """A pasted engine command: the values it sets (a capplan option given on the command line wins),
    and the lines the estimate gains (what was ignored, what was overridden, what is not sized)."""

    command: EngineCommand
    values: dict[str, Any]
    notes: tuple[str, ...]

    @classmethod
    def read(cls, ctx: typer.Context, text: str, model: str | None) -> _Pasted:
        from models_registry.redact import redact

        if model is not None:
            fail("give MODEL or --from-command, not both (the command names its model)")
        try:
            command = read_command(text, ctx.params.get("engine_version"))
        except CommandLineError as exc:
            fail(redact(str(exc)))
        asked: dict[str, Any] = dict(command.options)
        asked["engine"] = command.engine
        if command.release is not None and command.release != ctx.params.get("engine_version"):
            asked["engine_version"] = command.release
        values: dict[str, Any] = {}
        won: list[str] = []
        for name, value in asked.items():
            source = ctx.get_parameter_source(name)
            if source is not None and source.name == "COMMANDLINE":
                if name == "engine" and ctx.params.get("engine") != command.engine:
                    fail(f"--engine {ctx.params.get('engine')} does not match the pasted {command.engine} command")
                won.append(_PASTED_OPTIONS[name])
                continue
            values[name] = value
        notes = list(command.notes)
        table = table_release(command.engine)
        if command.release is not None and not table.startswith(command.release):
            notes.append(f"flags read against {command.engine} {table}'s table (the command names {command.release})")
        if won:
            notes.append(f"given beside --from-command, these capplan options win over the command: {', '.join(won)}")
        if command.ignored:
            notes.append(f"ignored for capacity: {', '.join(command.ignored)}")
        return cls(command, values, tuple(notes))

    def noted(self, result: Estimate) -> Estimate:
        """`result` with the pasted command's lines; flags capplan cannot size make it not modelled."""
        notes = (*result.notes, *self.notes)
        unsized = self.command.unsized_text()
        if unsized is None:
            return dataclasses.replace(result, notes=notes)
        reason = "; ".join(filter(None, (result.not_modelled, unsized)))
        return dataclasses.replace(result, notes=(*notes, f"not modelled: {unsized}; sized as if they were off"),
                                   not_modelled=reason)


def _prefix_caching(enabled: bool | None, shared_prefix_tokens: int | None, hit_rate: float | None) -> PrefixCaching:
    """The prefix-caching options as one value, or a one-line usage error."""
    prefix = PrefixCaching(enabled, shared_prefix_tokens or 0, hit_rate)
    problem = prefix.problem()
    if problem:
        fail(f"--shared-prefix-tokens / --prefix-hit-rate: {problem}")
    return prefix
def _lora(
    enabled: bool, slots: int | None, rank: int | None, cpu: int | None, dtype: str | None, targets: str | None, fs: bool
) -> LoraSpec | None:
    """The LoRA spec the options ask for (None: off); a one-line error where a value is refused."""
    try:
        return lora_spec(enabled, slots, rank, cpu, dtype, targets, fs)
    except SpecError as exc:
        fail(str(exc))


def _mm_limits(text: str | None) -> tuple[tuple[str, int], ...]:
    """--limit-mm-per-prompt as (modality, count) pairs; a one-line error where it cannot be read."""
    if text is None:
        return ()
    try:
        return tuple(sorted(parse_mm_limits(text).items()))
    except ValueError as exc:
        fail(str(exc))


def _kv_cache_gib(gib: float | None, kv_bytes: int | None) -> float | None:
    """--kv-cache-memory-gib, or vLLM's --kv-cache-memory-bytes in GiB (not both)."""
    if kv_bytes is None:
        return gib
    if gib is not None:
        fail("give --kv-cache-memory-gib or --kv-cache-memory-bytes, not both")
    return kv_bytes / GIB


def _check_ranges(sizes: dict[str, int], counts: dict[str, int | None], gibs: dict[str, float | None]) -> None:
    """Fail on the first option out of range: a parallel size below 1, a count below 1, a GiB below 0."""
    for name, value in sizes.items():
        if value < 1:
            fail(f"{name} must be >= 1, got {value}")
    for name, number in counts.items():
        if number is not None and number < 1:
            fail(f"{name} must be a positive integer, got {number}")
    for name, gib in gibs.items():
        if gib is not None and not 0 <= gib < math.inf:
            fail(f"{name} must be a finite number of GiB >= 0, got {gib}")


def _resolved(
    model: str, gpu: str | None, overrides: ConfigOverrides | None = None
) -> tuple[ResolvedModel, GpuSku | None]:
    """The model (with the engine's config overrides) and the catalog GPU the command names (none for
    `--gpu-memory-gib` hardware)."""
    return resolve_model(model, overrides), resolve_gpu(gpu) if gpu is not None else None


def _print(
    result: Estimate,
    model: ModelSpec,
    speed: Performance | None,
    sim: ServingResult | None,
    within: WithinTargets | None,
    *,
    as_json: bool,
    reported: Performance | None = None,
) -> None:
    """The contract JSON object, or the derivation (and the speed and simulation blocks) as lines. Past
    B_max the speed keys come from the simulated closed loop, with `queued`; below it the `reported` figures
    (`_reported`: TPOT, TTFT and tokens/s of the simulated benchmark they describe)."""
    simulated_speed = reported is not None and reported is not speed
    if as_json:
        contract = result.contract()
        if reported is not None:
            contract |= reported.contract()
            if simulated_speed:
                contract["speed_from"] = dict.fromkeys(SIMULATED_SPEED_FIELDS.values(), "simulation")
        elif sim is not None and result.target_concurrency is not None:
            contract |= sim.speed_contract()
        if sim is not None:
            contract["simulation"] = sim.contract()
        if within is not None:
            contract["latency_targets"] = within.contract()
        sys.stdout.write(json.dumps(contract, indent=2) + "\n")
        return
    for line in derivation(result, model):
        typer.echo(line)
    steady = speed_derivation(speed) if speed is not None else []
    if simulated_speed and reported is not None:
        steady.append(
            f"   reported: TPOT {reported.tpot_ms:,.2f} ms, TTFT {reported.ttft_ms:,.1f} ms and "
            f"{reported.output_tokens_per_second:,.0f} output tokens/s of the simulated benchmark below (its means: "
            "the prefills that join the running batch take their share of its steps, and a prompt waits behind the "
            "others sent with it)"
        )
    blocks = (steady, sim.lines() if sim is not None else [])
    for block in (*blocks, within.lines() if within is not None else []):
        if block:
            typer.echo("")
            for line in block:
                typer.echo(line)


def _reported(speed: Performance | None, sim: ServingResult | None, answers_speed: bool) -> Performance | None:
    """The speed figures reported: `reported_speed` where the simulated benchmark is the one they describe
    (`_Bench.answers_speed`: the closed loop at --concurrency, or a burst / rate asked alone), else the steady
    state's."""
    if speed is None or sim is None or not answers_speed:
        return speed
    return reported_speed(speed, sim)


def _lengths(result: Estimate, input_len: int | None, output_len: int | None) -> tuple[int, int]:
    """(prompt, output) tokens of a request: as given, else the context split as the speed block splits it."""
    context = result.context_tokens
    out = output_len if output_len is not None else min(256, max(1, context // 2))
    prompt = input_len if input_len is not None else max(1, context - out)
    return prompt, out


@dataclass(frozen=True, slots=True)
class _Lengths:
    """What the command was told of the requests: how many at once, how long."""

    concurrency: int | None
    input_len: int | None
    output_len: int | None


@dataclass(frozen=True, slots=True)
class _Bench:
    """The simulated benchmark options: a Poisson rate, a burst, the requests a loop sends, --simulate, and the
    spread of the lengths around the ones asked (vllm bench serve's random range ratio)."""

    request_rate: float | None
    burst: int | None
    num_prompts: int
    forced: bool
    range_ratio: float = 0.0

    @classmethod
    def checked(
        cls, request_rate: float | None, burst: int | None, num_prompts: int, forced: bool, range_ratio: float = 0.0
    ) -> _Bench:
        if request_rate is not None and not request_rate > 0:
            fail(f"--request-rate must be positive, got {request_rate}")
        if request_rate is not None and burst is not None:
            fail("give --request-rate or --burst, not both")
        for name, count in (("--burst", burst), ("--num-prompts", num_prompts)):
            if count is not None and count < 1:
                fail(f"{name} must be a positive integer, got {count}")
        if not 0.0 <= range_ratio < 1.0:
            fail(f"--random-range-ratio must be in [0, 1), got {range_ratio}")
        return cls(request_rate, burst, num_prompts, forced, range_ratio)

    @property
    def asked(self) -> bool:
        return self.open_load or self.forced

    @property
    def open_load(self) -> bool:
        """A burst or a request rate: a benchmark of its own, whatever --concurrency says."""
        return self.request_rate is not None or self.burst is not None

    def answers_speed(self, asked: _Lengths) -> bool:
        """Whether the simulated benchmark is the one the speed keys describe: the closed loop at --concurrency (no
        burst, no request rate), or a --burst / --request-rate asked without --concurrency (the keys would otherwise
        describe one request alone, which nobody asked about). With both, the keys stay --concurrency's."""
        return asked.concurrency is None if self.open_load else asked.concurrency is not None

    def load(self, result: Estimate, asked: _Lengths) -> Load | None:
        """The benchmark to simulate: the one asked for, else the closed loop at --concurrency wherever the
        deployment starts (below B_max its TPOT and tokens/s are the ones reported, past it every figure)."""
        lengths = Lengths(*_lengths(result, asked.input_len, asked.output_len), self.range_ratio)
        if self.burst is not None:
            return Load.burst(self.burst, lengths)
        if self.request_rate is not None:
            return Load.poisson(self.request_rate, self.num_prompts, lengths)
        c = asked.concurrency
        if c is not None and (self.forced or result.starts):
            return Load.closed(c, max(self.num_prompts, c), lengths)
        return None

    def run(
        self, model: ModelSpec, result: Estimate, sku: GpuSku | None, weight_dtype: str, asked: _Lengths
    ) -> ServingResult | None:
        return _simulated(model, result, sku, weight_dtype, self.load(result, asked), required=self.asked)


def _simulated(
    model: ModelSpec, result: Estimate, sku: GpuSku | None, weight_dtype: str, load: Load | None, *, required: bool
) -> ServingResult | None:
    """The simulated benchmark (none without a load, a catalog GPU with bandwidth and FLOPS, or a pool);
    a simulation asked for that cannot run fails with its reason."""
    if load is None or sku is None or sku.memory_bandwidth_gbps is None or sku.bf16_dense_tflops is None:
        if required and load is not None:
            fail("simulating a benchmark needs a catalog GPU with memory bandwidth and peak FLOPS (--gpu)")
        return None
    if not result.starts or result.kv_budget_bytes_per_gpu <= 0:
        if required:
            fail(f"nothing to simulate: {result.reason}")
        return None
    try:
        inputs = perf_inputs(model, result, sku, weight_dtype)
        return simulate(result, inputs, load, efficiency_for(result.engine, sku))
    except SpecError as exc:
        if required:
            fail(str(exc))
        return None


def _kv_dtype_noted(
    result: Estimate,
    resolved: ResolvedModel,
    d: DeploymentSpec,
    sku: GpuSku | None,
    speed: Performance | None,
    asked: _Lengths,
    context: int | None,
    bench: _Bench,
) -> Estimate:
    """`result` with a note where the unstated KV dtype (`auto`, the model's) binds: an fp8 KV cache, which the GPU and
    the engine take, moves the speed figures `speed` reports by more than the assumption share
    (`assumption_speed_note`); the fp8 figures are the ones the command reports with --kv-dtype fp8 (`_reported`)."""
    if speed is None or sku is None or not sku.fp8_support or d.kv_dtype != "auto":
        return result
    if engine_profile(d.engine, d.engine_version).kv_dtype_problem("fp8") is not None:
        return result
    try:
        fp8_kv = dataclasses.replace(d, kv_dtype="fp8")
        other = estimate_resolved(resolved, fp8_kv, gpu=sku, context_tokens=context, concurrency=asked.concurrency)
    except SpecError:
        return result
    if other.kv_dtype == result.kv_dtype:
        return result
    other_speed = _speed(
        resolved.spec, other, sku, d.weight_dtype, asked.concurrency, asked.input_len, asked.output_len, bench.open_load
    )
    other_load = bench.load(other, asked) if speed is not None else None
    other_sim = _simulated(resolved.spec, other, sku, d.weight_dtype, other_load, required=False)
    other_speed = _reported(other_speed, other_sim, bench.answers_speed(asked))
    note = other_speed and assumption_speed_note(
        f"KV cache dtype auto ({result.kv_dtype}; --kv-dtype not stated)", "--kv-dtype fp8", speed, other_speed
    )
    return dataclasses.replace(result, notes=(*result.notes, note)) if note else result


def _speed(
    model: ModelSpec,
    result: Estimate,
    sku: GpuSku | None,
    weight_dtype: str,
    concurrency: int | None,
    input_len: int | None,
    output_len: int | None,
    benchmark: bool = False,
) -> Performance | None:
    """The speed block for `--concurrency` requests (or `--input-len`, or a simulated `benchmark`): none without
    a catalog GPU whose bandwidth and peak FLOPS are known, or where the deployment does not fit."""
    if sku is None or (concurrency is None and input_len is None and not benchmark) or not result.fits:
        return None
    if sku.memory_bandwidth_gbps is None or sku.bf16_dense_tflops is None:
        return None
    prompt, out = _lengths(result, input_len, output_len)
    chunk = result.pool.max_num_batched_tokens or prompt
    try:
        return performance(
            model,
            result,
            sku,
            concurrency=concurrency or 1,
            input_tokens=prompt,
            output_tokens=out,
            chunk_tokens=chunk,
            weight_dtype=weight_dtype,
        )
    except SpecError:
        return None
