"""Arithmetic that reads the same on Python numbers, Polars expressions and SQL expressions.

The rules the grid evaluates per row (the KV budget, the printed KV cache size, the pool rules of
`capacity.pool`, the bisections) are written once with these helpers; `estimate()` calls them with
integers, the grid with column expressions, and a view that computes its rows when read with
`capacity.sql_expr.SqlExpr`s.
Python's `int()` truncates toward zero, as a Float64 -> Int64 cast does; `//` floors in all three.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeAlias

import polars as pl

from capacity.sql_expr import SqlExpr, SqlKind, sql_choose, sql_greatest, sql_least

Num: TypeAlias = Any  # int | float | pl.Expr | SqlExpr: the helpers below accept any of them


def truncate(value: Num) -> Num:
    """`int(value)`: toward zero."""
    if isinstance(value, pl.Expr):
        return value.cast(pl.Float64).cast(pl.Int64)
    if isinstance(value, SqlExpr):
        return value.as_float().cast(SqlKind.INT)
    return int(value)


def as_float(value: Num) -> Num:
    if isinstance(value, pl.Expr):
        return value.cast(pl.Float64)
    if isinstance(value, SqlExpr):
        return value.as_float()
    return float(value)


def at_least(value: Num, floor: int) -> Num:
    """max(value, floor)."""
    if isinstance(value, pl.Expr):
        return pl.max_horizontal(value, pl.lit(floor))
    if isinstance(value, SqlExpr):
        return sql_greatest(value, floor)
    return max(value, floor)


def ceil(value: Num) -> Num:
    """`math.ceil(value)` as an integer (Int64 for an expression)."""
    if isinstance(value, pl.Expr):
        return value.cast(pl.Float64).ceil().cast(pl.Int64)
    if isinstance(value, SqlExpr):
        return value.ceil().cast(SqlKind.INT)
    return math.ceil(value)


def choose(condition: Num, then: Num, otherwise: Num) -> Num:
    """`then if condition else otherwise`, row by row for expressions."""
    if isinstance(condition, pl.Expr):
        return pl.when(condition).then(then).otherwise(otherwise)
    if isinstance(condition, SqlExpr):
        return sql_choose(condition, then, otherwise)
    return then if condition else otherwise


def cdiv(a: Num, b: Num) -> Num:
    """Ceiling division, `-(-a // b)`: `//` floors on Python ints and Int64 columns alike."""
    return -(-a // b)


def minimum(a: Num, b: Num) -> Num:
    """min(a, b), row by row for expressions."""
    if isinstance(a, pl.Expr) or isinstance(b, pl.Expr):
        return pl.min_horizontal(a, b)
    if isinstance(a, SqlExpr) or isinstance(b, SqlExpr):
        return sql_least(a, b)
    return min(a, b)


def both(a: Num, b: Num) -> Num:
    """`a and b` (`&` of two boolean columns)."""
    if isinstance(a, (pl.Expr, SqlExpr)) or isinstance(b, (pl.Expr, SqlExpr)):
        return a & b
    return bool(a and b)


def negate(a: Num) -> Num:
    """`not a` (`~` of a boolean column)."""
    if isinstance(a, (pl.Expr, SqlExpr)):
        return ~a
    return not a


def bisect_step(lo: Num, hi: Num, fits: Callable[[Num], Num]) -> tuple[Num, Num]:
    """One halving of [lo, hi], where `lo` fits (or is the floor) and `hi` does not: the middle
    becomes `lo` when it fits, else `hi`; a settled interval (hi - lo <= 1) stays. The scalar rules
    step until settled; the grid runs a fixed number of steps, every row at once."""
    mid = (lo + hi) // 2
    ok = fits(mid)
    open_ = hi - lo > 1
    if not isinstance(ok, (pl.Expr, SqlExpr)):  # integers: the same update, without the expression helpers
        return (mid if open_ and ok else lo), (mid if open_ and not ok else hi)
    return choose(both(open_, ok), mid, lo), choose(both(open_, negate(ok)), mid, hi)
