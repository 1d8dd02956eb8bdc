"""The derivation of an Estimate as a worked example on paper: each factor, its value and unit."""

from __future__ import annotations

from capacity.dtypes import GIB
from capacity.engines.registry import engine_profile
from capacity.estimate import Estimate
from capacity.kv.kinds import UNBOUNDED_TOKENS, FullAttention, KVKind, LatentAttention, group_charge
from capacity.numeric import cdiv
from capacity.parallel import stage_layers
from capacity.performance import Performance
from capacity.pool import KVPool, PoolUnit
from capacity.spec import ModelSpec


def _gib(n: float) -> str:
    return f"{n / GIB:,.2f} GiB"


def _b(n: int) -> str:
    return f"{n:,} B"


def layer_summary(model: ModelSpec) -> list[tuple[str, int, int]]:
    """(description, layer count, elements per token) per distinct layer shape, in layer order."""
    rows: dict[str, tuple[int, int]] = {}
    for layer in model.layers:
        desc = layer.cache.describe()
        count, elements = rows.get(desc, (0, layer.cache.kv_elements_per_token))
        rows[desc] = (count + 1, elements)
    return [(desc, count, elements) for desc, (count, elements) in rows.items()]


def _ranks(est: Estimate) -> str:
    """The DP attention / expert parallel / DCP sizes where the layout has them (capacity.features.parallel_layout)."""
    lay = est.layout
    return "" if lay is None else f" DP={lay.dp} EP={lay.ep}" + (f" DCP={lay.dcp}" if lay.dcp > 1 else "")


def _per_rank(model: ModelSpec, tp: int) -> str:
    """What each TP rank caches per token: KV heads of the attention layers (ceil(H_kv / TP), at
    least 1), and for MLA one latent per token that every rank holds whole (replicated, not split)."""
    caches = [layer.cache for layer in model.layers if layer.cache.stores_per_token_kv]
    heads = sorted({cache.heads_per_gpu(tp) for cache in caches if not cache.replicated_under_tp})
    parts = [f"{', '.join(map(str, heads))} KV head(s) per rank"] if heads else []
    if any(cache.replicated_under_tp for cache in caches):
        parts.append("MLA latent (no heads) replicated on every rank")
    return ", ".join(parts) or "no per-token KV"


def _group_kind(kind: KVKind, model: ModelSpec) -> str:
    """A pool group's label: engines pool MLA layers as full attention (MLAAttentionSpec is a
    FullAttentionSpec), but what they cache is the latent, so a model without plain attention
    layers shows its full groups as `mla`."""
    caches = [layer.cache for layer in model.layers if layer.cache.stores_per_token_kv]
    if group_charge(kind) is FullAttention and caches and all(cache.latent for cache in caches):
        return LatentAttention.kind.value
    return KVKind(kind).value


def _charge_breakdown(pool: KVPool, tokens: int, limit: int, total: int) -> list[str]:
    """The units a sequence takes, one line per charging rule, when more than one charges it
    (hybrid models: full, windowed and state groups); nothing when one rule charges it all."""
    terms = pool.charge_terms()
    in_flight = pool.in_flight_tokens
    parts: list[tuple[str, int]] = []
    if terms.per_block_groups:
        n, bs = terms.per_block_groups, pool.block_size
        parts.append((f"{n} full group(s): {n} x cdiv({tokens:,}, {bs})", n * cdiv(tokens, bs)))
    for n, held, bs in terms.windowed:
        if held >= UNBOUNDED_TOKENS:
            parts.append((f"{n} group(s) of {bs}-token blocks: {n} x cdiv({limit:,}, {bs})", n * cdiv(limit, bs)))
        else:
            rule = f"{n} x cdiv(min({held:,} + {in_flight:,} in flight, {limit:,}), {bs})"
            parts.append((f"{n} windowed group(s): {rule}", n * cdiv(min(held + in_flight, limit), bs)))
    if terms.fixed_units:
        states = [g.state_blocks or 1 for g in pool.groups if group_charge(g.kind).holds_state]
        sliding = terms.fixed_units - sum(states)
        why = [f"{len(states)} state group(s) x {states[0]} block(s)"] if states and len(set(states)) == 1 else []
        why += [f"+1 per sliding group (x{sliding}: a window may not start at a block boundary)"] if sliding else []
        parts.append((f"fixed: {', '.join(why) or 'per-request blocks'}", terms.fixed_units))
    if len(parts) < 2 or sum(units for _rule, units in parts) != total:
        return []
    return [f"     {rule} = {units:,}" for rule, units in parts]


