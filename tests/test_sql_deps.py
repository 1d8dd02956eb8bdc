"""`sql_asset` dependencies come from the SQL itself (its `from` / `join` targets, like dbt's
`ref()`): the parser, and every SQL asset of the graph against the file it runs."""

from __future__ import annotations

import pytest

from pipelines.assets.common import NOT_ASSETS, relations_read, sql_creators, sql_deps
from pipelines.definitions import build_definitions
from warehouse.sql import LAYERS, WAREHOUSE_DIR


def test_relations_read_sees_from_and_join_but_not_comments_or_strings() -> None:
    sql = """
    -- grain: one row (from marts.not_this_one)
    create or replace view marts.x as
    with a as (select * FROM Staging.Alpha where note = 'join raw.neither'),
         b as (select * from marts.beta_at(true))
    select * from a
    left join raw.gamma as g on true
    inner join b using (id)
    where id in (select id from raw.run);
    comment on view marts.x is 'reads from marts.nothing';
    """
    assert relations_read(sql) == {("staging", "alpha"), ("marts", "beta_at"), ("raw", "gamma"), ("raw", "run")}


def test_every_relation_a_sql_file_reads_is_created_by_one() -> None:
    creators = sql_creators()
    for layer in LAYERS:
        for path in sorted((WAREHOUSE_DIR / layer).glob("*.sql")):
            unknown = relations_read(path.read_text(encoding="utf-8")) - NOT_ASSETS - creators.keys()
            assert not unknown, f"{layer}/{path.name} reads {sorted(unknown)}, which no SQL file creates"


def test_sql_assets_depend_on_exactly_what_their_sql_reads() -> None:
    graph = build_definitions().resolve_asset_graph()
    sql_assets = [k for k in graph.get_all_asset_keys() if "sql" in graph.get(k).kinds]
    assert len(sql_assets) > 30
    for asset_key in sql_assets:
        layer, table = asset_key.path
        assert set(graph.get(asset_key).parent_keys) == set(sql_deps(layer, table)), asset_key.to_user_string()


def test_an_unknown_relation_is_an_error_not_a_missing_edge() -> None:
    with pytest.raises(ValueError, match=r"marts\.y reads marts\.nope, which no warehouse SQL file creates"):
        sql_deps("marts", "y", "create view marts.y as select * from marts.nope")
    self_reference = "create view marts.y as select * from staging.gpus union all select * from marts.y"
    assert [k.to_user_string() for k in sql_deps("marts", "y", self_reference)] == ["staging/gpus"]
