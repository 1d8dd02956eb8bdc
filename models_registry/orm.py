"""Registry schema: SQLAlchemy 2 typed models on one `DeclarativeBase`.

Conventions (STYLE.md §6): singular class names, plural table names, a surrogate integer key plus
the natural key as a unique constraint, and every SQLite/PostgreSQL difference declared here, once:

- `PrimaryKey`: BIGINT on PostgreSQL, INTEGER on SQLite (only `INTEGER PRIMARY KEY` autoincrements there).
- `Bytes` / `Count`: BIGINT everywhere (memory sizes and parameter counts overflow 32 bits).
- `JsonList`: JSONB on PostgreSQL, JSON (text) on SQLite.

The schema itself is created and changed only by Alembic (`migrations/`); `tests/test_migrations.py`
proves the migrations and these classes agree.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeEngine

from capacity.kv.kinds import KVKind
from capacity.spec import PriceBasis

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

PrimaryKey: TypeEngine[int] = BigInteger().with_variant(Integer(), "sqlite")
Bytes = BigInteger
Count = BigInteger
JsonList: TypeEngine[Any] = JSON().with_variant(postgresql.JSONB(), "postgresql")

KV_KINDS = tuple(kind.value for kind in KVKind)  # the CHECK list comes from the domain enum, not retyped
MODEL_SOURCES = ("bundled", "local", "hf-cache", "hub")
INGEST_SOURCE_KINDS = ("catalog", "dir", "hub")
INGEST_STATUSES = ("running", "succeeded", "partial", "failed")
ITEM_KINDS = ("model", "gpu", "catalog")
PRICE_BASES = tuple(basis.value for basis in PriceBasis)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Model(Base):
    """One revision of one model's config.json, with the fields capacity planning needs.

    History: a changed config (new sha256) adds a row and moves `is_current`; old rows stay.
    """

    __tablename__ = "models"
    __table_args__ = (
        UniqueConstraint("repo_id", "config_sha256"),
        # At most one current revision per repo (a partial unique index; same DDL on both backends).
        Index(
            "uq_models_repo_id_current",
            "repo_id",
            unique=True,
            sqlite_where=text("is_current"),
            postgresql_where=text("is_current"),
        ),
        CheckConstraint(_in("source", MODEL_SOURCES), name="source"),
        CheckConstraint("num_layers > 0 AND hidden_size > 0 AND vocab_size > 0", name="positive_sizes"),
    )

    id: Mapped[int] = mapped_column(PrimaryKey, primary_key=True)
    repo_id: Mapped[str] = mapped_column(String(200))
    revision: Mapped[str | None] = mapped_column(String(64))
    config_sha256: Mapped[str] = mapped_column(String(64))
    family: Mapped[str] = mapped_column(String(64))
    model_type: Mapped[str] = mapped_column(String(64))
    architecture: Mapped[str] = mapped_column(String(128))
    is_generic: Mapped[bool] = mapped_column(Boolean)

    hidden_size: Mapped[int] = mapped_column(Integer)
    num_layers: Mapped[int] = mapped_column(Integer)
    num_attention_heads: Mapped[int] = mapped_column(Integer)
    num_kv_heads: Mapped[int] = mapped_column(Integer)
    head_dim: Mapped[int] = mapped_column(Integer)
    vocab_size: Mapped[int] = mapped_column(Integer)
    intermediate_size: Mapped[int] = mapped_column(Integer)
    max_position_embeddings: Mapped[int] = mapped_column(Integer)
    context_limit_tokens: Mapped[int] = mapped_column(Integer)
    torch_dtype: Mapped[str] = mapped_column(String(16))
    tie_word_embeddings: Mapped[bool] = mapped_column(Boolean)
    quant_method: Mapped[str | None] = mapped_column(String(32))
    quant_format: Mapped[str | None] = mapped_column(String(16))

    total_params: Mapped[int] = mapped_column(Count)
    active_params: Mapped[int] = mapped_column(Count)
    embedding_params: Mapped[int] = mapped_column(Count)
    num_experts: Mapped[int] = mapped_column(Integer)
    num_experts_per_token: Mapped[int] = mapped_column(Integer)
    kv_elements_per_token: Mapped[int] = mapped_column(Count)
    checkpoint_bytes: Mapped[int | None] = mapped_column(Bytes)
    published_parameters: Mapped[int | None] = mapped_column(Count)
    gated: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))

    source: Mapped[str] = mapped_column(String(16))  # bundled | local | hf-cache | hub
    source_path: Mapped[str | None] = mapped_column(Text)  # the file it was read from
    source_url: Mapped[str | None] = mapped_column(Text)  # provenance: where the config is published
    notes: Mapped[str | None] = mapped_column(Text)  # the catalog's notes on this config
    config_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, server_default=func.now())
    is_current: Mapped[bool] = mapped_column(Boolean)

    layers: Mapped[list[ModelLayer]] = relationship(
        back_populates="model",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="ModelLayer.layer_index",
    )

    def __repr__(self) -> str:
        current = " current" if self.is_current else ""
        return f"<Model {self.repo_id}@{(self.revision or '?')[:12]} {self.config_sha256[:12]}{current}>"


class ModelLayer(Base):
    """The KV cache one decoder layer holds (one row per layer, never assume uniform layers)."""

    __tablename__ = "model_layers"
    __table_args__ = (
        UniqueConstraint("model_id", "layer_index"),
        CheckConstraint(_in("kv_kind", KV_KINDS), name="kv_kind"),
    )

    id: Mapped[int] = mapped_column(PrimaryKey, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    layer_index: Mapped[int] = mapped_column(Integer)
    kv_kind: Mapped[str] = mapped_column(String(16))
    num_kv_heads: Mapped[int] = mapped_column(Integer)
    k_head_dim: Mapped[int] = mapped_column(Integer)
    v_head_dim: Mapped[int] = mapped_column(Integer)
    window_tokens: Mapped[int | None] = mapped_column(Integer)
    conv_state_elements: Mapped[int] = mapped_column(Count)
    recurrent_state_elements: Mapped[int] = mapped_column(Count)
    kv_source_layer: Mapped[int | None] = mapped_column(Integer)
    attention_params: Mapped[int] = mapped_column(Count)
    mlp_params: Mapped[int] = mapped_column(Count)
    expert_params: Mapped[int] = mapped_column(Count)
    router_params: Mapped[int] = mapped_column(Count)  # the whole router (LayerParams.router + fp32_router)
    norm_params: Mapped[int] = mapped_column(Count)
    # attention projections every TP rank keeps whole (MLA's down-projections); `attention_params` is TP-split
    replicated_attention_params: Mapped[int] = mapped_column(Count, server_default="0")

    model: Mapped[Model] = relationship(back_populates="layers")


class GpuSku(Base):
    """One accelerator SKU from the GPU catalog; `content_sha256` makes re-ingest a no-op."""

    __tablename__ = "gpu_skus"
    __table_args__ = (
        UniqueConstraint("slug"),
        CheckConstraint("memory_total_bytes > 0", name="memory_positive"),
        CheckConstraint("gpus_per_node > 0", name="gpus_per_node_positive"),
        CheckConstraint(_in("price_basis", PRICE_BASES), name="price_basis"),
    )

    id: Mapped[int] = mapped_column(PrimaryKey, primary_key=True)
    slug: Mapped[str] = mapped_column(String(64))  # the catalog id, e.g. "h100-sxm-80gb"
    name: Mapped[str] = mapped_column(String(200))
    vendor: Mapped[str] = mapped_column(String(32))
    architecture: Mapped[str | None] = mapped_column(String(32))
    form_factor: Mapped[str | None] = mapped_column(String(32))
    memory_marketing_gb: Mapped[float | None] = mapped_column(Double)
    memory_type: Mapped[str | None] = mapped_column(String(32))
    memory_total_mib_smi: Mapped[int | None] = mapped_column(Integer)
    memory_total_bytes: Mapped[int] = mapped_column(Bytes)
    memory_total_basis: Mapped[str | None] = mapped_column(Text)
    memory_bandwidth_gbps: Mapped[float | None] = mapped_column(Double)
    bf16_dense_tflops: Mapped[float | None] = mapped_column(Double)
    fp8_dense_tflops: Mapped[float | None] = mapped_column(Double)
    fp4_dense_tflops: Mapped[float | None] = mapped_column(Double)
    fp8_support: Mapped[bool] = mapped_column(Boolean)
    fp4_support: Mapped[bool] = mapped_column(Boolean)
    int8_support: Mapped[bool] = mapped_column(Boolean)
    interconnect: Mapped[str | None] = mapped_column(Text)
    interconnect_gbps: Mapped[float | None] = mapped_column(Double)
    gpus_per_node: Mapped[int] = mapped_column(Integer)
    price_usd_per_gpu_hour: Mapped[float | None] = mapped_column(Double)
    price_source: Mapped[str | None] = mapped_column(Text)
    price_date: Mapped[dt.date | None] = mapped_column(Date)
    price_basis: Mapped[str | None] = mapped_column(String(16))  # list | contract | estimate
    price_provider: Mapped[str | None] = mapped_column(String(64))
    price_region: Mapped[str | None] = mapped_column(String(64))
    price_commitment: Mapped[str | None] = mapped_column(String(16))  # on-demand | spot | 1y | 3y
    max_gpus_available: Mapped[int | None] = mapped_column(Integer)
    sources: Mapped[list[str]] = mapped_column(JsonList)
    content_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, server_default=func.now())
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, server_default=func.now())

    aliases: Mapped[list[GpuAlias]] = relationship(
        back_populates="gpu_sku", cascade="all, delete-orphan", passive_deletes=True
    )

    def __repr__(self) -> str:
        return f"<GpuSku {self.slug}>"


class GpuAlias(Base):
    """Another name for a SKU (nvidia-smi / DCGM product names, short names); normalized unique."""

    __tablename__ = "gpu_aliases"
    __table_args__ = (UniqueConstraint("normalized_alias"),)

    id: Mapped[int] = mapped_column(PrimaryKey, primary_key=True)
    gpu_sku_id: Mapped[int] = mapped_column(ForeignKey("gpu_skus.id", ondelete="CASCADE"), index=True)
    alias: Mapped[str] = mapped_column(String(200))
    normalized_alias: Mapped[str] = mapped_column(String(200))

    gpu_sku: Mapped[GpuSku] = relationship(back_populates="aliases")


class IngestRun(Base):
    """One `capplan registry ingest`: what it read and what it changed, per kind of item."""

    __tablename__ = "ingest_runs"
    __table_args__ = (
        CheckConstraint(_in("source_kind", INGEST_SOURCE_KINDS), name="source_kind"),
        CheckConstraint(_in("status", INGEST_STATUSES), name="status"),
    )

    id: Mapped[int] = mapped_column(PrimaryKey, primary_key=True)
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, server_default=func.now())
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    source_kind: Mapped[str] = mapped_column(String(16))
    source: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), server_default="running")
    models_seen: Mapped[int] = mapped_column(Integer, server_default="0")
    models_added: Mapped[int] = mapped_column(Integer, server_default="0")
    models_unchanged: Mapped[int] = mapped_column(Integer, server_default="0")
    models_updated: Mapped[int] = mapped_column(Integer, server_default="0")
    models_failed: Mapped[int] = mapped_column(Integer, server_default="0")
    gpus_seen: Mapped[int] = mapped_column(Integer, server_default="0")
    gpus_added: Mapped[int] = mapped_column(Integer, server_default="0")
    gpus_unchanged: Mapped[int] = mapped_column(Integer, server_default="0")
    gpus_updated: Mapped[int] = mapped_column(Integer, server_default="0")
    gpus_failed: Mapped[int] = mapped_column(Integer, server_default="0")

    errors: Mapped[list[IngestError]] = relationship(
        back_populates="run", cascade="all, delete-orphan", passive_deletes=True
    )


class IngestError(Base):
    """An input the ingest rejected, with the stage that rejected it and a one-line reason."""

    __tablename__ = "ingest_errors"
    __table_args__ = (CheckConstraint(_in("item_kind", ITEM_KINDS), name="item_kind"),)

    id: Mapped[int] = mapped_column(PrimaryKey, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("ingest_runs.id", ondelete="CASCADE"), index=True)
    item_kind: Mapped[str] = mapped_column(String(16))
    item_key: Mapped[str] = mapped_column(Text)
    source_path: Mapped[str | None] = mapped_column(Text)
    stage: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    raw_excerpt: Mapped[str | None] = mapped_column(Text)

    run: Mapped[IngestRun] = relationship(back_populates="errors")