def _tier_lines(est: Estimate) -> list[str]:
    """The offload tiers behind the pool (capacity.features.offload): tokens, memory, a hit's load time."""
    return [
        f"   behind the pool: {t.name}: {t.tokens:,} tokens in {_gib(t.bytes_per_gpu)} of {t.medium.label} per GPU"
        + (f"; a hit loads 1,000 tokens in {t.load_ms_per_1k_tokens:g} ms" if t.load_ms_per_1k_tokens else "")
        for t in est.kv_tiers[1:]
    ]


def derivation(est: Estimate, model: ModelSpec) -> list[str]:
    """Lines that show how every number of the estimate was reached."""
    elements = sum(layer.cache.kv_elements_per_token for layer in model.layers)
    kv_b = est.kv_bytes_per_token // elements if elements else 0
    lines = [
        f"Model {est.model}: {model.family} ({model.architecture}), {model.num_layers} layers, "
        f"hidden {model.hidden_size:,}, {model.total_params / 1e9:,.2f}B parameters, context limit "
        f"{model.context_limit_tokens:,} tokens",
        f"GPU {est.gpu}: {_gib(est.gpu_memory_bytes)} reported by the driver; engine {est.engine}"
        + (f" {est.engine_version}" if est.engine_version else "")
        + f"; TP={est.tp} PP={est.pp}{_ranks(est)}; weights {est.weight_dtype}, KV {est.kv_dtype}",
        "",
        "1. KV bytes per token (per layer, then summed)",
    ]
    state_descs = {layer.cache.describe() for layer in model.layers if layer.cache.holds_state}
    for desc, count, elements in layer_summary(model):
        if desc in state_descs:  # a state layer: its bytes are per sequence, shown under the per-token sum
            lines.append(f"   {count:>3} x {desc:<60}   per sequence, no per-token KV (below)")
            continue
        lines.append(
            f"   {count:>3} x {desc:<60} = {count} x {elements:,} elements x {kv_b} B = {_b(count * elements * kv_b)}"
        )
    lines.append(f"   whole model: {_b(est.kv_bytes_per_token)} per token")
    stages = stage_layers(model, est.pp)
    per_stage = [len(s) for s in stages]
    atp = est.layout.attention_tp if est.layout is not None else est.tp
    lines.append(
        f"   per GPU ({'attention TP' if est.layout is not None else 'TP'}={atp}: {_per_rank(model, atp)}; "
        f"PP stages {per_stage}): "
        f"{_b(est.kv_bytes_per_token_per_gpu)} per token on the most loaded GPU"
    )
    if est.state_bytes_per_sequence_per_gpu:
        lines.append(
            f"   plus a constant per-sequence state of {_b(est.state_bytes_per_sequence_per_gpu)} per GPU "
            "(state layers of the most loaded GPU):"
        )
        lines += [f"   {n:>3} x ({terms.describe()}) = {_b(n * terms.total_bytes)}" for terms, n in est.state_terms]
    lines += [
        "",
        "2. Memory budget per GPU",
        *_budget_lines(est),
        "",
        "3. KV pool",
    ]
    pool = est.pool
    if pool.unit is PoolUnit.BLOCK:
        groups = ", ".join(
            f"{_group_kind(g.kind, model)}{f'(W={g.window_tokens})' if g.window_tokens else ''}x{g.num_layers}"
            for g in pool.groups
        )
        lines += [
            f"   block = {pool.block_size} tokens; groups [{groups}]; one block across its layers = {_b(pool.unit_bytes)}",
            f"   num_blocks = floor({_b(est.kv_budget_bytes_per_gpu)} / {_b(pool.unit_bytes)}) = {est.num_blocks:,}",
        ]
    elif pool.unit is PoolUnit.TOKEN:
        lines.append(f"   token pool: floor(budget / {_b(pool.unit_bytes)} per token) = {pool.capacity_units:,} tokens")
    else:
        lines.append(
            f"   byte pool: {_b(est.kv_budget_bytes_per_gpu)}; windowed layers keep W-1 tokens, state added per sequence"
        )
    lines += [
        f"   KV cache size (as the engine prints it) = {est.kv_cache_tokens:,} tokens; "
        f"physical token slots = {est.physical_kv_token_slots:,}",
        *_tier_lines(est),
        "",
        f"4. Concurrency at {est.context_tokens:,} tokens per sequence",
    ]
    units = pool.sequence_units(est.context_tokens, est.context_tokens)
    unit = {PoolUnit.BLOCK: "blocks", PoolUnit.TOKEN: "tokens", PoolUnit.BYTE: "bytes"}[pool.unit]
    lines += [
        f"   one sequence takes {units:,} {unit}",
        *_charge_breakdown(pool, est.context_tokens, est.context_tokens, units),
        f"   max concurrency = {pool.capacity_units:,} / {units:,} = {est.max_concurrency:,.2f}x",
        *_shared_prefix(est, units, unit),
        f"   B_max = {est.b_max:,}"
        + (
            f" (memory allows {est.b_max_memory:,}; max_num_seqs caps at {est.max_num_seqs:,})"
            if est.max_num_seqs is not None and est.b_max_memory > est.b_max
            else ""
        ),
        f"   max context at concurrency {est.target_concurrency or 1:,} = {est.max_context_at_concurrency:,} tokens "
        f"(block multiple, capped at max_model_len {est.max_model_len:,})",
        "",
        *_start_check(est),
        "",
        _verdict(est),
    ]
    lines += [f"note: {note}" for note in est.notes]
    return lines


