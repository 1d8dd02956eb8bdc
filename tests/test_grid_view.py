"""The grid's context rows as a view (`capacity.grid.view`): DuckDB computes them when read, from the
deployments' inputs, with the rule set the collected grid runs on Polars (`contexts._at_contexts` over
`staged.SqlRows`). The oracle is the collected grid, which `tests/test_grid.py` holds to the scalar
`estimate`; and, for the SQL arithmetic itself, Python's own operators."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import duckdb
import polars as pl
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from capacity import numeric
from capacity.grid import GRID_COLUMNS, GridModel, GridOptions, GridTables, grid_tables, iter_grid_tables
from capacity.grid.view import VIEW_TABLES, context_view_sql, duckdb_kinds
from capacity.spec import GpuSku
from capacity.sql_expr import SqlExpr, SqlKind, sql_literal
from models_registry.sources.gpu_catalog import load_gpu_skus
from tests.test_grid import _catalog_models, _strings, gpus, models

KEYS = ["model", "gpu", "engine", "weight_dtype", "kv_dtype", "tp", "pp", "dp", "ep", "context"]
CATALOG = Path(__file__).resolve().parent.parent / "models_registry" / "catalog"


def _published(tables: GridTables) -> duckdb.DuckDBPyConnection:
    """The view tables of `tables` in a DuckDB database."""
    con = duckdb.connect()
    for name in VIEW_TABLES:
        con.register("frame", getattr(tables, name))
        con.execute(f"create table grid_{name} as select * from frame")
        con.unregister("frame")
    return con


def _view(con: duckdb.DuckDBPyConnection, speed: bool = True) -> pl.DataFrame:
    kinds = {}
    for name in VIEW_TABLES:
        typed = con.execute(
            "select column_name, data_type from information_schema.columns where table_name = ?", [f"grid_{name}"]
        ).fetchall()
        kinds[name] = duckdb_kinds(dict(typed))
    return con.execute(context_view_sql(kinds, speed=speed)).pl()


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return _strings(frame.select(GRID_COLUMNS)).sort(KEYS)


def _assert_view_is_the_grid(
    model_list: Sequence[GridModel], gpu_list: Sequence[GpuSku], options: GridOptions | None = None
) -> pl.DataFrame:
    stored = grid_tables(model_list, gpu_list, options)
    kept = grid_tables(model_list, gpu_list, options, context_view=True)
    expected = stored.grid()
    assert kept.contexts.height == 0 and kept.deployments.height == stored.deployments.height
    assert kept.contexts.schema == stored.contexts.schema  # the empty context table keeps the stored one's dtypes
    # Polars computing the context rows from the kept inputs, and DuckDB computing them in the view
    assert_frame_equal(_strings(kept.grid()), _strings(expected))
    got = _view(_published(kept), speed=(options or GridOptions()).speed)
    assert got.height == expected.height
    assert_frame_equal(_sorted(got), _sorted(expected), check_dtypes=False, check_exact=True)
    return got


def test_view_of_the_hand_models_is_the_grid() -> None:
    got = _assert_view_is_the_grid(models(), gpus())
    assert got.schema["max_concurrency"] == pl.Float64 and got.schema["tpot_ms"] == pl.Float64


@pytest.mark.slow
def test_view_of_the_catalog_is_the_grid() -> None:
    """Every catalog model (sliding and chunked windows, MLA, Mamba and GDN hybrids, MoE with DP x EP)."""
    got = _assert_view_is_the_grid(_catalog_models(), load_gpu_skus(CATALOG / "gpus.yaml"))
    assert got.get_column("tpot_ms").is_not_null().mean() > 0.5  # type: ignore[operator]


def test_view_without_the_speed_model() -> None:
    got = _assert_view_is_the_grid(models()[:6], gpus(), GridOptions(speed=False))
    assert got.get_column("tpot_ms").is_null().all() and got.get_column("output_tokens_per_second").is_null().all()


def test_view_of_chunks_is_the_view_of_the_whole() -> None:
    """Chunks append their deployments and layouts; the last chunk's shapes and settings are the build's."""
    whole = grid_tables(models(), gpus(), context_view=True)
    chunks = list(iter_grid_tables(models(), gpus(), chunk_models=3, context_view=True))
    assert len(chunks) > 1
    joined = GridTables(
        gpus=chunks[0].gpus,
        layouts=pl.concat([c.layouts for c in chunks]),
        deployments=pl.concat([c.deployments for c in chunks]),
        contexts=chunks[0].contexts,
        context_view=True,
        pool_shapes=chunks[-1].pool_shapes,
        settings=chunks[-1].settings,
    )
    assert_frame_equal(_sorted(_view(_published(joined))), _sorted(whole.grid()), check_dtypes=False)


# --- the SQL arithmetic is Python's ----------------------------------------------------------------

INTS = st.integers(-(10**12), 10**12)
NONZERO = INTS.filter(lambda v: v != 0)
FLOATS = st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False)


_CON = duckdb.connect()


def _evaluate(expr: SqlExpr) -> object:
    row = _CON.execute(f"select {expr.sql}").fetchone()
    assert row is not None
    return row[0]


@settings(max_examples=60, deadline=None)
@given(INTS, NONZERO)
def test_integer_operators_are_pythons(a: int, b: int) -> None:
    x, y = SqlExpr.column("a", SqlKind.INT), SqlExpr.column("b", SqlKind.INT)
    con = _CON
    exprs = [x // y, x % y, numeric.cdiv(x, y), x / y, -x + y * 3, numeric.minimum(x, y), numeric.at_least(x, 7)]
    got = con.execute(f"select {', '.join(e.sql for e in exprs)} from (select {a}::bigint as a, {b}::bigint as b)").fetchone()
    assert got == (a // b, a % b, -(-a // b), a / b, -a + b * 3, min(a, b), max(a, 7))


@settings(max_examples=30, deadline=None)
@given(FLOATS, FLOATS.filter(lambda v: v != 0.0))
@example(1.0, 0.1)
@example(-2.2250738585e-313, 90071992548.0)
def test_float_operators_are_pythons(a: float, b: float) -> None:
    x, y = sql_literal(a), sql_literal(b)
    assert _evaluate(x) == a and _evaluate(y) == b  # literals read back exactly (DOUBLE, not DECIMAL)
    assert _evaluate(x / y) == a / b
    # on doubles `//` is floor(a / b), as Polars computes it (the collected grid is the view's judge): Python's
    # float // corrects for the rounding of a / b (1.0 // 0.1 is 9.0 there, 10.0 in Polars and here)
    assert _evaluate(x // y) == pl.select(pl.lit(a, dtype=pl.Float64) // pl.lit(b, dtype=pl.Float64)).item()
    assert _evaluate(x - y * 0.1) == a - b * 0.1
    assert _evaluate(numeric.truncate(x)) == int(a)
    assert _evaluate(numeric.ceil(x)) == math.ceil(a)
    assert _evaluate(abs(x) ** 0.5) == abs(a) ** 0.5


def test_choices_nulls_and_division_by_zero() -> None:
    x = sql_literal(3)
    assert _evaluate(numeric.choose(x > 2, x * 2, 0)) == 6
    assert _evaluate(numeric.choose(x > 5, x * 2, 0)) == 0
    assert _evaluate(numeric.choose(sql_literal(None) > 1, 1, 2)) == 2  # a null condition: otherwise
    assert _evaluate(numeric.minimum(x, sql_literal(None))) == 3  # nulls skipped, as min_horizontal does
    assert _evaluate(sql_literal(1.0) / 0) == math.inf and math.isnan(_evaluate(sql_literal(0.0) / 0))  # type: ignore[arg-type]
    assert _evaluate((sql_literal(1.0) / 0).is_finite()) is False
    assert _evaluate(numeric.both(x > 1, numeric.negate(x > 5))) is True
    with pytest.raises(TypeError):
        bool(x > 1)
