"""A hostile catalog or config folder never stops an ingest or a nightly: each bad config is
rejected with a one-line reason naming it, the good configs beside it are kept, and the nightly
publishes with every bad config in `marts.ingest_errors`.

Kinds: nesting that overflows recursive code (a deep config, a `text_config` chain, a deep
safetensors index), lone surrogates, `config.json` as a link to `/dev/zero`, a FIFO, a link out
of the folder, an oversized file, and plausible-looking configs that would publish wrong numbers
(DeepSeek-V3 with `n_routed_experts: 0`, `total_size: 1`, `seq_length: 1e30` as the only length).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml
from sqlalchemy import select
from typer.testing import CliRunner

from models_registry import db, orm
from models_registry.ingest import ingest_catalog, ingest_dir
from models_registry.sources.bundled import CATALOG_DIR
from models_registry.sources.common import read_bytes
from pipelines.cli import app
from tests.test_warehouse_fixtures import write_catalog

GOOD = "meta-llama/Llama-3.1-8B-Instruct"
DEEPSEEK = "deepseek-ai/DeepSeek-V3"


def _bundled_config(repo_id: str) -> dict[str, Any]:
    catalog = yaml.safe_load((CATALOG_DIR / "models.yaml").read_text(encoding="utf-8"))
    entry = next(e for e in catalog["models"] if e["repo_id"] == repo_id)
    config: dict[str, Any] = json.loads((CATALOG_DIR / entry["config"]).read_text(encoding="utf-8"))
    return config


def _deep(levels: int) -> str:
    return '{"model_type": "llama", "x": ' + "[" * levels + "]" * levels + "}"


def _chain(levels: int) -> str:
    inner = json.dumps(_bundled_config(GOOD))
    for _ in range(levels):
        inner = '{"model_type": "llava", "text_config": ' + inner + "}"
    return inner


# name -> (how to lay out its folder, words the one-line reason must contain)
def _hostile(folder: Path, outside: Path) -> dict[str, str]:
    """Write every hostile model under `folder/<name>/` (config.json, maybe an index); returns
    name -> words its reason must contain."""
    llama = _bundled_config(GOOD)
    deepseek = _bundled_config(DEEPSEEK)
    index = {"metadata": {"total_size": 16_060_522_496}, "weight_map": {}}

    def put(name: str, text: str | None = None, index_text: str | None = None) -> Path:
        directory = folder / name
        directory.mkdir(parents=True)
        if text is not None:
            (directory / "config.json").write_text(text, encoding="utf-8")
        if index_text is not None:
            (directory / "model.safetensors.index.json").write_text(index_text, encoding="utf-8")
        return directory

    put("deep-json", _deep(100_000))
    put("text-config-chain", _chain(40))
    put("deep-index", json.dumps(llama), '{"metadata": ' + "[" * 100_000 + "]" * 100_000 + "}")
    put("lone-surrogate-value", json.dumps(llama | {"model_type": "llama", "architectures": ["\ud800"]}))
    put("lone-surrogate-key", json.dumps(llama | {"\udc80": 1}))
    put("nul-escape", json.dumps(llama | {"model_type": "lla\u0000ma"}))
    (put("dev-zero") / "config.json").symlink_to("/dev/zero")
    os.mkfifo(put("fifo") / "config.json")
    (outside / "config.json").write_text(json.dumps(llama), encoding="utf-8")
    (put("link-outside") / "config.json").symlink_to(outside / "config.json")
    with (put("huge") / "config.json").open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # sparse: 64 MiB without writing them
    put("config-is-a-directory")
    (folder / "config-is-a-directory" / "config.json").mkdir()
    put("deepseek-no-experts", json.dumps(deepseek | {"n_routed_experts": 0}))
    put("index-total-size-1", json.dumps(llama), json.dumps({"metadata": {"total_size": 1}, "weight_map": {}}))
    no_length = {k: v for k, v in llama.items() if k != "max_position_embeddings"}
    put("seq-length-1e30", json.dumps(no_length | {"seq_length": 1e30}))
    put("topk-exceeds-experts", json.dumps(_bundled_config("mistralai/Mixtral-8x7B-Instruct-v0.1") | {"num_experts_per_tok": 9}))
    put("bool-layers", json.dumps(llama | {"num_hidden_layers": True}))
    put("huge-int", json.dumps(llama).replace('"vocab_size": 128256', '"vocab_size": 1' + "0" * 5000))
    put("good", json.dumps(llama), json.dumps(index))
    not_utf8 = os.path.join(os.fsencode(folder), b"caf\xe9")
    os.mkdir(not_utf8)
    with open(os.path.join(not_utf8, b"config.json"), "w", encoding="utf-8") as handle:
        handle.write(json.dumps(llama))
    return {
        "deep-json": "nested too deeply",
        "text-config-chain": "nested more than 32 levels",
        "deep-index": "nested too deeply",
        "lone-surrogate-value": "lone surrogate (\\ud800)",
        "lone-surrogate-key": "lone surrogate (\\udc80)",
        "nul-escape": "NUL character",
        "dev-zero": "leads out of",
        "fifo": "is a FIFO, not a regular file",
        "link-outside": "leads out of",
        "huge": "a config is at most",
        "config-is-a-directory": "not a file",
        "deepseek-no-experts": "`n_routed_experts` is 0",
        "index-total-size-1": "checkpoint total_size 1 bytes does not fit",
        "seq-length-1e30": "`seq_length` = 1e+30 is implausibly large",
        "topk-exceeds-experts": "`num_experts_per_tok` (9) exceeds `num_local_experts` (8)",
        "bool-layers": "num_hidden_layers must be an integer",
        "huge-int": "an integer has more than 4,300 digits",
        "caf\\udce9": "the folder name is not valid UTF-8",
    }


def test_a_hostile_dir_is_ingested_item_by_item(sqlite_url: str, tmp_path: Path) -> None:
    """`registry ingest --dir` on every kind at once: the good config is stored, each bad one has
    its row and reason; nothing hangs (the FIFO), nothing reads without bound (/dev/zero)."""
    folder, outside = tmp_path / "configs", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    expected = _hostile(folder, outside)
    with db.session_scope(sqlite_url) as session:
        report = ingest_dir(session, folder)
    with db.session_scope(sqlite_url) as session:
        stored = session.scalars(select(orm.Model.repo_id)).all()
        rows = {row.item_key: row for row in session.scalars(select(orm.IngestError))}
    assert stored == ["good"]
    assert report.models.seen == len(expected) + 1 == report.models.added + report.models.failed
    assert set(rows) == set(expected)
    for name, words in expected.items():
        reason = rows[name].reason
        assert words in reason, (name, reason)
        assert "\n" not in reason and len(reason) <= 300


def test_one_crashing_config_no_longer_loses_the_others(sqlite_url: str, tmp_path: Path) -> None:
    """Old behaviour: a RecursionError in one config rolled the whole run back (no models, no
    ingest_errors row). Now the good ones are committed and the bad one is a row."""
    catalog = write_catalog(tmp_path / "catalog", models=(GOOD, "Qwen/Qwen3-32B"))
    entries = yaml.safe_load((catalog / "models.yaml").read_text(encoding="utf-8"))
    deep = catalog / "configs" / "acme" / "deep" / "config.json"
    deep.parent.mkdir(parents=True)
    deep.write_text(_deep(100_000), encoding="utf-8")
    entries["models"].insert(1, {"repo_id": "acme/deep", "config": "configs/acme/deep/config.json"})
    (catalog / "models.yaml").write_text(yaml.safe_dump(entries), encoding="utf-8")
    with db.session_scope(sqlite_url) as session:
        report = ingest_catalog(session, catalog, gpus=False)
    assert report.status == "partial" and report.models.added == 2 and report.models.failed == 1
    with db.session_scope(sqlite_url) as session:
        assert sorted(session.scalars(select(orm.Model.repo_id))) == ["Qwen/Qwen3-32B", GOOD]
        assert session.scalars(select(orm.IngestError.item_key)).all() == ["acme/deep"]


def test_reads_are_bounded_and_never_block(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, words in (
        (fifo, "FIFO"),
        (Path("/dev/zero"), "character device"),
        (tmp_path, "not a file"),
        (tmp_path / "missing", "file not found"),
    ):
        with pytest.raises(Exception, match=words):
            read_bytes(path)
    (tmp_path / "ok.json").write_bytes(b"{}")
    assert read_bytes(tmp_path / "ok.json", root=tmp_path) == b"{}"
    with pytest.raises(Exception, match="leads out of"):
        read_bytes(tmp_path / "ok.json", root=tmp_path / "elsewhere")


@pytest.mark.slow  # a whole nightly; tests/test_nightly.py keeps a nightly in the default run
def test_a_hostile_catalog_folder_still_publishes_a_nightly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Done-when of issue 9: the real `capplan nightly` (Dagster job) on a catalog folder holding
    every bad kind next to a good model publishes, with every bad config in marts.ingest_errors."""
    catalog = write_catalog(tmp_path / "catalog", models=(GOOD,))
    folder, outside = catalog / "configs" / "hostile", tmp_path / "outside"
    outside.mkdir()
    expected = _hostile(folder, outside)
    shutil.rmtree(folder / "good")
    shutil.rmtree(os.path.join(os.fsencode(folder), b"caf\xe9"))  # models.yaml (UTF-8) cannot name it
    del expected  # reasons are checked by the dir test; here every name must be listed
    entries = yaml.safe_load((catalog / "models.yaml").read_text(encoding="utf-8"))
    names = sorted(p.name for p in folder.iterdir())
    for name in names:
        entry: dict[str, Any] = {"repo_id": f"hostile/{name}", "config": f"configs/hostile/{name}/config.json"}
        if (folder / name / "model.safetensors.index.json").exists():
            entry["safetensors_index"] = f"configs/hostile/{name}/model.safetensors.index.json"
        entries["models"].append(entry)
    (catalog / "models.yaml").write_text(yaml.safe_dump(entries, allow_unicode=False), encoding="utf-8")
    skus = yaml.safe_load((catalog / "gpus.yaml").read_text(encoding="utf-8"))
    good_sku = skus["gpus"][0]
    skus["gpus"] += [
        good_sku | {"id": "hostile-bool-memory", "aliases": [], "memory_total_mib_smi": True},
        good_sku | {"id": "hostile-huge-memory", "aliases": [], "memory_total_mib_smi": 10**30},
        good_sku | {"id": "hostile-nested", "aliases": [[[[["x"]]]]]},
        ["not", "a", "mapping"],
    ]
    (catalog / "gpus.yaml").write_text(yaml.safe_dump(skus), encoding="utf-8")
    env = {
        "CAPPLAN_REGISTRY_URL": f"sqlite:///{tmp_path / 'var' / 'registry.db'}",
        "CAPPLAN_WAREHOUSE": str(tmp_path / "var" / "warehouse.duckdb"),
        "CAPPLAN_CATALOG_DIR": str(catalog),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(app, ["nightly"])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(env["CAPPLAN_WAREHOUSE"], read_only=True)
    try:
        rejected = dict(con.execute("select item_key, reason from marts.ingest_errors where item_kind = 'model'").fetchall())
        bad_gpus = con.execute("select count(*) from marts.ingest_errors where item_kind = 'gpu'").fetchone()
        models = [r[0] for r in con.execute("select model from marts.models").fetchall()]
        gpus = con.execute("select count(*) from marts.gpus").fetchone()
    finally:
        con.close()
    assert sorted(rejected) == [f"hostile/{name}" for name in names], rejected
    assert bad_gpus == (4,) and gpus == (2,)
    assert models == [GOOD]
    assert all(reason and "\n" not in reason for reason in rejected.values())


def _alias_bomb(list_key: str, levels: int = 9) -> str:
    """A YAML document of a few hundred bytes whose entries expand to 9**levels items."""
    lines = ["schema_version: 1", f"{list_key}:", "- &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"- &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    lines.append(f"- {{id: bomb, repo_id: bomb, config: *a{levels}, name: *a{levels}}}")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_rejected_in_bounded_time(tmp_path: Path) -> None:
    """Reasons and excerpts use a bounded repr: an alias bomb in models.yaml or gpus.yaml is a few
    rejected entries, not a process that never returns."""
    from models_registry.sources.bundled import read_catalog_entries
    from models_registry.sources.gpu_catalog import read_gpu_catalog

    (tmp_path / "models.yaml").write_text(_alias_bomb("models"), encoding="utf-8")
    (tmp_path / "gpus.yaml").write_text(_alias_bomb("gpus"), encoding="utf-8")
    entries, errors = read_catalog_entries(tmp_path)
    assert entries == [] and len(errors) == 11
    assert all(len(e.reason) <= 300 and len(e.raw_excerpt or "") <= 400 for e in errors)
    records, gpu_errors = read_gpu_catalog(tmp_path / "gpus.yaml")
    assert records == [] and len(gpu_errors) == 11