def _shared_prefix(est: Estimate, units: int, unit: str) -> list[str]:
    """With prefix caching, the shared prefix's whole blocks held once: the B_max arithmetic it changes."""
    if not est.prefix_cached_tokens:
        return []
    shared = est.pool.terms().shared_prefix_units(est.prefix_cached_tokens)
    return [
        f"   shared prefix: {est.prefix_cached_tokens:,} tokens (whole blocks) held once = {shared:,} {unit}; "
        f"memory bound = ({est.pool.capacity_units:,} - {shared:,}) // ({units:,} - {shared:,}) = {est.b_max_memory:,} "
        f"(without sharing {est.b_max_without_prefix:,})"
    ]


def _start_check(est: Estimate) -> list[str]:
    """The engine's own start check at max_model_len (vLLM `_check_enough_kv_cache_memory`)."""
    pool = est.pool
    if pool.unit is not PoolUnit.BLOCK or est.kv_budget_bytes_per_gpu <= 0:
        return [f"5. Start check: {'starts' if est.starts else 'does not start'} (a pool of {pool.capacity_units:,})"]
    need = pool.sequence_units(est.max_model_len, est.max_model_len)
    lines = [
        f"5. Start check at max_model_len {est.max_model_len:,}",
        f"   one request of max_model_len takes {need:,} blocks"
        + (f" + {est.start_reserved_units} held back (the null block)" if est.start_reserved_units else "")
        + f"; the pool has {pool.capacity_units:,}",
        *_charge_breakdown(pool, est.max_model_len, est.max_model_len, need),
        f"   {'starts' if est.starts else 'DOES NOT START'}; the largest max_model_len that starts = "
        f"{est.max_model_len_that_starts:,} tokens",
    ]
    if est.max_in_flight_tokens and any(group_charge(g.kind).windowed and g.window_tokens for g in pool.groups):
        lines.append(f"   windowed layers keep blocks for {est.max_in_flight_tokens:,} in-flight tokens")
    return lines


