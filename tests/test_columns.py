"""The column dictionary (`capacity.columns`) and what is generated from it: the grid's column tuples
and dtypes, the warehouse's column tuples and column comments, the SQL files' column lists, the
`capplan estimate --json` keys and the README's list of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

import capacity.grid as grid
import warehouse.capacity_grid as warehouse_grid
from capacity import columns as cols
from capacity.grid import build_capacity_grid, grid_tables
from pipelines.cli import app
from tests.conftest import ROOT
from tests.test_grid import gpus, models
from warehouse.sql import (
    DICTIONARY_COMMENTS,
    WAREHOUSE_DIR,
    build_relation,
    column_descriptions,
    header_comment,
    read_sql,
)

RUN = ["run_id", "run_date"]
MART_GRID = [c.name for c in cols.MART_GRID_COLUMNS]
MART_DEPLOYMENTS = [c.name for c in cols.MART_DEPLOYMENT_COLUMNS]


def test_names_are_unique_and_every_column_is_described() -> None:
    names = [c.name for c in cols.COLUMNS]
    assert len(set(names)) == len(names)
    assert all(c.description.endswith(".") for c in cols.COLUMNS)
    contract = [c.contract for c in cols.COLUMNS if c.contract] + [f.key for f in cols.CONTRACT_ONLY]
    assert len(set(contract)) == len(contract)


def test_the_grid_tuples_are_the_dictionarys() -> None:
    assert grid.GRID_COLUMNS is cols.GRID_COLUMNS and grid.CONTEXT_COLUMNS is cols.CONTEXT_COLUMNS
    assert grid.DEPLOYMENT_KEYS is cols.DEPLOYMENT_KEYS
    assert warehouse_grid.CONTEXT_COLUMNS is cols.CONTEXT_COLUMNS
    assert warehouse_grid.DEPLOYMENT_COLUMNS is cols.DEPLOYMENT_COLUMNS
    keys = ("model", "model_family", "gpu", "engine", "engine_version", "weight_dtype", "kv_dtype")
    assert (*keys, "tp", "pp", "dp", "ep", "num_gpus") == cols.DEPLOYMENT_KEYS
    # the grid is the published grid less what the warehouse adds, in the published order
    assert list(cols.GRID_COLUMNS) == [c.name for c in cols.COLUMNS if not c.warehouse]
    assert set(cols.CONTEXT_COLUMNS) | set(cols.DEPLOYMENT_COLUMNS) == set(cols.GRID_COLUMNS)
    assert list(cols.grid_schema()) == list(cols.GRID_COLUMNS)


def test_the_grid_frames_have_the_dictionarys_schema() -> None:
    built = build_capacity_grid(models()[:3], gpus()).collect()
    assert dict(built.select(cols.GRID_COLUMNS).schema) == cols.grid_schema()
    assert dict(grid_tables(models()[:3], gpus()).grid().schema) == cols.grid_schema()


# --- the warehouse --------------------------------------------------------------------------------


def _header_columns(layer: str, table: str) -> list[str]:
    """The names after `columns:` in a SQL file's header, up to the next `key:` line, notes in
    parentheses and any sentence after the list left out."""
    header = header_comment((WAREHOUSE_DIR / layer / f"{table}.sql").read_text(encoding="utf-8"))
    lines = header.split("columns:", 1)[1].splitlines()
    text = [lines[0]]
    for line in lines[1:]:
        if re.match(r"^[a-z][a-z _]*:", line.strip()):
            break
        text.append(line)
    listed = re.split(r"\.(?:\s|$)", re.sub(r"\([^)]*\)", "", " ".join(text)))[0]  # up to the list's full stop
    return [word for word in re.split(r"[,\s]+", listed) if word]


SQL_COLUMNS = [
    ("marts", "capacity_grid_history", MART_GRID),
    ("marts", "capacity_grid", MART_GRID),
    ("marts", "deployments_history", MART_DEPLOYMENTS),
    ("marts", "deployments", MART_DEPLOYMENTS),
    ("staging", "deployments", [*RUN, "deployment_id", *cols.DEPLOYMENT_COLUMNS]),
    ("staging", "capacity_grid", [*RUN, "deployment_id", *cols.CONTEXT_COLUMNS]),
    ("raw", "capacity_grid", ["part_id", "deployment_id", *cols.CONTEXT_COLUMNS]),
]


@pytest.mark.parametrize(("layer", "table", "expected"), SQL_COLUMNS, ids=[f"{x[0]}.{x[1]}" for x in SQL_COLUMNS])
def test_each_sql_header_lists_the_dictionarys_columns(layer: str, table: str, expected: list[str]) -> None:
    assert _header_columns(layer, table) == expected


def _select_list(sql: str, start: str) -> list[str]:
    """The output names of the select list that follows `start` in `sql` (up to its `from`)."""
    body = sql.split(start, 1)[1]
    select = re.split(r"\n\s*from ", body.split("select\n", 1)[1], maxsplit=1)[0]
    return [re.split(r"[\s.]", item.strip())[-1] for item in select.split(",\n")]


@pytest.mark.parametrize(
    ("layer", "table", "start", "expected"),
    [
        ("marts", "capacity_grid_history", "create or replace macro marts.capacity_grid_at", MART_GRID),
        ("marts", "deployments_history", "create or replace view marts.deployments_history", MART_DEPLOYMENTS),
        ("staging", "deployments", "typed as (", [*RUN, "deployment_id", *cols.DEPLOYMENT_COLUMNS]),
        ("staging", "capacity_grid", "typed as (", [*RUN, "deployment_id", *cols.CONTEXT_COLUMNS]),
    ],
)
def test_the_hand_written_select_lists_follow_the_dictionary(
    layer: str, table: str, start: str, expected: list[str]
) -> None:
    sql = read_sql(layer, table)  # as run: `@columns` / `@casts` lines written out
    assert _select_list(sql, start) == expected


def test_staging_casts_to_the_dictionarys_duckdb_types() -> None:
    sql = read_sql("staging", "deployments") + read_sql("staging", "capacity_grid")
    casts = dict(re.findall(r"^\s+(\w+)::(\w+) as \1,?$", sql, flags=re.MULTILINE))
    for name in [*RUN, "deployment_id", *cols.GRID_COLUMNS]:
        assert casts[name].upper() == cols.BY_NAME[name].type.duckdb, name


def test_the_generated_comments_are_not_in_the_sql_files() -> None:
    from_dictionary = {"capacity_grid_history": MART_GRID, "deployments_history": MART_DEPLOYMENTS}
    for (layer, table), comments in DICTIONARY_COMMENTS.items():
        sql = (WAREHOUSE_DIR / layer / f"{table}.sql").read_text(encoding="utf-8")
        assert f"comment on column {layer}.{table}." not in sql
        if table in from_dictionary:  # the others (the diff marts) bring their own descriptions
            assert list(comments) == from_dictionary[table]
    assert {table for _layer, table in DICTIONARY_COMMENTS} >= from_dictionary.keys()


def test_each_mart_column_is_described_once() -> None:
    """A mart's SQL says how it is computed, its YAML what its columns mean: no `comment on column` in the SQL,
    no YAML entry for a column its header does not list, and none repeating a description the marts share
    (that one is written once, in the dictionary; a narrower meaning in the mart's own words is welcome)."""
    repeated, unknown = [], []
    for path in sorted((WAREHOUSE_DIR / "marts").glob("*.sql")):
        assert "comment on column" not in path.read_text(encoding="utf-8"), path.name
        listed = _header_columns("marts", path.stem)
        for column, text in column_descriptions("marts", path.stem).items():
            unknown += [f"{path.stem}.{column}"] if column not in listed else []
            repeated += [f"{path.stem}.{column}"] if cols.SHARED_DESCRIPTIONS.get(column) == text else []
    assert not unknown and not repeated, (unknown, repeated)


def test_a_broken_descriptions_file_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import warehouse.sql as sql

    monkeypatch.setattr(sql, "WAREHOUSE_DIR", tmp_path)
    (tmp_path / "marts").mkdir()
    for text in ("columns: [a, b]\n", "columns:\n  a: 1\n", "columns: {a: 'x'\n"):
        (tmp_path / "marts" / "toy.yaml").write_text(text, encoding="utf-8")
        with pytest.raises(sql.WarehouseSqlError, match=r"^toy\.yaml: ") as raised:
            column_descriptions("marts", "toy")
        assert "\n" not in str(raised.value)
    (tmp_path / "marts" / "toy.yaml").write_text("columns:\n  on: 'a: b'\n", encoding="utf-8")
    with pytest.raises(sql.WarehouseSqlError):  # YAML 1.1 reads `on` as True: refused, not renamed
        column_descriptions("marts", "toy")


def test_a_mart_takes_the_shared_description_where_its_file_is_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    """On stand-in files: the file's own comment wins, a silent column takes the dictionary's, then its
    history view's comment wins over the dictionary's; a column the dictionary does not know stays bare."""
    import warehouse.sql as sql

    files = {
        "toy_history": "create or replace view marts.toy_history as select 1 as tp, 2 as pp, 3 as engine;\n"
        "comment on column marts.toy_history.engine is 'The profile reproduced.';",
        "toy": "create or replace view marts.toy as select tp, pp, engine, 4 as own from marts.toy_history;\n"
        "comment on column marts.toy.pp is 'Stages, here.';",
    }
    monkeypatch.setattr(sql, "read_sql", lambda layer, table: files[table])
    con = duckdb.connect()
    con.execute("create schema marts")
    build_relation(con, "marts", "toy_history")
    build_relation(con, "marts", "toy")
    got = dict(con.execute("select column_name, comment from duckdb_columns() where table_name = 'toy'").fetchall())
    assert got == {
        "tp": "Tensor-parallel size.",
        "pp": "Stages, here.",
        "engine": "The profile reproduced.",
        "own": None,
    }
    assert cols.SHARED_DESCRIPTIONS["run_id"] == cols.BY_NAME["run_id"].description  # one text, not two


def test_build_relation_applies_the_dictionarys_comments(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a stand-in relation: the file runs, then each column gets its dictionary comment (quotes kept)."""
    import warehouse.sql as sql

    monkeypatch.setitem(sql.DICTIONARY_COMMENTS, ("raw", "run"), {"run_id": "It's the run.", "run_date": "UTC."})
    con = duckdb.connect()
    con.execute("create schema raw")
    build_relation(con, "raw", "run", {"run_id": "r1", "run_date": "2026-12-04", "started_at": "2026-12-04 00:00"})
    got = dict(con.execute("select column_name, comment from duckdb_columns() where table_name = 'run'").fetchall())
    assert got["run_id"] == "It's the run." and got["run_date"] == "UTC."


def test_the_two_texts_of_max_model_len_are_kept_apart() -> None:
    """marts.deployments_history documents max_model_len in its own words (as before the dictionary)."""
    assert DICTIONARY_COMMENTS[("marts", "deployments_history")]["max_model_len"] == (
        "Engine max model length the deployment is sized with."
    )
    assert DICTIONARY_COMMENTS[("marts", "capacity_grid_history")]["max_model_len"].startswith("The max_model_len")


# --- the estimate --json contract -----------------------------------------------------------------


def test_contract_keys_come_from_the_dictionary() -> None:
    keys = [key for key, _attribute in cols.CONTRACT]
    named = {c.contract for c in cols.COLUMNS if c.contract} | {f.key for f in cols.CONTRACT_ONLY}
    assert set(keys) == named and len(keys) == len(named)
    # the contract's weight_dtype / kv_dtype are the grid's weight_format / kv_cache_dtype
    assert cols.BY_NAME["weight_format"].contract == "weight_dtype"
    assert cols.BY_NAME["kv_cache_dtype"].contract == "kv_dtype"
    args = ["meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--max-model-len", "8192", "--concurrency", "4"]
    result = CliRunner().invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code == 0, result.output
    contract = json.loads(result.output)
    assert list(contract)[: len(keys)] == keys  # the speed model's keys follow (capacity.performance)
    assert contract["context"] == 8192 and contract["concurrency"] == 4 and contract["modelled"] is True


def test_the_readme_lists_the_contract_keys() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = readme.split("`--json` prints one object", 1)[1].split("\n\n", 1)[0]
    listed = re.search(r"`(model,[^`]*)`", paragraph)
    assert listed, "the README's --json paragraph lost its list of keys"
    assert [k.strip() for k in listed.group(1).split(",")] == list(cols.CONTRACT_KEYS), (
        "README.md: the --json keys are `" + ", ".join(cols.CONTRACT_KEYS) + "`"
    )
