"""The context rows: a deployment at each grid context (B_max, the printed concurrency rounded as
Python rounds it, the fit, the speed columns), and `build_capacity_grid`, deployments and contexts in
one plan."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from capacity.columns import grid_select
from capacity.grid.columns import _F64, PERF_WINDOW_SLOTS
from capacity.grid.frames import build_deployments
from capacity.grid.options import GridModel, GridOptions
from capacity.grid.sizing import _pool_terms, _window_count
from capacity.grid.speed import _with_speed
from capacity.spec import GpuSku


def with_python_round(frame: pl.LazyFrame, numerator: str, denominator: str, out: str, digits: int = 4) -> pl.LazyFrame:
    """Add `out` = `round(numerator / denominator, digits)` exactly as Python rounds the float quotient.

    Polars' `round` scales in floating point and breaks ties differently from Python (1/160 = 0.00625
    gives 0.0063 in Python, 0.0062 in Polars). Python rounds the exact binary value of the quotient to
    the nearest decimal, ties to even. Off a tie the exact rational decides (the quotient's rounding
    error is far below the distance to the tie for numerators under 2**53 / (2 * 10**digits)); on a
    tie the side of the float quotient decides, found exactly with Veltkamp's split (fl(m / 5**d)
    times 5**d is computed without rounding error). Staged columns keep the expression trees small."""
    frame = _python_round_scaled(frame, numerator, denominator, "_k", digits)
    scale = 10**digits
    return frame.with_columns((pl.col("_k").cast(_F64) / _exact_divisor(pl.col("_k"), scale)).alias(out)).drop("_k")


def _python_round_scaled(frame: pl.LazyFrame, numerator: str, denominator: str, out: str, digits: int) -> pl.LazyFrame:
    """Add `out` = `round(numerator / denominator, digits) * 10**digits` as an exact integer: the
    rounded quotient is then `out / 10**digits`, one correctly rounded division (see `with_python_round`)."""
    scale = 10**digits
    odd = 5**digits  # 2 * 10**digits = 2**(digits + 1) * odd: the power of two scales exactly
    num, den = pl.col(numerator), pl.col(denominator)
    frame = frame.with_columns((num * scale // den).alias("_k0"), (2 * (num * scale % den)).alias("_twice_rest"))
    k0 = pl.col("_k0")
    m = 2 * k0 + 1  # the tie, in units of 1 / (2 * scale)
    frame = frame.with_columns((m.cast(_F64) / _exact_divisor(k0, odd)).alias("_f"))
    f = pl.col("_f")
    frame = frame.with_columns((f * 134217729.0).alias("_c"))  # 2**27 + 1
    frame = frame.with_columns((pl.col("_c") - (pl.col("_c") - f)).alias("_high"))
    high = pl.col("_high")
    side = (high * odd - m.cast(_F64)) + (f - high) * odd  # sign of fl(m / odd) * odd - m, exactly
    tie = pl.when(side > 0).then(k0 + 1).when(side < 0).then(k0).otherwise(k0 + k0 % 2)
    twice_rest = pl.col("_twice_rest")
    k = pl.when(twice_rest < den).then(k0).when(twice_rest > den).then(k0 + 1).otherwise(tie)
    return frame.with_columns(k.alias(out)).drop("_k0", "_twice_rest", "_f", "_c", "_high")


def _exact_divisor(like: pl.Expr, value: int) -> pl.Expr:
    """`value` as a Float64 column shaped like `like`. Polars turns a division by a literal into a
    multiplication by its reciprocal, which is not IEEE division (1309688 / 10000 would give
    130.96880000000002, not 130.9688); a column divisor keeps the correctly rounded quotient."""
    return (like * 0 + value).cast(_F64)



def build_capacity_grid(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None = None
) -> pl.LazyFrame:
    """Every deployment at every grid context: GRID_COLUMNS, then the pool columns."""
    return expand_contexts(build_deployments(models, gpus, options), speed=(options or GridOptions()).speed)


def expand_contexts(deployments: pl.LazyFrame, carry: Sequence[str] = (), *, speed: bool = True) -> pl.LazyFrame:
    """The deployment frame at each of its `contexts`: B_max, the printed concurrency and the fit.
    Returns GRID_COLUMNS and the pool columns, after the `carry` columns of the deployment frame
    (e.g. a deployment id, for a table that keeps deployments and contexts apart)."""
    windows = _window_count(deployments)
    pool = [c for c in deployments.collect_schema().names() if c.startswith("pool_")]
    grid = _at_contexts(deployments.explode("contexts").rename({"contexts": "context"}), windows, speed=speed)
    return grid.select(*carry, *grid_select(), *pool)



def _at_contexts(
    rows: pl.LazyFrame,
    windows: int,
    scaled: bool = False,
    *,
    speed: bool = True,
    slots: Sequence[int] = tuple(range(PERF_WINDOW_SLOTS)),
) -> pl.LazyFrame:
    """CONTEXT_COLUMNS of rows that hold a deployment's pool columns and one `context`
    (`max_concurrency_e4` in place of max_concurrency where `scaled`); the speed reads the perf window
    `slots` given (`speed.used_window_slots`)."""
    t = pl.col("context")
    blocks, seqs = pl.col("num_blocks"), pl.col("max_num_seqs")
    terms = _pool_terms(windows)
    # the units of a sequence of T tokens, once per row: B_max and the concurrency both divide by them
    # (Polars' common-subexpression pass computed them twice)
    units = pl.col("_units")
    numerator, denominator = terms.concurrency_ratio(t, units)  # the window pool's quotient when it binds
    grid = (
        rows.with_columns(terms.sequence_units(t).alias("_units"))
        .with_columns(
            # nothing of more than max_model_len tokens is admitted (0 there: the engine does not start)
            pl.when(t > pl.col("max_model_len")).then(0).otherwise(terms.b_max_memory(t, units)).alias("b_max_memory"),
            numerator.alias("_num"),
            denominator.alias("_den"),
        )
        .with_columns(
            pl.when(seqs > 0).then(pl.min_horizontal("b_max_memory", seqs)).otherwise("b_max_memory").alias("b_max"),
        )
    )
    fits = ((pl.col("kv_budget_bytes_per_gpu") > 0) & (pl.col("b_max") >= 1)).alias("fits")
    if speed:
        grid = _with_speed(grid, pl.col("b_max"), t, slots)
    else:
        grid = grid.with_columns(pl.lit(None, _F64).alias(c) for c in ("tpot_ms", "output_tokens_per_second"))
    if scaled:
        grid = _python_round_scaled(grid, "_num", "_den", "_conc", 4)
        concurrency = pl.when(blocks > 0).then(pl.col("_conc")).otherwise(0).alias("max_concurrency_e4")
    else:
        grid = with_python_round(grid, "_num", "_den", "_conc")
        concurrency = pl.when(blocks > 0).then(pl.col("_conc")).otherwise(0.0).alias("max_concurrency")
    return grid.with_columns(concurrency, fits).drop("_units", "_num", "_den", "_conc")
