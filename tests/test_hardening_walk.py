"""Issue 25 (second round), folder walks: a tree 1,100 levels deep beside a good config, under
`registry ingest --dir` (the CLI, a real SQLite registry) and the telemetry drop folder walk; the
walk's entry bound; links to folders never followed."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select
from typer.testing import CliRunner

from models_registry import db, orm
from models_registry.walk import MAX_DEPTH, walk_tree
from pipelines.cli import app
from telemetry.files import walk
from tests.hostile_telemetry import deep_folder, remove_deep_folder
from tests.test_registry_hostile import GOOD, _bundled_config


def _deep(top: Path, depth: int) -> Path:
    """`top/d/d/.../d`, `depth` levels, a good config in the innermost."""
    deep_folder(top, depth, "d", {"config.json": json.dumps(_bundled_config(GOOD))})
    return top


def test_a_folder_1100_deep_beside_a_good_config_is_one_line_and_the_good_one_ingested(
    sqlite_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "configs"
    (root / "org" / "good").mkdir(parents=True)
    (root / "org" / "good" / "config.json").write_text(json.dumps(_bundled_config(GOOD)), encoding="utf-8")
    deep = _deep(root / "deep", 1100)
    try:
        result = CliRunner().invoke(app, ["registry", "ingest", "--dir", str(root)])
    finally:
        remove_deep_folder(deep, "d")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "RecursionError" not in result.output
    assert f"nested more than {MAX_DEPTH} levels" in result.output
    with db.session_scope(sqlite_url) as session:
        assert session.scalars(select(orm.Model.repo_id)).all() == ["org/good"]
        errors = session.scalars(select(orm.IngestError)).all()
    assert len(errors) == 1 and errors[0].item_kind == "catalog" and "\n" not in errors[0].reason
    assert "not searched (first: deep/d/d/" in errors[0].reason


def test_the_drop_folder_walk_has_the_same_limit(tmp_path: Path) -> None:
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "m.prom").write_text("x 1\n", encoding="utf-8")
    deep = _deep(tmp_path / "deep", 1100)
    try:
        found = walk(tmp_path)
    finally:
        remove_deep_folder(deep, "d")
    rels = {f.rel: f.problem for f in found}
    assert rels["good/m.prom"] is None
    limited = [(rel, p) for rel, p in rels.items() if p is not None]
    assert len(limited) == 1
    rel, problem = limited[0]
    assert problem is not None and problem.code == "too_large" and "not searched" in problem.reason
    assert rel == "deep/" + "/".join(["d"] * MAX_DEPTH)  # deep is level 1, the 64th d level 65


def test_the_walk_stops_at_its_entry_bound_and_says_so(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"f{i:02}").write_text("", encoding="utf-8")
    tree = walk_tree(tmp_path, max_entries=10)
    assert len(tree.files) == 10
    assert tree.limited is not None and "stopped after 10 entries" in tree.limited


def test_links_to_folders_are_listed_not_followed(tmp_path: Path) -> None:
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "loop").symlink_to(tmp_path)  # a loop: followed, it would never end
    (tmp_path / "out").symlink_to("/etc")
    tree = walk_tree(tmp_path, name="config.json")
    assert tree.files == [tmp_path / "inside" / "config.json"] and tree.limited is None
