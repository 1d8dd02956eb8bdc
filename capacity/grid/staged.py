"""Rows computed in stages, on a Polars LazyFrame or as the SQL of a view (`StagedRows`).

The context rows of the grid are one rule set (`capacity.grid.contexts._at_contexts`) evaluated two ways:
by Polars when the grid is collected, and by DuckDB when a published grid keeps only the deployments and
computes its context rows when read (`capacity.grid.view.context_view_sql`). The rule set asks its rows
for columns (`col`) and adds columns stage by stage (`with_columns`: the expressions of one stage read
the columns of the stages before, as Polars' `with_columns` does); each stage of the SQL form is a
SELECT around the one before, so no expression is written out twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import polars as pl

from capacity.numeric import Num
from capacity.sql_expr import SqlExpr, SqlKind, sql_literal


class StagedRows(Protocol):
    """Rows that give their columns as numbers of one kind and take new columns a stage at a time."""

    def col(self, name: str) -> Num: ...

    def with_columns(self, columns: Mapping[str, Num]) -> StagedRows: ...

    def drop(self, *names: str) -> StagedRows: ...


@dataclass(frozen=True, slots=True)
class FrameRows:
    """Rows of a Polars LazyFrame: columns are `pl.col`, a stage is one `with_columns`."""

    frame: pl.LazyFrame

    def col(self, name: str) -> pl.Expr:
        return pl.col(name)

    def with_columns(self, columns: Mapping[str, Num]) -> FrameRows:
        exprs = [_polars(v).alias(k) for k, v in columns.items()]
        return FrameRows(self.frame.with_columns(exprs))

    def drop(self, *names: str) -> FrameRows:
        return FrameRows(self.frame.drop(*names))


def _polars(value: Num) -> pl.Expr:
    """A stage's value as an expression (None: a null double, a missing figure)."""
    if isinstance(value, pl.Expr):
        return value
    return pl.lit(None, pl.Float64) if value is None else pl.lit(value)


@dataclass(frozen=True, slots=True)
class SqlRows:
    """Rows of a SQL SELECT whose columns and kinds are known: columns are `SqlExpr`s, a stage is a
    SELECT over the stage before (a column of the same name is replaced in place). The stages of one
    chain share `kinds`, which each stage extends: a `col` taken from an earlier stage (as a rule set
    takes it once, at the start) also reads the columns added after it."""

    sql: str
    kinds: dict[str, SqlKind]

    def col(self, name: str) -> SqlExpr:
        return SqlExpr.column(name, self.kinds[name])

    def with_columns(self, columns: Mapping[str, Num]) -> SqlRows:
        exprs = {name: sql_literal(value) for name, value in columns.items()}
        replaced = [f'{e.sql} AS "{name}"' for name, e in exprs.items() if name in self.kinds]
        added = [f'{e.sql} AS "{name}"' for name, e in exprs.items() if name not in self.kinds]
        star = f"* REPLACE ({', '.join(replaced)})" if replaced else "*"
        select = ",\n  ".join([star, *added])
        self.kinds.update((name, e.kind) for name, e in exprs.items())
        return SqlRows(f"SELECT {select}\nFROM (\n{self.sql}\n)", self.kinds)

    def drop(self, *names: str) -> SqlRows:
        listed = ", ".join(f'"{n}"' for n in names)
        for name in names:
            del self.kinds[name]
        return SqlRows(f"SELECT * EXCLUDE ({listed})\nFROM (\n{self.sql}\n)", self.kinds)
