"""What the tightest pool answers for one deployment: whether the engine starts (and the auto-fitted length),
what it prints, B_max and the max context at the workload, whether the workload fits and why not; and the refusals
in the engine's words. `capacity.estimate` composes the pool, these figures are its answer."""

from __future__ import annotations

from dataclasses import dataclass, replace

from capacity.dtypes import format_gib
from capacity.engines.kinds import Engine
from capacity.engines.protocol import EngineProfile, StartRequest
from capacity.features.prefix_cache_engines import prefix_cache_rule
from capacity.features.prefix_caching import NO_PREFIX_CACHING_STATED, PrefixCaching
from capacity.pool import (
    KVPool,
    PoolUnit,
    b_max,
    engine_starts,
    largest_starting_len,
    max_concurrency,
    max_context,
    physical_token_slots,
    start_units,
)
from capacity.spec import SpecError
from capacity.weights import WeightsEstimate


def cached_prefix_tokens(prefix: PrefixCaching, engine: Engine, pool: KVPool, context_tokens: int) -> int:
    """Tokens of the shared prefix held once at T: whole blocks (pages) of the pool (none in a byte pool)."""
    if pool.unit is PoolUnit.BYTE:
        return 0
    cached: int = prefix.cached_tokens(prefix_cache_rule(engine), context_tokens, pool.block_size)
    return cached


@dataclass(frozen=True, slots=True)
class Limits:
    """The batch limits in force: the deployment's, else the engine's defaults."""

    utilization: float
    block_size: int
    batched_tokens: int
    seqs_cap: int | None
    in_flight_tokens: int


@dataclass(frozen=True, slots=True)
class PoolFigures:
    """What the tightest pool answers, under the names `Estimate` gives them: whether the engine starts
    (and the auto-fitted length), what it prints, B_max, the max context, whether the workload fits."""

    max_model_len: int
    context_tokens: int
    starts: bool
    max_model_len_that_starts: int
    kv_cache_tokens: int
    physical_kv_token_slots: int
    num_blocks: int
    block_size: int
    max_concurrency: float
    max_num_seqs: int | None
    b_max: int
    b_max_memory: int
    max_context_at_concurrency: int
    fits: bool
    reason: str
    prefix_cached_tokens: int = 0
    b_max_without_prefix: int = 0

    def fields(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}