def _verdict(est: Estimate) -> str:
    if est.fits:
        return f"FITS: {est.reason}"
    if est.reason.startswith("DOES NOT START"):
        return est.reason
    return f"DOES NOT FIT: {est.reason}"


def speed_derivation(pf: Performance) -> list[str]:
    """The performance block: the decode step's roofline, TPOT, throughput and TTFT."""
    p, eff = pf.inputs, pf.efficiency
    if p is None:
        return []
    b, ctx = pf.concurrency, pf.input_tokens + pf.output_tokens // 2
    kv = pf.decode_step_bytes - pf.decode_weight_bytes
    bw, flops = p.bandwidth_bytes_per_s / 1e9, p.flops_per_s / 1e12
    lines = [
        f"6. Speed at concurrency {b:,}: prompts of {pf.input_tokens:,} tokens, {pf.output_tokens:,} generated "
        f"(decode at the mean context {ctx:,})",
        f"   decode step reads {pf.decode_weight_bytes / 1e9:,.2f} GB of weights"
        + (" (the experts B tokens touch in expectation)" if p.num_experts else "")
        + f" + {kv / 1e9:,.2f} GB of KV/state = {pf.decode_step_bytes / 1e9:,.2f} GB per GPU",
        f"   memory time  = {pf.decode_step_bytes / 1e9:,.2f} GB / ({eff.memory_bandwidth:.2f} x {bw:,.0f} GB/s) "
        f"= {pf.decode_memory_ms:,.3f} ms",
        f"   compute time = {pf.decode_step_flops / 1e12:,.3f} TFLOP / ({eff.compute:.2f} x {flops:,.0f} TFLOPS) "
        f"= {pf.decode_compute_ms:,.3f} ms ({'memory' if pf.memory_bound else 'compute'}-bound)",
        f"   TPOT = linear layers' roofline + attention's + TP all-reduces {pf.decode_comm_ms:,.3f} ms + engine step {eff.step_overhead_s * 1e3:,.2f} ms"
        + (f", x {p.pp} pipeline stages" if p.pp > 1 else "")
        + f" = {pf.speculation.plain_tpot_ms if pf.speculation else pf.tpot_ms:,.2f} ms",
        *([f"   {pf.speculation.describe()}"] if pf.speculation else []),
        f"   output throughput = {b:,} / TPOT = {pf.output_tokens_per_second:,.0f} tokens/s per replica",
        f"   TTFT = {pf.prefill_chunks:,} prefill chunk(s) beside the running batch = {pf.ttft_ms:,.1f} ms "
        "(steady state: the request arrives alone; a benchmark that starts its requests together, or keeps them in "
        "step with fixed lengths, queues them behind each other's prefills: the simulated benchmark, with the "
        "harness's --num-prompts and --random-range-ratio)",
        f"   efficiency factors: {eff.source}",
    ]
    return lines


def _lora_part(est: Estimate) -> str:
    """The LoRA adapter slots the weights line holds (the engines create them with the model), where served."""
    lora = est.lora
    return f"; with {_gib(lora.charged_bytes_per_gpu)} of LoRA adapter slots" if lora is not None else ""


