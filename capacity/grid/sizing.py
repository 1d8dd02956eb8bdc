"""The vectorized sizing of a deployment: overhead, KV budget, the tightest stage's pool (`_sized`), the
pool asked as `capacity.pool.PoolTerms` over its columns (`_pool_terms`), and the bisections."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from capacity.engines import EngineProfile
from capacity.engines import sglang as sglang_rules
from capacity.grid.columns import _F64, _I64, derived_deployment_columns
from capacity.numeric import Num, bisect_step
from capacity.pool import PoolTerms

_BISECTION_STEPS = 34  # max_model_len // block_size < 2**34 for any context limit a config states


def _pool_terms(windows: int, col: Callable[[str], Num] = pl.col) -> PoolTerms:
    """The deployment's pool as `capacity.pool.PoolTerms` over its columns (`col`: Polars' by default, or a
    `capacity.grid.staged.StagedRows`'): the grid asks it the same rules the estimate asks `KVPool.terms()`
    (null window parts are padded by `_with_windows`)."""
    windowed = tuple(
        (col(f"pool_window_{j}_groups"), col(f"pool_window_{j}_held"), col(f"pool_window_{j}_block_size"))
        for j in range(windows)
    )
    return PoolTerms(
        capacity_units=col("num_blocks"),
        block_size=col("block_size"),
        fixed_units=col("pool_fixed_units"),
        per_block_groups=col("pool_per_block_groups"),
        windowed=windowed,
        in_flight_tokens=col("pool_max_in_flight_tokens"),
        second_capacity=col("pool_swa_capacity"),
        second_window=col("pool_swa_window"),
    )


def _bisect(frame: pl.LazyFrame, steps: int, fits: Callable[[pl.Expr], pl.Expr]) -> pl.LazyFrame:
    """`numeric.bisect_step` on every row, `steps` times, over the `_lo` / `_hi` columns (each step
    materialized, so the expression stays one step deep)."""
    for _ in range(steps):
        lo, hi = bisect_step(pl.col("_lo"), pl.col("_hi"), fits)
        frame = frame.with_columns(lo.alias("_lo"), hi.alias("_hi"))
    return frame



def _per_engine(profiles: Sequence[EngineProfile], rule: Callable[[EngineProfile], pl.Expr | int]) -> pl.Expr:
    """One column from a rule each engine profile answers for itself (by `engine_idx`)."""
    expr: pl.Expr = pl.lit(None)
    for e, profile in reversed(list(enumerate(profiles))):
        value = rule(profile)
        expr = pl.when(pl.col("engine_idx") == e).then(value if isinstance(value, pl.Expr) else pl.lit(value)).otherwise(expr)
    return expr


def _starts(windows: int, length: pl.Expr) -> pl.Expr:
    """The engine's start check at max_model_len `length` (`PoolTerms.starts`); engines that start with
    any pool only need a block."""
    starts = _pool_terms(windows).starts(length, pl.col("_start_reserved"))
    return (pl.col("kv_budget_bytes_per_gpu") > 0) & (pl.col("num_blocks") > 0) & (~pl.col("_refuses_short_pool") | starts)


def _largest_starting_len(frame: pl.LazyFrame, windows: int, steps: int = _BISECTION_STEPS + 4) -> pl.LazyFrame:
    """`pool.largest_starting_len` on every row: the largest max_model_len in [1, limit] that
    starts (`_fitted_len`, 0 when not even one token does). As there, only the rows where one token
    starts and the limit does not are searched (by bisection over tokens): most deployments start at
    the model's limit, and the others' rows are a small part of the frame."""
    limit, one = pl.col("max_model_len"), pl.lit(1, _I64)
    frame = frame.with_columns(_starts(windows, limit).alias("_at_limit"), _starts(windows, one).alias("_at_one"))
    search = ~pl.col("_at_limit") & pl.col("_at_one")
    settled = frame.filter(~search).with_columns(
        pl.when(pl.col("_at_limit")).then(limit).otherwise(pl.lit(0, _I64)).alias("_fitted_len")
    )
    searched = frame.filter(search).with_columns(pl.lit(1, _I64).alias("_lo"), limit.alias("_hi"))
    searched = _bisect(searched, steps, lambda length: _starts(windows, length))
    searched = searched.with_columns(pl.col("_lo").alias("_fitted_len")).drop("_lo", "_hi")
    return pl.concat([settled, searched]).drop("_at_limit", "_at_one")


def _stage_budget(s: int, stage_slots: int, profiles: Sequence[EngineProfile]) -> pl.Expr:
    """The KV budget of candidate stage `s`: the engine's `kv_budget` over the weights and overhead of the pipeline
    stage it sizes (`_stage_{s}`), each the most loaded stage's less that stage's shortfall where the engine budgets
    the stages apart (`capacity.estimate._stage_budgets`); else the most loaded stage's."""
    total, util = pl.col("gpu_memory_bytes"), pl.col("gpu_memory_utilization")
    weights, overhead = pl.col("weights_bytes_per_gpu"), pl.col("overhead_bytes_per_gpu")
    if not stage_slots:  # one stage: the most loaded stage's, whatever the engine
        return _per_engine(profiles, lambda p: p.kv_budget(total, util, weights, overhead))
    stage = pl.col(f"_stage_{s}")

    def shortfall(prefix: str) -> pl.Expr:
        expr = pl.lit(0, _I64)
        for j in reversed(range(stage_slots)):
            expr = pl.when(stage == j).then(pl.col(f"{prefix}_{j}")).otherwise(expr)
        return expr

    apart_weights, apart_overhead = weights - shortfall("_weights_short"), overhead - shortfall("_overhead_short")

    def budget(p: EngineProfile) -> pl.Expr:
        if p.budgets_per_stage:
            return p.kv_budget(total, util, apart_weights, apart_overhead)
        return p.kv_budget(total, util, weights, overhead)

    return _per_engine(profiles, budget)