def pool_figures(
    profile: EngineProfile,
    pool: KVPool,
    budget: int,
    weights: WeightsEstimate,
    usable: int,
    per_token_gpu: int,
    limit: int,
    max_model_len: int,
    auto_fit: bool,
    lim: Limits,
    context_tokens: int | None,
    concurrency: int | None,
    start_problem: str | None = None,
    prefix: PrefixCaching = NO_PREFIX_CACHING_STATED,
) -> PoolFigures:
    """Ask the pool: the start check (and the auto-fit), the printed KV cache size, B_max at the
    context, the max context at the target concurrency, and whether the workload fits, with why.
    `start_problem`: the engine's refusal before any pool is built (free memory below its request)."""
    reserved = profile.start_reserved_units
    if profile.refuses_short_pool:
        fitted_len = largest_starting_len(pool, limit, reserved) if budget > 0 else 0
        if auto_fit:
            max_model_len = fitted_len or max_model_len
        starts = budget > 0 and engine_starts(pool, max_model_len, reserved)
    else:  # starts with any pool; a request longer than the pool waits or is refused at admission
        starts = budget > 0 and pool.capacity_units > 0
        fitted_len = limit if starts else 0
    if start_problem:
        starts, fitted_len = False, 0
    context = context_tokens if context_tokens is not None else max_model_len
    if context <= 0:
        raise SpecError(f"context must be a positive number of tokens, got {context}")

    if pool.unit is PoolUnit.BYTE:
        kv_cache_tokens = physical = (budget // per_token_gpu) if per_token_gpu and budget > 0 else 0
    elif pool.capacity_units:
        printed_concurrency = max_concurrency(pool, max_model_len)
        kv_cache_tokens = profile.kv_cache_tokens(
            pool.capacity_units, len(pool.groups), pool.block_size, printed_concurrency, max_model_len
        )
        physical = physical_token_slots(pool.capacity_units, pool.block_size)
    else:
        kv_cache_tokens = physical = 0
    block_size = pool.block_size if budget > 0 else lim.block_size
    num_blocks = pool.capacity_units if pool.unit is PoolUnit.BLOCK else kv_cache_tokens // max(block_size, 1)

    # the cap the user or the engine's defaults set, else the one the engine derives from its pool (SGLang)
    state_slots = pool.swa_capacity_units if pool.state_bytes_per_sequence and pool.swa_capacity_units else 0
    derived = profile.sequence_cap(kv_cache_tokens, max_model_len, state_slots, pool.swa_window_tokens)
    seqs_cap = lim.seqs_cap or (int(derived) or None)
    conc = max_concurrency(pool, context) if pool.capacity_units else 0.0
    cached = cached_prefix_tokens(prefix, profile.engine, pool, context)
    private = b_max(pool, context) if pool.capacity_units else 0
    bmax_memory = b_max(pool, context, cached_tokens=cached) if pool.capacity_units else 0
    bmax = min(bmax_memory, seqs_cap) if seqs_cap else bmax_memory
    if context > max_model_len or not starts:
        bmax = bmax_memory = 0
    target = concurrency if concurrency is not None else 1
    max_ctx = max_context(pool, target, max_model_len, seqs_cap) if pool.capacity_units and starts else 0

    need = concurrency or 1
    fits, reason = fit_reason(
        pool, budget, weights.per_gpu_bytes, usable, context, need, bmax, max_model_len, seqs_cap, limit
    )
    if start_problem:
        fits, reason = False, start_problem
    elif budget > 0 and not starts:
        fits = False
        reason = no_start_reason(pool, max_model_len, fitted_len, reserved, budget)
    elif not fits and starts and budget > 0 and not profile.refuses_short_pool and pool.capacity_units:
        # SGLang / TensorRT-LLM start with a pool shorter than one request: the workload does not fit, the
        # server does (a "does not fit" read as "does not start" is what users of these engines saw)
        reason += (
            f"; the server starts all the same ({profile.engine.value} caps a request at what the pool "
            f"holds: {kv_cache_tokens:,} tokens)"
        )
    return PoolFigures(
        max_model_len,
        context,
        starts,
        fitted_len,
        kv_cache_tokens,
        physical,
        num_blocks,
        block_size,
        round(conc, 4),
        seqs_cap,
        bmax,
        bmax_memory,
        max_ctx,
        fits,
        reason,
        cached,
        private if cached and starts and context <= max_model_len else bmax_memory,
    )


def checked_start(
    f: PoolFigures, profile: EngineProfile, start: StartRequest, limit: int, weights_refusal: str | None = None
) -> PoolFigures:
    """The figures, refused where the engine refuses the layout (a dtype the GPU cannot run, a length beyond
    the model's limit); at a length within the limit it may start, and the largest that does stays the answer.
    `weights_refusal` (`EngineProfile.weights_refusal`): the engine loads the weights after its config's checks and
    before it sizes memory, so that refusal comes second, at every length."""
    refusal = profile.start_refusal(start)
    if refusal is None:
        return f if weights_refusal is None else refused(f, profile, weights_refusal, 0)
    within = profile.start_refusal(replace(start, max_model_len=min(f.max_model_len, limit))) is None
    return refused(f, profile, refusal, f.max_model_len_that_starts if within else 0)


def refused(f: PoolFigures, profile: EngineProfile, message: str, fitted_len: int) -> PoolFigures:
    """A layout the engine refuses before sizing memory: nothing starts, nothing fits, the engine's message
    is the reason (the pool figures stay: what the memory would hold, had the engine started)."""
    return replace(
        f,
        starts=False,
        max_model_len_that_starts=fitted_len,
        fits=False,
        b_max=0,
        b_max_memory=0,
        max_context_at_concurrency=0,
        reason=f"DOES NOT START: {profile.engine.value} refuses it: {message}",
    )


def no_start_reason(pool: KVPool, max_model_len: int, fitted_len: int, reserved: int, budget: int) -> str:
    """The engine's own refusal, in one line (vLLM: 'To serve at least one request ...')."""
    need_units = start_units(pool, max_model_len, reserved)
    need = need_units * pool.unit_bytes
    fix = (
        f"the largest max_model_len that starts is {fitted_len:,} (--max-model-len {fitted_len} or -1 to auto-fit)"
        if fitted_len
        else "no max_model_len starts: not even one token fits"
    )
    return (
        f"DOES NOT START: one request of max_model_len {max_model_len:,} needs {need_units:,} blocks "
        f"({format_gib(need)} of KV per GPU) but the pool has {pool.capacity_units:,} "
        f"({format_gib(budget)}); {fix}"
    )


def fit_reason(
    pool: KVPool,
    budget: int,
    weights: int,
    usable: int,
    context: int,
    need: int,
    bmax: int,
    max_model_len: int,
    seqs_cap: int | None,
    limit: int,
) -> tuple[bool, str]:
    if budget <= 0:
        return False, (
            f"weights ({format_gib(weights)}) and overhead leave no KV budget out of "
            f"{format_gib(usable)} usable per GPU"
        )
    if context > max_model_len:
        return False, f"context {context:,} exceeds max_model_len {max_model_len:,}"
    if bmax >= need:
        return True, (f"{need:,} sequence(s) of {context:,} tokens fit; up to {bmax:,} at once")
    if seqs_cap is not None and bmax == seqs_cap:
        return False, f"{need:,} sequences exceed the engine's max_num_seqs {seqs_cap:,}"
    units = pool.sequence_units(context, context)
    per_seq = units if pool.unit is PoolUnit.BYTE else units * pool.unit_bytes
    return False, (
        f"{need:,} sequence(s) of {context:,} tokens need {format_gib(per_seq * need)} of KV per GPU; "
        f"the budget is {format_gib(budget)}"
    )
