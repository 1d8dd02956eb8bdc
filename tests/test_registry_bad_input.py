"""Bad input never crashes an ingest: every broken config or GPU entry in the corpus becomes one
`ingest_errors` row whose one-line reason names its problem, and every valid one is ingested."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models_registry import db, orm
from models_registry.ingest import ingest_catalog, ingest_dir

CORPUS = Path(__file__).parent / "fixtures" / "broken_configs"

VALID = {"valid-llama", "valid-llama-with-index", "valid-qwen2", "valid-mistral"}

# directory -> words its one-line reason must contain
BROKEN = {
    "not-utf8": "not UTF-8",
    "truncated-json": "not valid JSON",
    "empty-file": "empty",
    "json-list": "got a list",
    "json-string": "got a string",
    "json-null": "got null",
    "json-number": "got a number",
    "trailing-comma": "not valid JSON",
    "nan-literal": "NaN",
    "single-quotes": "not valid JSON",
    "nul-bytes": "Invalid control character",  # and its raw excerpt holds a NUL (PostgreSQL text cannot)
    "bool-for-int": "num_hidden_layers must be an integer",
    "string-for-int": "hidden_size must be an integer",
    "float-for-int": "num_attention_heads must be an integer",
    "string-kv-heads": "num_key_value_heads must be an integer",
    "list-for-int": "vocab_size must be an integer",
    "architectures-not-list": "architectures must be a list",
    "model-type-not-string": "model_type must be a string",
    "torch-dtype-not-string": "torch_dtype must be a string",
    "text-config-not-object": "text_config must be an object",
    "quantization-config-not-object": "quantization_config must be an object",
    "negative-layers": "num_hidden_layers must be positive",
    "zero-layers": "num_hidden_layers must be positive",
    "zero-heads": "num_attention_heads must be positive",
    "zero-kv-heads": "num_key_value_heads must be positive",
    "zero-hidden": "hidden_size must be positive",
    "negative-vocab": "vocab_size must be positive",
    "negative-head-dim": "head_dim must be positive",
    "negative-intermediate": "intermediate_size must be non-negative",
    "negative-sliding-window": "sliding_window must be non-negative",
    "absurd-hidden": "hidden_size",
    "absurd-layers": "num_hidden_layers",
    "absurd-context": "max_position_embeddings",
    "absurd-vocab": "vocab_size",
    "kv-heads-exceed-heads": "num_key_value_heads (64) exceeds num_attention_heads (32)",
    "heads-not-divisible-by-kv": "not divisible by num_key_value_heads",
    "hidden-not-divisible-by-heads": "hidden_size (2050) is not divisible by num_attention_heads (32)",
    "nested-text-config-negative-layers": "text_config.num_hidden_layers",
    "missing-hidden-size": "hidden_size",
    "missing-layers": "num_hidden_layers",
    "missing-heads": "num_attention_heads",
    "unknown-architecture-no-standard-fields": "hidden_size",
    "empty-object": "hidden_size",
    "overlong-architecture": "architecture is longer than 128 characters",  # VARCHAR: PostgreSQL enforces it
    "bad-safetensors-index": "model.safetensors.index.json is not valid JSON",
    "index-without-total-size": "total_size",
}

BROKEN_GPUS = {
    "gpus.yaml#3": "id is missing",
    "Bad Id!": "id 'Bad Id!'",
    "good-a-80gb": "duplicate id 'good-a-80gb'",
    "memory-as-string": "memory_total_bytes must be an integer",
    "memory-missing": "memory_total_bytes is missing",
    "memory-in-mib": "memory_total_bytes = 81,559 is out of range",
    "memory-negative": "memory_total_bytes = -85,020,000,000 is out of range",
    "memory-above-smi": "exceeds memory_total_mib_smi",
    "memory-vs-marketing": "does not match memory_marketing_gb",
    "bool-as-string": "fp8_support must be true or false",
    "negative-bandwidth": "memory_bandwidth_gbps must be positive",
    "bad-price-date": "price_date must be a date",
    "aliases-not-list": "aliases must be a list",
    "alias-collision": "'GOOD A' already names good-a-80gb",
    "zero-gpus-per-node": "gpus_per_node = 0 is out of range",
    "vendor-missing": "vendor is missing",
    "gpus.yaml#19": "entry must be a mapping",
}


@pytest.fixture
def sqlite_session(sqlite_url: str) -> Iterator[Session]:
    engine = db.make_engine(sqlite_url)
    with db.make_sessionmaker(engine)() as registry_session:
        yield registry_session
    engine.dispose()


def test_corpus_is_what_the_test_expects() -> None:
    on_disk = {p.parent.name for p in CORPUS.glob("*/config.json")}
    assert on_disk == VALID | set(BROKEN)
    assert len(BROKEN) >= 30


def test_broken_configs_are_rejected_one_line_each_and_valid_ones_ingested(registry_session: Session) -> None:
    report = ingest_dir(registry_session, CORPUS)

    assert report.models.seen == len(VALID) + len(BROKEN)
    assert report.models.seen == report.models.added + report.models.failed
    assert report.models.added == len(VALID)
    assert report.status == "partial"

    errors = registry_session.scalars(select(orm.IngestError)).all()
    assert sorted(e.item_key for e in errors) == sorted(BROKEN)
    for error in errors:
        assert "\n" not in error.reason and len(error.reason) <= 300, error.reason
        assert BROKEN[error.item_key] in error.reason, (error.item_key, error.reason)
        assert error.stage in {"read", "index", "json", "config", "validate", "store"}
        assert error.source_path and error.source_path.endswith(".json")
    assert {e.item_key for e in report.errors} == set(BROKEN)
    nul = next(e for e in errors if e.item_key == "nul-bytes")
    assert nul.raw_excerpt and "llama\\x00" in nul.raw_excerpt

    models = registry_session.scalars(select(orm.Model)).all()
    assert {m.repo_id for m in models} == VALID
    with_index = next(m for m in models if m.repo_id == "valid-llama-with-index")
    assert with_index.checkpoint_bytes == 1_234_567_890
    run = registry_session.scalars(select(orm.IngestRun)).one()
    assert (run.models_seen, run.models_added, run.models_failed) == (len(VALID) + len(BROKEN), 4, len(BROKEN))

    again = ingest_dir(registry_session, CORPUS)
    assert (again.models.added, again.models.updated, again.models.failed) == (0, 0, len(BROKEN))


def test_broken_gpu_entries_are_rejected_one_line_each(registry_session: Session, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    shutil.copyfile(CORPUS / "gpus.yaml", catalog / "gpus.yaml")
    report = ingest_catalog(registry_session, catalog)
    assert (report.gpus.seen, report.gpus.added, report.gpus.failed) == (2 + len(BROKEN_GPUS), 2, len(BROKEN_GPUS))
    errors = registry_session.scalars(select(orm.IngestError).where(orm.IngestError.item_kind == "gpu")).all()
    assert sorted(e.item_key for e in errors) == sorted(BROKEN_GPUS)
    for error in errors:
        assert "\n" not in error.reason
        assert BROKEN_GPUS[error.item_key] in error.reason, (error.item_key, error.reason)
    assert set(registry_session.scalars(select(orm.GpuSku.slug)).all()) == {"good-a-80gb", "good-b-24gb"}
    assert registry_session.scalar(select(func.count()).select_from(orm.GpuAlias)) > 0


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("schema_version: 1\ngpus: [\n", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("schema_version: 2\ngpus: []\n", "unsupported schema_version 2"),
        ("schema_version: 1\ngpus: {a: 1}\n", "gpus must be a list"),
    ],
)
def test_a_broken_catalog_file_is_one_catalog_error(
    sqlite_session: Session, tmp_path: Path, content: str, reason: str
) -> None:
    registry_session = sqlite_session
    (tmp_path / "gpus.yaml").write_text(content)
    report = ingest_catalog(registry_session, tmp_path)
    assert report.gpus.seen == 0
    assert [(e.item_kind, e.item_key) for e in report.errors] == [("catalog", "gpus.yaml")]
    assert reason in report.errors[0].reason
    assert report.failed == 1 and report.status == "partial"


def test_broken_models_yaml_entries(sqlite_session: Session, tmp_path: Path) -> None:
    registry_session = sqlite_session
    shutil.copytree(CORPUS / "valid-llama", tmp_path / "configs" / "ok")
    (tmp_path / "models.yaml").write_text(
        "schema_version: 1\n"
        "models:\n"
        "- {repo_id: acme/ok, revision: main, config: configs/ok/config.json}\n"
        "- {repo_id: acme/missing-file, config: configs/nope/config.json}\n"
        "- {repo_id: acme/no-config}\n"
        "- {repo_id: acme/escape, config: ../../etc/passwd}\n"
        "- {repo_id: acme/bad-params, config: configs/ok/config.json, published_parameters: -5}\n"
        "- just a string\n"
    )
    report = ingest_catalog(registry_session, tmp_path, gpus=False)
    assert (report.models.seen, report.models.added, report.models.failed) == (6, 1, 5)
    reasons = {e.item_key: (e.stage, e.reason) for e in report.errors}
    assert reasons["acme/missing-file"][0] == "read" and "file not found" in reasons["acme/missing-file"][1]
    assert "config" in reasons["acme/no-config"][1]
    assert "leaves the catalog directory" in reasons["acme/escape"][1]
    assert "published_parameters" in reasons["acme/bad-params"][1]
    assert "must be a mapping" in reasons["models.yaml#6"][1]
