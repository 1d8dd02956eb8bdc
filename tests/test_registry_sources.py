"""Sources: the GPU catalog and alias resolution, the Hub offline-first through the real
`hf_hub_download` on a hub-layout cache in tmp_path, and `load_model` for every kind of MODEL.
The Hub online (served, gated, unreachable) is tests/test_registry_hub.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants
from sqlalchemy.orm import Session

from capacity.hf_config import ConfigError
from models_registry import db
from models_registry.ingest import ingest_dir, ingest_hub
from models_registry.resolve import load_model, match_id
from models_registry.sources import hub
from models_registry.sources.gpu_catalog import find_gpu_sku, load_gpu_skus, normalize_alias, read_gpu_catalog

FIXTURES = Path(__file__).parent / "fixtures" / "broken_configs"
LLAMA = json.loads((FIXTURES / "valid-llama" / "config.json").read_text())
SECRET = "hf_NotARealTokenButSecret0123456789"


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def no_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(db.URL_ENV, f"sqlite:///{tmp_path / 'absent' / 'registry.db'}")


# --- GPU catalog -------------------------------------------------------------------------------


def test_bundled_gpu_catalog_is_valid() -> None:
    records, errors = read_gpu_catalog()
    assert errors == []
    assert len(records) == len(load_gpu_skus()) > 10
    assert len({r.content_sha256 for r in records}) == len(records)


@pytest.mark.parametrize(
    ("name", "sku_id"),
    [
        ("h100-sxm-80gb", "h100-sxm-80gb"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm-80gb"),  # nvidia-smi / DCGM product name
        ("nvidia h100 80gb hbm3", "h100-sxm-80gb"),
        ("H100_SXM", "h100-sxm-80gb"),
        ("A100-SXM4-80GB", "a100-sxm-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
        ("a100 sxm4 80gb", "a100-sxm-80gb"),
        ("AMD Instinct MI300X", "mi300x-192gb"),
        ("L40S", "l40s-48gb"),
    ],
)
def test_find_gpu_sku_by_id_and_alias(name: str, sku_id: str) -> None:
    assert find_gpu_sku(name).id == sku_id


def test_unknown_gpu_is_one_line_with_close_matches() -> None:
    with pytest.raises(LookupError) as excinfo:
        find_gpu_sku("H100 SMX")
    message = str(excinfo.value)
    assert "\n" not in message
    assert "unknown GPU 'H100 SMX'" in message
    assert "did you mean" in message and "h100" in message


def test_find_gpu_sku_in_a_given_list() -> None:
    skus = load_gpu_skus()[:2]
    assert find_gpu_sku(skus[1].name, skus) == skus[1]
    with pytest.raises(LookupError):
        find_gpu_sku("B200", skus[:1])


def test_normalize_alias() -> None:
    assert normalize_alias(" NVIDIA  H100-80GB_HBM3 ") == "nvidiah10080gbhbm3"


# --- Hub, offline first ------------------------------------------------------------------------


def test_fetch_from_the_hf_cache_offline(hub_cache: Any, offline: None) -> None:
    index = {"metadata": {"total_size": 987_654_321}, "weight_map": {}}
    commit = hub_cache.add("acme/tiny-llama", {"config.json": LLAMA, "model.safetensors.index.json": index})
    snapshot = hub.fetch_config("acme/tiny-llama", cache_dir=hub_cache.path)
    raw = (hub_cache.path / "models--acme--tiny-llama" / "snapshots" / commit / "config.json").read_bytes()
    assert snapshot.source == "hf-cache"
    assert snapshot.revision == commit
    assert snapshot.config_sha256 == hashlib.sha256(raw).hexdigest()
    assert snapshot.checkpoint_bytes == 987_654_321
    assert hub.fetch_config("acme/tiny-llama", commit, cache_dir=hub_cache.path).revision == commit


def test_missing_repo_offline_is_one_line(hub_cache: Any, offline: None) -> None:
    with pytest.raises(hub.HubError) as excinfo:
        hub.fetch_config("acme/absent", cache_dir=hub_cache.path)
    message = str(excinfo.value)
    assert "\n" not in message
    assert "acme/absent" in message and "HF_HUB_OFFLINE" in message


def test_bundled_snapshot_comes_first(hub_cache: Any, offline: None) -> None:
    snapshot = hub.fetch_config("meta-llama/Llama-2-7b-hf", cache_dir=hub_cache.path)
    assert snapshot.source == "bundled"
    assert snapshot.checkpoint_bytes == 13_476_839_424


def test_ingest_hub_records_revision_and_never_stores_the_token(
    registry_session: Session, hub_cache: Any, offline: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    commit = hub_cache.add("acme/tiny-llama", {"config.json": LLAMA})
    report = ingest_hub(registry_session, ["acme/tiny-llama", "acme/absent"], cache_dir=hub_cache.path)
    assert (report.models.seen, report.models.added, report.models.failed) == (2, 1, 1)
    assert "acme/absent" in report.errors[0].reason
    resolved = load_model("acme/tiny-llama", session=registry_session)
    assert (resolved.revision, resolved.source) == (commit, "registry")
    assert all(SECRET not in repr(e) for e in report.errors)
    url = str(registry_session.get_bind().url)
    if url.startswith("sqlite"):
        assert SECRET.encode() not in Path(registry_session.get_bind().url.database or "").read_bytes()


# --- load_model --------------------------------------------------------------------------------


def test_load_model_from_a_config_path_and_a_directory(tmp_path: Path, no_registry: None) -> None:
    by_file = load_model(str(FIXTURES / "valid-llama" / "config.json"))
    assert by_file.source == "local"
    assert by_file.spec.num_layers == LLAMA["num_hidden_layers"]
    assert by_file.checkpoint_bytes is None
    by_dir = load_model(str(FIXTURES / "valid-llama-with-index"))
    assert by_dir.checkpoint_bytes == 1_234_567_890
    assert len(by_dir.config_sha256) == 64


def test_load_model_path_errors(tmp_path: Path, no_registry: None) -> None:
    with pytest.raises(LookupError, match=r"no config\.json in directory"):
        load_model(str(tmp_path))
    with pytest.raises(LookupError, match="no such file"):
        load_model(str(tmp_path / "nope" / "config.json"))
    with pytest.raises(ConfigError, match="num_hidden_layers must be positive"):
        load_model(str(FIXTURES / "negative-layers"))
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_model(str(FIXTURES / "truncated-json" / "config.json"))


def test_load_model_from_the_bundled_catalog_without_a_registry(tmp_path: Path, no_registry: None) -> None:
    resolved = load_model("meta-llama/Llama-2-7b-hf")
    assert resolved.source == "bundled"
    assert resolved.checkpoint_bytes == 13_476_839_424
    assert load_model("META-LLAMA/llama-2-7b-hf").repo_id == "meta-llama/Llama-2-7b-hf"
    assert load_model("Llama-2-7b-hf").repo_id == "meta-llama/Llama-2-7b-hf"
    assert not (tmp_path / "absent").exists()  # looking never creates a database


def test_load_model_from_the_hf_cache(
    hub_cache: Any, offline: None, no_registry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = hub_cache.add("acme/cached-only", {"config.json": LLAMA})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache.path))
    resolved = load_model("acme/cached-only")
    assert (resolved.source, resolved.revision) == ("hf-cache", commit)


def test_load_model_prefers_the_registry(registry_session: Session, tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    (configs / "acme" / "tiny").mkdir(parents=True)
    (configs / "acme" / "tiny" / "config.json").write_text(json.dumps(LLAMA))
    ingest_dir(registry_session, configs)
    resolved = load_model("acme/tiny", session=registry_session)
    assert resolved.source == "registry"
    assert load_model("ACME/Tiny", session=registry_session).repo_id == "acme/tiny"
    assert load_model("tiny", session=registry_session).repo_id == "acme/tiny"


def test_load_model_uses_the_configured_registry(sqlite_url: str, tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    (configs / "acme" / "tiny").mkdir(parents=True)
    (configs / "acme" / "tiny" / "config.json").write_text(json.dumps(LLAMA))
    with db.session_scope(sqlite_url) as registry_session:
        ingest_dir(registry_session, configs)
    assert load_model("acme/tiny").source == "registry"  # CAPPLAN_REGISTRY_URL points at sqlite_url


def test_unknown_model_is_one_line_with_suggestions(no_registry: None) -> None:
    with pytest.raises(LookupError) as excinfo:
        load_model("meta-llama/Llama-2-7b-hff")
    message = str(excinfo.value)
    assert "\n" not in message
    assert "unknown model" in message and "meta-llama/Llama-2-7b-hf" in message


def test_match_id() -> None:
    ids = ["org/Alpha", "org/beta", "other/beta"]
    assert match_id("org/Alpha", ids) == "org/Alpha"
    assert match_id("ORG/alpha", ids) == "org/Alpha"
    assert match_id("alpha", ids) == "org/Alpha"
    assert match_id("beta", ids) is None  # ambiguous
    assert match_id("gamma", ids) is None
