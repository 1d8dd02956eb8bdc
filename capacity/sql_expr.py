"""Arithmetic on DuckDB columns with Python's semantics, as SQL text.

`SqlExpr` is the third kind of number the rules written over `capacity.numeric.Num` accept (after Python
numbers and Polars expressions): the same rule renders the SQL of a view, so that a table can keep the
inputs of a rule and compute its result when read (the grid's context rows: `capacity.grid.staged`).
Each operator renders what Python and Polars compute on the same values:

- `//` floors (DuckDB's `//` truncates toward zero) and `%` takes the divisor's sign, on integers;
  on doubles `//` is `floor(a / b)`;
- `/` divides as doubles (DuckDB's `/` does, for integers too; x / 0.0 is +-inf or NaN, as IEEE says
  and `ieee_floating_point_ops`, DuckDB's default, keeps);
- float literals are written with an exponent, which DuckDB reads as DOUBLE (`0.1` alone would be a
  DECIMAL), ints as BIGINT, so that no product of literals overflows a 32-bit INTEGER.

Integers overflow with an error in DuckDB where Polars wraps: the rules stay far below 2**63.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any


class SqlKind(Enum):
    """The value kind of an expression: what `/`, `//` and the casts must render."""

    INT = "BIGINT"
    FLOAT = "DOUBLE"
    BOOL = "BOOLEAN"


def _literal(value: object) -> SqlExpr:
    if isinstance(value, SqlExpr):
        return value
    if isinstance(value, bool):
        return SqlExpr("TRUE" if value else "FALSE", SqlKind.BOOL)
    if isinstance(value, int):
        return SqlExpr(f"CAST({value} AS BIGINT)", SqlKind.INT)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return SqlExpr(f"CAST('{value}' AS DOUBLE)", SqlKind.FLOAT)
        text = repr(value)
        return SqlExpr(f"({text if 'e' in text else text + 'e0'})", SqlKind.FLOAT)
    if value is None:  # a missing figure: a null double
        return SqlExpr("CAST(NULL AS DOUBLE)", SqlKind.FLOAT)
    raise TypeError(f"no SQL literal for {type(value).__name__}")


def _arith_kind(a: SqlExpr, b: SqlExpr) -> SqlKind:
    return SqlKind.FLOAT if SqlKind.FLOAT in (a.kind, b.kind) else SqlKind.INT


class SqlExpr:
    """A SQL expression and its kind; Python's operators build bigger ones (as `pl.Expr`'s do)."""

    __slots__ = ("kind", "sql")
    __hash__ = None  # type: ignore[assignment]  # `==` builds an expression, as on pl.Expr

    def __init__(self, sql: str, kind: SqlKind) -> None:
        self.sql = sql
        self.kind = kind

    def __repr__(self) -> str:
        return f"SqlExpr({self.sql!r}, {self.kind.name})"

    @staticmethod
    def column(name: str, kind: SqlKind) -> SqlExpr:
        return SqlExpr(f'"{name}"', kind)

    # --- arithmetic ------------------------------------------------------------------------------
    def _binary(self, other: object, op: str, reverse: bool = False) -> SqlExpr:
        b = _literal(other)
        left, right = (b, self) if reverse else (self, b)
        return SqlExpr(f"({left.sql} {op} {right.sql})", _arith_kind(left, right))

    def __add__(self, other: object) -> SqlExpr:
        return self._binary(other, "+")

    def __radd__(self, other: object) -> SqlExpr:
        return self._binary(other, "+", True)

    def __sub__(self, other: object) -> SqlExpr:
        return self._binary(other, "-")

    def __rsub__(self, other: object) -> SqlExpr:
        return self._binary(other, "-", True)

    def __mul__(self, other: object) -> SqlExpr:
        return self._binary(other, "*")

    def __rmul__(self, other: object) -> SqlExpr:
        return self._binary(other, "*", True)

    def __truediv__(self, other: object) -> SqlExpr:
        return _true_div(self, _literal(other))

    def __rtruediv__(self, other: object) -> SqlExpr:
        return _true_div(_literal(other), self)

    def __floordiv__(self, other: object) -> SqlExpr:
        return _floor_div(self, _literal(other))

    def __rfloordiv__(self, other: object) -> SqlExpr:
        return _floor_div(_literal(other), self)

    def __mod__(self, other: object) -> SqlExpr:
        return _python_mod(self, _literal(other))

    def __rmod__(self, other: object) -> SqlExpr:
        return _python_mod(_literal(other), self)

    def __pow__(self, other: object) -> SqlExpr:
        return SqlExpr(f"pow({self.as_float().sql}, {_literal(other).as_float().sql})", SqlKind.FLOAT)

    def __rpow__(self, other: object) -> SqlExpr:
        return SqlExpr(f"pow({_literal(other).as_float().sql}, {self.as_float().sql})", SqlKind.FLOAT)

    def __neg__(self) -> SqlExpr:
        return SqlExpr(f"(- {self.sql})", self.kind)

    def __abs__(self) -> SqlExpr:
        return SqlExpr(f"abs({self.sql})", self.kind)

    # --- comparisons and logic -------------------------------------------------------------------
    def _compare(self, other: object, op: str) -> SqlExpr:
        return SqlExpr(f"({self.sql} {op} {_literal(other).sql})", SqlKind.BOOL)

    def __lt__(self, other: object) -> SqlExpr:
        return self._compare(other, "<")

    def __le__(self, other: object) -> SqlExpr:
        return self._compare(other, "<=")

    def __gt__(self, other: object) -> SqlExpr:
        return self._compare(other, ">")

    def __ge__(self, other: object) -> SqlExpr:
        return self._compare(other, ">=")

    def __eq__(self, other: object) -> SqlExpr:  # type: ignore[override]
        return self._compare(other, "=")

    def __ne__(self, other: object) -> SqlExpr:  # type: ignore[override]
        return self._compare(other, "<>")

    def __and__(self, other: object) -> SqlExpr:
        return SqlExpr(f"({self.sql} AND {_literal(other).sql})", SqlKind.BOOL)

    def __rand__(self, other: object) -> SqlExpr:
        return SqlExpr(f"({_literal(other).sql} AND {self.sql})", SqlKind.BOOL)

    def __or__(self, other: object) -> SqlExpr:
        return SqlExpr(f"({self.sql} OR {_literal(other).sql})", SqlKind.BOOL)

    def __ror__(self, other: object) -> SqlExpr:
        return SqlExpr(f"({_literal(other).sql} OR {self.sql})", SqlKind.BOOL)

    def __invert__(self) -> SqlExpr:
        return SqlExpr(f"(NOT {self.sql})", SqlKind.BOOL)

    def __bool__(self) -> bool:
        raise TypeError("a SQL expression has no truth value; use numeric.choose")

    # --- casts and tests -------------------------------------------------------------------------
    def as_float(self) -> SqlExpr:
        return self if self.kind is SqlKind.FLOAT else SqlExpr(f"CAST({self.sql} AS DOUBLE)", SqlKind.FLOAT)

    def cast(self, kind: SqlKind) -> SqlExpr:
        """A Polars-style cast: to BIGINT a double truncates toward zero (DuckDB's CAST would round)."""
        if kind is self.kind:
            return self
        if kind is SqlKind.INT and self.kind is SqlKind.FLOAT:
            return SqlExpr(f"CAST(trunc({self.sql}) AS BIGINT)", SqlKind.INT)
        return SqlExpr(f"CAST({self.sql} AS {kind.value})", kind)

    def is_not_null(self) -> SqlExpr:
        return SqlExpr(f"({self.sql} IS NOT NULL)", SqlKind.BOOL)

    def is_finite(self) -> SqlExpr:
        return SqlExpr(f"isfinite({self.as_float().sql})", SqlKind.BOOL)

    def ceil(self) -> SqlExpr:
        return SqlExpr(f"ceil({self.as_float().sql})", SqlKind.FLOAT)


def _true_div(a: SqlExpr, b: SqlExpr) -> SqlExpr:
    return SqlExpr(f"({a.as_float().sql} / {b.as_float().sql})", SqlKind.FLOAT)


def _floor_div(a: SqlExpr, b: SqlExpr) -> SqlExpr:
    if SqlKind.FLOAT in (a.kind, b.kind):
        return SqlExpr(f"floor({a.as_float().sql} / {b.as_float().sql})", SqlKind.FLOAT)
    # truncated quotient, one less where the remainder is non-zero and the signs differ
    return SqlExpr(
        f"(({a.sql} // {b.sql}) - CASE WHEN ({a.sql} % {b.sql}) <> 0 AND (({a.sql} < 0) <> ({b.sql} < 0)) "
        f"THEN 1 ELSE 0 END)",
        SqlKind.INT,
    )


def _python_mod(a: SqlExpr, b: SqlExpr) -> SqlExpr:
    if SqlKind.FLOAT in (a.kind, b.kind):
        x, y = a.as_float().sql, b.as_float().sql
        return SqlExpr(f"({x} - floor({x} / {y}) * {y})", SqlKind.FLOAT)
    return SqlExpr(f"((({a.sql} % {b.sql}) + {b.sql}) % {b.sql})", SqlKind.INT)


def sql_choose(condition: Any, then: Any, otherwise: Any) -> SqlExpr:
    """`CASE WHEN`: `then` where the condition holds, else `otherwise` (a null condition: otherwise)."""
    a, b = _literal(then), _literal(otherwise)
    kind = SqlKind.BOOL if a.kind is b.kind is SqlKind.BOOL else _arith_kind(a, b)
    return SqlExpr(f"(CASE WHEN {_literal(condition).sql} THEN {a.sql} ELSE {b.sql} END)", kind)


def sql_least(*values: Any) -> SqlExpr:
    """`least`, which skips nulls as Polars' `min_horizontal` does."""
    items = [_literal(v) for v in values]
    kind = SqlKind.FLOAT if any(i.kind is SqlKind.FLOAT for i in items) else SqlKind.INT
    return SqlExpr(f"least({', '.join(i.sql for i in items)})", kind)


def sql_greatest(*values: Any) -> SqlExpr:
    """`greatest`, which skips nulls as Polars' `max_horizontal` does."""
    items = [_literal(v) for v in values]
    kind = SqlKind.FLOAT if any(i.kind is SqlKind.FLOAT for i in items) else SqlKind.INT
    return SqlExpr(f"greatest({', '.join(i.sql for i in items)})", kind)


def sql_literal(value: object) -> SqlExpr:
    """A Python number, bool or None as an expression."""
    return _literal(value)
