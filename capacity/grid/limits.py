"""The max context per deployment and target concurrency: `pool.max_context`'s bisection on every row."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from capacity.grid.columns import _I64, _ID, DEPLOYMENT_KEYS
from capacity.grid.options import TARGET_CONCURRENCIES
from capacity.grid.sizing import _BISECTION_STEPS, _bisect, _pool_terms, _window_count

# the deployment columns the max-context search reads besides the pool_* ones
_LIMIT_INPUTS = ("num_blocks", "block_size", "max_model_len", "max_num_seqs")


def max_contexts(
    deployments: pl.DataFrame, concurrencies: Sequence[int], num_blocks: pl.Expr | None = None
) -> pl.DataFrame:
    """deployment_id, concurrency, max_context of deployments with their pool columns
    (`GridTables.pools`): `pool.max_context` on every row, at the pool's own block count or at
    `num_blocks` (the same pool at another budget, e.g. `calibration.resized_units`)."""
    if num_blocks is not None:
        deployments = deployments.with_columns(num_blocks.alias("num_blocks"))
    bound = deployments.select((pl.col("max_model_len") // pl.col("block_size")).max()).item()
    steps = max(1, int(bound or 0).bit_length())
    return (
        _max_contexts(deployments.lazy(), ["deployment_id"], concurrencies, steps)
        .select(pl.col("deployment_id").cast(_ID), "concurrency", "max_context")
        .collect()
    )


def build_context_limits(grid: pl.LazyFrame, concurrencies: Sequence[int] = TARGET_CONCURRENCIES) -> pl.LazyFrame:
    """`max_context` per deployment and target concurrency: the largest T (a multiple of the block
    size, or the limit itself) at which B sequences fit, the same bisection as `pool.max_context`,
    run on every row at once. Takes the grid (it reads the row where context == max_model_len, one per
    deployment) or the deployment frame."""
    names = grid.collect_schema().names()
    last = pl.col("context") == pl.col("context").max().over(DEPLOYMENT_KEYS)  # one row per deployment
    frame = grid.filter(last) if "context" in names else grid
    return _max_contexts(frame, DEPLOYMENT_KEYS, concurrencies)


def _max_contexts(
    frame: pl.LazyFrame, keys: Sequence[str], concurrencies: Sequence[int], steps: int = _BISECTION_STEPS
) -> pl.LazyFrame:
    """`keys`, concurrency, max_context of a frame with one row per deployment (its pool columns).
    The bisection halves [0, max_model_len // block_size]: `steps` >= the bit length of the largest
    such bound settles every row (further steps change nothing)."""
    names = frame.collect_schema().names()
    windows = _window_count(frame)
    pool = [c for c in names if c.startswith("pool_")]
    frame = frame.select(*keys, *_LIMIT_INPUTS, *pool)
    targets = pl.LazyFrame({"concurrency": list(concurrencies)}, schema={"concurrency": _I64})
    b, bs, limit = pl.col("concurrency"), pl.col("block_size"), pl.col("max_model_len")
    terms = _pool_terms(windows)
    frame = frame.join(targets, how="cross").with_columns(pl.lit(0, _I64).alias("_lo"), (limit // bs).alias("_hi"))
    frame = _bisect(frame, steps, lambda blocks: terms.fits(blocks * bs, b))
    max_context = terms.settle_max_context(pl.col("_lo"), b, limit, pl.col("max_num_seqs"))
    return frame.select(*keys, "concurrency", max_context.alias("max_context"))