def _stage_capacity(s: int, budget_col: pl.Expr) -> pl.Expr:
    """Units of candidate stage `s`'s pool at the deployment's KV budget (null: no such stage)."""
    unit, den, state = pl.col(f"_unit_{s}"), pl.col(f"_swa_den_{s}"), pl.col(f"_state_{s}")
    return (
        pl.when(pl.col(f"_shape_{s}").is_null())
        .then(None)
        .when(budget_col <= 0)
        .then(0)
        .when(den.is_not_null())  # SGLang hybrid SWA: the full pool's tokens, aligned once the stage is chosen
        .then(sglang_rules.hybrid_full_tokens(budget_col, den))
        .when(state.is_not_null())  # SGLang Mamba hybrid: the state pool first, then the KV pool
        .then(sglang_rules.mamba_pool_pages(budget_col, state, pl.col(f"_state_slots_{s}"), unit))
        .when(unit > 0)
        .then(budget_col // unit)
        .otherwise(0)
    )


def _sized(
    dep: pl.LazyFrame,
    overheads: pl.LazyFrame,
    candidates: pl.LazyFrame,
    width: int,
    shapes: pl.LazyFrame,
    windows: int,
    profiles: Sequence[EngineProfile],
    max_limit: int | None = None,
    stage_slots: int = 1,
) -> pl.LazyFrame:
    """Overhead, KV budget, the tightest stage's pool, the max_model_len the engine starts with
    and the printed KV cache size per deployment. `max_limit`, the largest max_model_len among the
    rows where known, bounds the steps of the start search (its bit length settles every row). Each
    candidate stage is sized from its own stage's budget where the engine budgets the stages apart
    (`EngineProfile.budgets_per_stage`: the shortfall columns of `stage_slots` stages), and the
    deployment's budget is the tightest stage's."""
    dep = dep.join(
        overheads,
        on=["model_idx", "engine_idx", "tp", "pp", "dp", "max_num_seqs", "pool_max_num_batched_tokens", "overhead_link"],
        how="inner",
        nulls_equal=True,
    ).join(candidates, on=["kv_id", "base_block_size", "state_checkpoints"], how="inner").with_columns(
        pl.col("tp").alias("perf_tp"), pl.col("pp").alias("perf_pp")
    )

    dep = dep.with_columns(_stage_budget(s, stage_slots, profiles).alias(f"_budget_{s}") for s in range(width))

    # each stage's capacity; the engine sizes every rank to the first stage with the fewest units
    caps = [_stage_capacity(s, pl.col(f"_budget_{s}")).alias(f"_cap_{s}") for s in range(width)]
    dep = dep.with_columns(caps).with_columns(pl.min_horizontal(f"_cap_{s}" for s in range(width)).alias("_capacity"))
    def of_tightest(column: str) -> pl.Expr:
        """`<column>_<s>` of the first stage with the fewest units (the stage every rank is sized to)."""
        return pl.coalesce(
            pl.when(pl.col(f"_cap_{s}") == pl.col("_capacity")).then(pl.col(f"{column}_{s}")) for s in range(width)
        )

    dep = dep.with_columns(
        of_tightest("_shape").alias("_shape"),
        of_tightest("_unit").alias("pool_unit_bytes"),
        of_tightest("_budget").alias("kv_budget_bytes_per_gpu"),
    ).join(shapes, on="_shape", how="left")
    budget_col = pl.col("kv_budget_bytes_per_gpu")

    chosen_state = of_tightest("_state")
    capacity, page, window = pl.col("_capacity"), pl.col("block_size"), pl.col("pool_swa_window")
    # SGLang's second pool: the Mamba state slots (a request holds `pool_swa_window` of them), or the
    # hybrid SWA pool (tokens rounded to pages; a request holds min(T, window) of them)
    is_mamba = chosen_state.is_not_null() & (window > 0)
    is_swa = (window > 0) & ~is_mamba
    full_tokens, swa_tokens = sglang_rules.hybrid_swa_pools(capacity, pl.col("pool_swa_floor"), page)
    dep = dep.with_columns(
        pl.when(budget_col <= 0).then(0).when(is_swa).then(full_tokens).otherwise(capacity).alias("num_blocks"),
        pl.when(budget_col > 0).then(page).otherwise(pl.col("base_block_size")).alias("block_size"),
        pl.when(is_swa & (budget_col > 0)).then(swa_tokens)
        .when(is_mamba).then(sglang_rules.mamba_pool_slots(budget_col, chosen_state, capacity))
        .alias("pool_swa_capacity"),
        _per_engine(profiles, lambda p: p.start_reserved_units).cast(_I64).alias("_start_reserved"),
        _per_engine(profiles, lambda p: p.refuses_short_pool).cast(pl.Boolean).alias("_refuses_short_pool"),
    )  # fmt: skip

    # the max_model_len the deployment runs with: the model's limit when the engine starts with it,
    # else the largest length that starts (vLLM's auto-fit; the limit again when none does, and
    # then nothing fits: no budget, or not one block)
    fitted = pl.col("_fitted_len")
    steps = _BISECTION_STEPS + 4 if max_limit is None else max(1, max_limit.bit_length())
    dep = _largest_starting_len(dep, windows, steps).with_columns(
        pl.when(fitted > 0).then(fitted).otherwise(pl.col("max_model_len")).alias("max_model_len")
    )

    # "GPU KV cache size" at max_model_len, as the engine version prints it
    limit, blocks, bs = pl.col("max_model_len"), pl.col("num_blocks"), pl.col("block_size")
    numerator, denominator = _pool_terms(windows).concurrency_ratio(limit)
    dep = dep.with_columns(numerator.alias("_conc_num"), denominator.alias("_conc_den"))
    conc = pl.col("_conc_num").cast(_F64) / pl.col("_conc_den")
    printed = _per_engine(
        profiles, lambda p: p.kv_cache_tokens(blocks, pl.col("pool_num_groups"), bs, conc, limit)
    ).cast(_I64)
    dep = dep.with_columns(
        pl.when((blocks <= 0) | (limit <= 0)).then(0).otherwise(printed).alias("kv_cache_tokens"),
        derived_deployment_columns(pl.col)["physical_kv_token_slots"].alias("physical_kv_token_slots"),
    )
    # the running-sequence cap the engine derives from its pool where the deployment sets none (SGLang)
    state_slots = pl.when(is_mamba).then(pl.col("pool_swa_capacity")).otherwise(0)
    tokens = pl.col("kv_cache_tokens")
    cap = _per_engine(profiles, lambda p: p.sequence_cap(tokens, limit, state_slots, window)).cast(_I64)
    return dep.with_columns(pl.coalesce(pl.col("max_num_seqs"), pl.when(cap > 0).then(cap)).alias("max_num_seqs")).drop(
        "_start_reserved", "_refuses_short_pool", "_fitted_len", "_conc_num", "_conc_den"
    )


def _window_count(frame: pl.LazyFrame) -> int:
    names = frame.collect_schema().names()
    return sum(1 for name in names if name.startswith("pool_window_") and name.endswith("_groups"))
