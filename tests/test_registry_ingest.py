"""Ingest: idempotent, history-keeping, the same on SQLite and PostgreSQL (`registry_url` runs
each test on both; the PostgreSQL half is marked `postgres`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models_registry import orm
from models_registry.ingest import IngestReport, ingest_catalog, ingest_dir
from models_registry.resolve import load_model
from models_registry.sources.bundled import CATALOG_DIR, read_catalog_entries

FIXTURES = Path(__file__).parent / "fixtures" / "broken_configs"


def _llama(**changes: object) -> dict[str, object]:
    config: dict[str, object] = json.loads((FIXTURES / "valid-llama" / "config.json").read_text())
    config.update(changes)
    return config


def _write(directory: Path, name: str, config: dict[str, object]) -> Path:
    path = directory / name / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2))
    return path


def _changes(report: IngestReport) -> tuple[int, int, int, int]:
    return report.models.added, report.models.updated, report.gpus.added, report.gpus.updated


def test_bundled_catalog_twice_changes_nothing_the_second_time(registry_session: Session) -> None:
    entries, catalog_errors = read_catalog_entries()
    first = ingest_catalog(registry_session)
    assert catalog_errors == []
    assert first.models.seen == len(entries) > 0
    assert first.models.added + first.models.failed == first.models.seen
    assert first.gpus.seen == first.gpus.added > 0
    assert first.gpus.failed == 0
    assert all("\n" not in e.reason for e in first.errors)

    second = ingest_catalog(registry_session)
    assert _changes(second) == (0, 0, 0, 0)
    assert second.models.unchanged == first.models.added
    assert second.gpus.unchanged == first.gpus.added
    assert registry_session.scalar(select(func.count()).select_from(orm.Model)) == first.models.added
    runs = registry_session.scalars(select(orm.IngestRun).order_by(orm.IngestRun.id)).all()
    assert [(r.models_added, r.models_unchanged) for r in runs] == [
        (first.models.added, 0),
        (0, first.models.added),
    ]
    assert all(r.finished_at is not None for r in runs)

    # every row records revision, config sha256 and (when the catalog has an index) checkpoint bytes
    rows = registry_session.scalars(select(orm.Model)).all()
    assert rows
    for row in rows:
        assert len(row.config_sha256) == 64
        assert row.revision
        assert row.source == "bundled"
        assert row.is_current
        assert len(row.layers) >= 1
    assert any(row.checkpoint_bytes for row in rows)
    llama2 = registry_session.scalars(select(orm.Model).where(orm.Model.repo_id == "meta-llama/Llama-2-7b-hf")).one()
    assert llama2.checkpoint_bytes == 13_476_839_424
    assert llama2.published_parameters == 6_738_415_616
    assert llama2.source_url and llama2.source_url.startswith("https://huggingface.co/meta-llama/")
    assert llama2.notes


def test_changed_config_adds_a_revision_and_keeps_history(registry_session: Session, tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    path = _write(configs, "acme/tiny", _llama())
    assert ingest_dir(registry_session, configs).models.added == 1
    first_sha = registry_session.scalars(select(orm.Model.config_sha256)).one()

    path.write_text(json.dumps(_llama(max_position_embeddings=16384), indent=2))
    report = ingest_dir(registry_session, configs)
    assert (report.models.added, report.models.updated, report.models.unchanged) == (0, 1, 0)
    history = registry_session.scalars(select(orm.Model).order_by(orm.Model.id)).all()
    assert [(m.repo_id, m.is_current) for m in history] == [("acme/tiny", False), ("acme/tiny", True)]
    assert history[1].context_limit_tokens >= 16384
    assert load_model("acme/tiny", session=registry_session).config_sha256 == history[1].config_sha256

    again = ingest_dir(registry_session, configs)
    assert _changes(again) == (0, 0, 0, 0)

    # the old config comes back: no new row, is_current moves back to it
    path.write_text(json.dumps(_llama(), indent=2))
    back = ingest_dir(registry_session, configs)
    assert back.models.updated == 1
    registry_session.expire_all()
    current = registry_session.scalars(select(orm.Model).where(orm.Model.is_current.is_(True))).one()
    assert current.config_sha256 == first_sha
    assert registry_session.scalar(select(func.count()).select_from(orm.Model)) == 2


def test_gpu_change_updates_in_place(registry_session: Session, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    document = yaml.safe_load((CATALOG_DIR / "gpus.yaml").read_text())
    document["gpus"] = document["gpus"][:3]
    (catalog / "gpus.yaml").write_text(yaml.safe_dump(document))
    first = ingest_catalog(registry_session, catalog)
    assert (first.gpus.added, first.gpus.failed) == (3, 0)

    document["gpus"][0]["price_usd_per_gpu_hour"] = 9.99
    document["gpus"][1]["aliases"] = [*document["gpus"][1]["aliases"], "Renamed Board"]
    (catalog / "gpus.yaml").write_text(yaml.safe_dump(document))
    second = ingest_catalog(registry_session, catalog)
    assert (second.gpus.added, second.gpus.updated, second.gpus.unchanged) == (0, 2, 1)
    assert registry_session.scalar(select(func.count()).select_from(orm.GpuSku)) == 3
    aliases = registry_session.scalars(select(orm.GpuAlias.alias)).all()
    assert "Renamed Board" in aliases
    price = registry_session.scalar(
        select(orm.GpuSku.price_usd_per_gpu_hour).where(orm.GpuSku.slug == document["gpus"][0]["id"])
    )
    assert price == pytest.approx(9.99)
    assert _changes(ingest_catalog(registry_session, catalog)) == (0, 0, 0, 0)


def test_metadata_change_without_config_change_updates_the_row(registry_session: Session, tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    _write(configs, "acme/tiny", _llama())
    ingest_dir(registry_session, configs)
    index = {"metadata": {"total_size": 2_000_000_000}, "weight_map": {}}
    (configs / "acme" / "tiny" / "model.safetensors.index.json").write_text(json.dumps(index))
    report = ingest_dir(registry_session, configs)
    assert (report.models.added, report.models.updated) == (0, 1)
    row = registry_session.scalars(select(orm.Model)).one()
    assert row.checkpoint_bytes == 2_000_000_000


def test_one_bad_item_does_not_stop_the_run(registry_session: Session, tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    shutil.copytree(FIXTURES / "valid-llama", configs / "a" / "good")
    _write(configs, "a/bad", _llama(num_hidden_layers=-1))
    _write(configs, "b/good", _llama(hidden_size=1024, num_attention_heads=16, num_key_value_heads=4))
    report = ingest_dir(registry_session, configs)
    assert (report.models.seen, report.models.added, report.models.failed) == (3, 2, 1)
    assert report.status == "partial"
    error = registry_session.scalars(select(orm.IngestError)).one()
    assert (error.item_key, error.stage) == ("a/bad", "config")
    assert "num_hidden_layers" in error.reason
    assert error.raw_excerpt and "num_hidden_layers" in error.raw_excerpt
    run = registry_session.scalars(select(orm.IngestRun)).one()
    assert (run.status, run.models_seen, run.models_added, run.models_failed) == ("partial", 3, 2, 1)
