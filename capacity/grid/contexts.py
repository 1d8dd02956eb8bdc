"""The context rows: a deployment at each grid context (B_max, the printed concurrency rounded as
Python rounds it, the fit, the speed columns), and `build_capacity_grid`, deployments and contexts in
one plan."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from capacity.columns import grid_select
from capacity.grid.columns import PERF_WINDOW_SLOTS
from capacity.grid.frames import build_deployments
from capacity.grid.options import GridModel, GridOptions
from capacity.grid.sizing import _pool_terms, _window_count
from capacity.grid.speed import _with_speed
from capacity.grid.staged import FrameRows, StagedRows
from capacity.numeric import Num, as_float, choose, minimum
from capacity.spec import GpuSku


def with_python_round(frame: pl.LazyFrame, numerator: str, denominator: str, out: str, digits: int = 4) -> pl.LazyFrame:
    """Add `out` = `round(numerator / denominator, digits)` exactly as Python rounds the float quotient.

    Polars' `round` scales in floating point and breaks ties differently from Python (1/160 = 0.00625
    gives 0.0063 in Python, 0.0062 in Polars). Python rounds the exact binary value of the quotient to
    the nearest decimal, ties to even. Off a tie the exact rational decides (the quotient's rounding
    error is far below the distance to the tie for numerators under 2**53 / (2 * 10**digits)); on a
    tie the side of the float quotient decides, found exactly with Veltkamp's split (fl(m / 5**d)
    times 5**d is computed without rounding error). Staged columns keep the expression trees small."""
    rows = _python_round(FrameRows(frame), numerator, denominator, out, digits)
    assert isinstance(rows, FrameRows)
    return rows.frame


def _python_round(rows: StagedRows, numerator: str, denominator: str, out: str, digits: int) -> StagedRows:
    """`with_python_round` on staged rows (Polars or SQL)."""
    rows = _python_round_scaled(rows, numerator, denominator, "_k", digits)
    k = rows.col("_k")
    return rows.with_columns({out: as_float(k) / _exact_divisor(k, 10**digits)}).drop("_k")


def _python_round_scaled(rows: StagedRows, numerator: str, denominator: str, out: str, digits: int) -> StagedRows:
    """Add `out` = `round(numerator / denominator, digits) * 10**digits` as an exact integer: the
    rounded quotient is then `out / 10**digits`, one correctly rounded division (see `with_python_round`)."""
    scale = 10**digits
    odd = 5**digits  # 2 * 10**digits = 2**(digits + 1) * odd: the power of two scales exactly
    col = rows.col
    num, den = col(numerator), col(denominator)
    rows = rows.with_columns({"_k0": num * scale // den, "_twice_rest": 2 * (num * scale % den)})
    k0 = col("_k0")
    m = 2 * k0 + 1  # the tie, in units of 1 / (2 * scale)
    rows = rows.with_columns({"_f": as_float(m) / _exact_divisor(k0, odd)})
    f = col("_f")
    rows = rows.with_columns({"_c": f * 134217729.0})  # 2**27 + 1
    rows = rows.with_columns({"_high": col("_c") - (col("_c") - f)})
    high = col("_high")
    side = (high * odd - as_float(m)) + (f - high) * odd  # sign of fl(m / odd) * odd - m, exactly
    tie = choose(side > 0, k0 + 1, choose(side < 0, k0, k0 + k0 % 2))
    twice_rest = col("_twice_rest")
    k = choose(twice_rest < den, k0, choose(twice_rest > den, k0 + 1, tie))
    return rows.with_columns({out: k}).drop("_k0", "_twice_rest", "_f", "_c", "_high")


def _exact_divisor(like: Num, value: int) -> Num:
    """`value` as a Float64 column shaped like `like`. Polars turns a division by a literal into a
    multiplication by its reciprocal, which is not IEEE division (1309688 / 10000 would give
    130.96880000000002, not 130.9688); a column divisor keeps the correctly rounded quotient."""
    return as_float(like * 0 + value)



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
    rows = FrameRows(deployments.explode("contexts").rename({"contexts": "context"}))
    grid = _at_contexts(rows, windows, speed=speed)
    assert isinstance(grid, FrameRows)
    return grid.frame.select(*carry, *grid_select(), *pool)



def _at_contexts(
    rows: StagedRows,
    windows: int,
    scaled: bool = False,
    *,
    speed: bool = True,
    slots: Sequence[int] = tuple(range(PERF_WINDOW_SLOTS)),
) -> StagedRows:
    """CONTEXT_COLUMNS of rows that hold a deployment's pool columns and one `context`
    (`max_concurrency_e4` in place of max_concurrency where `scaled`); the speed reads the perf window
    `slots` given (`speed.used_window_slots`). One rule set for the collected grid (Polars rows) and
    for a view that computes the context rows when read (SQL rows)."""
    col = rows.col
    t = col("context")
    terms = _pool_terms(windows, col)
    # the units of a sequence of T tokens, once per row: B_max and the concurrency both divide by them
    # (Polars' common-subexpression pass computed them twice)
    rows = rows.with_columns({"_units": terms.sequence_units(t)})
    units = col("_units")
    numerator, denominator = terms.concurrency_ratio(t, units)  # the window pool's quotient when it binds
    # nothing of more than max_model_len tokens is admitted (0 there: the engine does not start)
    b_max_memory = choose(t > col("max_model_len"), 0, terms.b_max_memory(t, units))
    rows = rows.with_columns({"b_max_memory": b_max_memory, "_num": numerator, "_den": denominator})
    seqs, memory_bound = col("max_num_seqs"), col("b_max_memory")
    rows = rows.with_columns({"b_max": choose(seqs > 0, minimum(memory_bound, seqs), memory_bound)})
    fits = (col("kv_budget_bytes_per_gpu") > 0) & (col("b_max") >= 1)
    if speed:
        rows = _with_speed(rows, col("b_max"), t, slots)
    else:
        rows = rows.with_columns(dict.fromkeys(("tpot_ms", "output_tokens_per_second"), None))
    blocks = col("num_blocks")
    if scaled:
        rows = _python_round_scaled(rows, "_num", "_den", "_conc", 4)
        concurrency = {"max_concurrency_e4": choose(blocks > 0, col("_conc"), 0)}
    else:
        rows = _python_round(rows, "_num", "_den", "_conc", 4)
        concurrency = {"max_concurrency": choose(blocks > 0, col("_conc"), 0.0)}
    return rows.with_columns({**concurrency, "fits": fits}).drop("_units", "_num", "_den", "_conc")