def _budget_lines(est: Estimate) -> list[str]:
    """Usable memory, weights, overhead, and the KV budget as the engine's `kv_budget` forms it: usable less
    the rest, or (TensorRT-LLM) the fraction of what is free after them; a budget given is said to be."""
    fraction_of_free = engine_profile(est.engine, est.engine_version).budget_is_fraction_of_free
    total, util, kv = _gib(est.gpu_memory_bytes), f"{est.gpu_memory_utilization:.6g}", est.kv_budget_bytes_per_gpu
    weights, overhead = _gib(est.weights_bytes_per_gpu), _gib(est.overhead_bytes_per_gpu)
    if est.kv_budget_given:
        usable = f"   usable   = {total} x {util} = {_gib(est.usable_bytes_per_gpu)} (the engine's fraction: not used)"
        budget = "given (--kv-cache-memory-bytes: the engine sizes the cache to it, weights and overhead aside)"
    elif fraction_of_free:
        usable = f"   fraction = {util} of what is free after the weights and the profiling run ({total} in all)"
        budget = f"({total} - {weights} - {overhead}{_others(est)}) x {util}"
    else:
        usable = f"   usable   = {total} x {util} = {_gib(est.usable_bytes_per_gpu)}"
        budget = f"{_gib(est.usable_bytes_per_gpu)} - {weights} - {overhead}{_others(est)}"
        if est.device_bound_bytes_per_gpu:
            budget = _measured_budget(est, weights, overhead)
    lines = [
        usable,
        f"   weights  = {weights} ({est.weights_source}{_lora_part(est)})",
        f"   overhead = activation peak {_gib(est.activation_peak_bytes_per_gpu)} + non-torch "
        f"{_gib(est.non_torch_bytes_per_gpu)} + CUDA graphs {_gib(est.cuda_graph_bytes_per_gpu)} = {overhead}",
        *_profiling_batch(est),
        *(f"     {name:<66} {_gib(n)}" for name, n in est.activation_buffers),
    ]
    if not est.stage_kv_budget_bytes:
        return [*lines, f"   KV budget = {budget} = {_gib(kv)} ({_b(kv)})"]
    # PP > 1, stages sized apart: the figures above are the most loaded stage's; each stage has its own budget
    most_loaded = est.usable_bytes_per_gpu - est.weights_bytes_per_gpu - est.overhead_bytes_per_gpu
    most_loaded -= est.other_process_charged_bytes_per_gpu
    stages = " / ".join(_gib(b) for b in est.stage_kv_budget_bytes)
    return [
        *lines,
        f"   with the most loaded stage's weights and overhead: {budget} = {_gib(most_loaded)}",
        f"   by pipeline stage, each from its own weights and overhead (the sampler's peak on the last only): {stages}",
        f"   KV budget = stage {est.pool.stage}'s, whose blocks every rank keeps (the fewest) = {_gib(kv)} ({_b(kv)})",
    ]


def _measured_budget(est: Estimate, weights: str, overhead: str) -> str:
    """vLLM 0.34's measured sizing (`VllmProfile.kv_budget`): the smaller of the requested budget, which the
    overhead's device-bound part (margin, what is missing at init) does not charge, and the device's memory less
    others' and all of the overhead."""
    others = est.other_process_bytes_per_gpu
    device = f"{_gib(est.gpu_memory_bytes)}{f' - other processes {_gib(others)}' if others else ''}"
    requested = f"{_gib(est.usable_bytes_per_gpu)} + {_gib(est.device_bound_bytes_per_gpu)} (margin, missing at init)"
    return f"min({requested}, {device}) - {weights} - {overhead}"


def _profiling_batch(est: Estimate) -> list[str]:
    """The batch the activation terms are sized for, where the engine's profile names its terms."""
    if not est.activation_buffers or not est.max_num_batched_tokens:
        return []
    seqs = f" over up to {est.max_num_seqs:,} sequences" if est.max_num_seqs else ""
    return [f"     profiling pass: {est.max_num_batched_tokens:,} tokens{seqs} (max_num_batched_tokens, max_num_seqs)"]


def _others(est: Estimate) -> str:
    """The budget line's term for other processes' memory, where the engine took some off."""
    charged = est.other_process_charged_bytes_per_gpu
    return f" - other processes {_gib(charged)}" if charged else ""
