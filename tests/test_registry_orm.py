"""The ORM against a schema made by `upgrade head`: round trip, natural keys, one current
revision per repo, cascades, SQLite foreign keys on."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import delete, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models_registry import orm

#: The columns of a Llama-3.1-8B-shaped `models` row, less what the tests vary (the natural key, `is_current`).
_LLAMA_8B_ROW: dict[str, object] = {
    "revision": "0" * 40,
    "family": "llama",
    "model_type": "llama",
    "architecture": "LlamaForCausalLM",
    "is_generic": False,
    "hidden_size": 4096,
    "num_layers": 2,
    "num_attention_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "context_limit_tokens": 131072,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "total_params": 8_030_261_248,
    "active_params": 8_030_261_248,
    "embedding_params": 525_336_576,
    "num_experts": 0,
    "num_experts_per_token": 0,
    "kv_elements_per_token": 4096,
    "checkpoint_bytes": 16_060_522_496,  # > 2**32: needs BIGINT
    "source": "local",
    "config_json": "{}",
}
#: The columns of each of its `model_layers` rows, less `layer_index` (and `model_id`, which the ORM fills in).
_LLAMA_8B_LAYER: dict[str, object] = {
    "kv_kind": "full",
    "num_kv_heads": 8,
    "k_head_dim": 128,
    "v_head_dim": 128,
    "conv_state_elements": 0,
    "recurrent_state_elements": 0,
    "attention_params": 41_943_040,
    "mlp_params": 176_160_768,
    "expert_params": 0,
    "router_params": 0,
    "norm_params": 8192,
}


def _model(repo_id: str = "acme/tiny", sha: str = "a" * 64, *, current: bool = True) -> orm.Model:
    model = orm.Model(repo_id=repo_id, config_sha256=sha, is_current=current, **_LLAMA_8B_ROW)
    model.layers = [orm.ModelLayer(layer_index=i, **_LLAMA_8B_LAYER) for i in range(2)]
    return model


def test_round_trip(registry_session: Session) -> None:
    registry_session.add(_model())
    sku = orm.GpuSku(
        slug="h100-sxm-80gb",
        name="NVIDIA H100 80GB HBM3",
        vendor="nvidia",
        memory_total_bytes=85_045_149_696,
        fp8_support=True,
        fp4_support=False,
        int8_support=True,
        gpus_per_node=8,
        price_date=dt.date(2025, 6, 15),
        sources=["datasheet", "nvidia-smi"],
        content_sha256="b" * 64,
    )
    sku.aliases = [orm.GpuAlias(alias="H100", normalized_alias="h100")]
    registry_session.add(sku)
    registry_session.commit()
    registry_session.expunge_all()

    model = registry_session.scalars(select(orm.Model)).one()
    assert model.checkpoint_bytes == 16_060_522_496
    assert [layer.layer_index for layer in model.layers] == [0, 1]
    assert model.created_at is not None
    gpu = registry_session.scalars(select(orm.GpuSku)).one()
    assert gpu.sources == ["datasheet", "nvidia-smi"]
    assert gpu.price_date == dt.date(2025, 6, 15)
    assert [a.alias for a in gpu.aliases] == ["H100"]


def test_natural_key_is_unique(registry_session: Session) -> None:
    registry_session.add(_model(current=True))
    registry_session.commit()
    registry_session.add(_model(current=False))
    with pytest.raises(IntegrityError):
        registry_session.commit()


def test_one_current_revision_per_repo(registry_session: Session) -> None:
    registry_session.add(_model(sha="a" * 64, current=True))
    registry_session.add(_model(sha="b" * 64, current=False))
    registry_session.commit()
    registry_session.add(_model(sha="c" * 64, current=True))
    with pytest.raises(IntegrityError):
        registry_session.commit()


def test_deleting_a_model_cascades_to_its_layers(registry_session: Session) -> None:
    registry_session.add(_model())
    registry_session.commit()
    registry_session.execute(delete(orm.Model))  # core DELETE: the database's ON DELETE CASCADE does the work
    registry_session.commit()
    assert registry_session.scalar(select(func.count()).select_from(orm.ModelLayer)) == 0


def test_layer_needs_an_existing_model(registry_session: Session) -> None:
    values = {
        "model_id": 999,
        "layer_index": 0,
        "kv_kind": "full",
        "num_kv_heads": 1,
        "k_head_dim": 1,
        "v_head_dim": 1,
        "conv_state_elements": 0,
        "recurrent_state_elements": 0,
        "attention_params": 0,
        "mlp_params": 0,
        "expert_params": 0,
        "router_params": 0,
        "norm_params": 0,
    }
    with pytest.raises(IntegrityError):
        registry_session.execute(orm.ModelLayer.__table__.insert().values(values))
        registry_session.commit()


def test_kv_kind_is_checked(registry_session: Session) -> None:
    model = _model()
    model.layers[0].kv_kind = "quantum"
    registry_session.add(model)
    with pytest.raises(IntegrityError):
        registry_session.commit()


def test_sqlite_connections_have_foreign_keys_on(sqlite_url: str) -> None:
    from models_registry import db

    engine = db.make_engine(sqlite_url)
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
    engine.dispose()
