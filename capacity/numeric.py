"""Arithmetic that reads the same on Python numbers and Polars expressions.

The engine rules the grid evaluates per row (the KV budget, the printed KV cache size) are written
once with these helpers; `estimate()` calls them with integers, the grid with column expressions.
Python's `int()` truncates toward zero, as a Float64 -> Int64 cast does; `//` floors in both.
"""

from __future__ import annotations

import math
from typing import Any, TypeAlias

import polars as pl

Num: TypeAlias = Any  # int | float | pl.Expr: the helpers below accept either kind


def truncate(value: Num) -> Num:
    """`int(value)`: toward zero."""
    if isinstance(value, pl.Expr):
        return value.cast(pl.Float64).cast(pl.Int64)
    return int(value)


def as_float(value: Num) -> Num:
    if isinstance(value, pl.Expr):
        return value.cast(pl.Float64)
    return float(value)


def at_least(value: Num, floor: int) -> Num:
    """max(value, floor)."""
    if isinstance(value, pl.Expr):
        return pl.max_horizontal(value, pl.lit(floor))
    return max(value, floor)


def ceil(value: Num) -> Num:
    """`math.ceil(value)` as an integer (Int64 for an expression)."""
    if isinstance(value, pl.Expr):
        return value.cast(pl.Float64).ceil().cast(pl.Int64)
    return math.ceil(value)


def choose(condition: Num, then: Num, otherwise: Num) -> Num:
    """`then if condition else otherwise`, row by row for expressions."""
    if isinstance(condition, pl.Expr):
        return pl.when(condition).then(then).otherwise(otherwise)
    return then if condition else otherwise


def cdiv(a: Num, b: Num) -> Num:
    """Ceiling division, `-(-a // b)`: `//` floors on Python ints and Int64 columns alike."""
    return -(-a // b)
