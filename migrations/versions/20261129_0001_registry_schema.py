"""Registry schema: models and their layers, GPU SKUs and aliases, ingest runs and errors.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 08:15:11.828979+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # keys: BIGINT, SQLite's INTEGER (its rowid)


def _set_on_insert(name: str) -> sa.Column:
    """A time the database sets when the row is inserted."""
    return sa.Column(name, sa.DateTime(timezone=True), server_default=sa.text("(CURRENT_TIMESTAMP)"), nullable=False)


def upgrade() -> None:
    op.create_table(
        "gpu_skus",
        sa.Column("id", ID, nullable=False),
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("vendor", sa.String(length=32), nullable=False),
        sa.Column("architecture", sa.String(length=32), nullable=True),
        sa.Column("form_factor", sa.String(length=32), nullable=True),
        sa.Column("memory_marketing_gb", sa.Double(), nullable=True),
        sa.Column("memory_type", sa.String(length=32), nullable=True),
        sa.Column("memory_total_mib_smi", sa.Integer(), nullable=True),
        sa.Column("memory_total_bytes", sa.BigInteger(), nullable=False),
        sa.Column("memory_total_basis", sa.Text(), nullable=True),
        sa.Column("memory_bandwidth_gbps", sa.Double(), nullable=True),
        sa.Column("bf16_dense_tflops", sa.Double(), nullable=True),
        sa.Column("fp8_dense_tflops", sa.Double(), nullable=True),
        sa.Column("fp4_dense_tflops", sa.Double(), nullable=True),
        sa.Column("fp8_support", sa.Boolean(), nullable=False),
        sa.Column("fp4_support", sa.Boolean(), nullable=False),
        sa.Column("int8_support", sa.Boolean(), nullable=False),
        sa.Column("interconnect", sa.Text(), nullable=True),
        sa.Column("interconnect_gbps", sa.Double(), nullable=True),
        sa.Column("gpus_per_node", sa.Integer(), nullable=False),
        sa.Column("price_usd_per_gpu_hour", sa.Double(), nullable=True),
        sa.Column("price_source", sa.Text(), nullable=True),
        sa.Column("price_date", sa.Date(), nullable=True),
        sa.Column(
            "sources",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("content_sha256", sa.String(length=64), nullable=False),
        _set_on_insert("created_at"),
        _set_on_insert("updated_at"),
        sa.CheckConstraint("gpus_per_node > 0", name=op.f("ck_gpu_skus_gpus_per_node_positive")),
        sa.CheckConstraint("memory_total_bytes > 0", name=op.f("ck_gpu_skus_memory_positive")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_skus")),
        sa.UniqueConstraint("slug", name=op.f("uq_gpu_skus_slug")),
    )
    op.create_table(
        "ingest_runs",
        sa.Column("id", ID, nullable=False),
        _set_on_insert("started_at"),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("source_kind", sa.String(length=16), nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), server_default="running", nullable=False),
        *(
            sa.Column(f"{kind}_{count}", sa.Integer(), server_default="0", nullable=False)
            for kind in ("models", "gpus")
            for count in ("seen", "added", "unchanged", "updated", "failed")
        ),
        sa.CheckConstraint("source_kind IN ('catalog', 'dir', 'hub')", name=op.f("ck_ingest_runs_source_kind")),
        sa.CheckConstraint(
            "status IN ('running', 'succeeded', 'partial', 'failed')", name=op.f("ck_ingest_runs_status")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingest_runs")),
    )
    op.create_table(
        "models",
        sa.Column("id", ID, nullable=False),
        sa.Column("repo_id", sa.String(length=200), nullable=False),
        sa.Column("revision", sa.String(length=64), nullable=True),
        sa.Column("config_sha256", sa.String(length=64), nullable=False),
        sa.Column("family", sa.String(length=64), nullable=False),
        sa.Column("model_type", sa.String(length=64), nullable=False),
        sa.Column("architecture", sa.String(length=128), nullable=False),
        sa.Column("is_generic", sa.Boolean(), nullable=False),
        sa.Column("hidden_size", sa.Integer(), nullable=False),
        sa.Column("num_layers", sa.Integer(), nullable=False),
        sa.Column("num_attention_heads", sa.Integer(), nullable=False),
        sa.Column("num_kv_heads", sa.Integer(), nullable=False),
        sa.Column("head_dim", sa.Integer(), nullable=False),
        sa.Column("vocab_size", sa.Integer(), nullable=False),
        sa.Column("intermediate_size", sa.Integer(), nullable=False),
        sa.Column("max_position_embeddings", sa.Integer(), nullable=False),
        sa.Column("context_limit_tokens", sa.Integer(), nullable=False),
        sa.Column("torch_dtype", sa.String(length=16), nullable=False),
        sa.Column("tie_word_embeddings", sa.Boolean(), nullable=False),
        sa.Column("quant_method", sa.String(length=32), nullable=True),
        sa.Column("quant_format", sa.String(length=16), nullable=True),
        sa.Column("total_params", sa.BigInteger(), nullable=False),
        sa.Column("active_params", sa.BigInteger(), nullable=False),
        sa.Column("embedding_params", sa.BigInteger(), nullable=False),
        sa.Column("num_experts", sa.Integer(), nullable=False),
        sa.Column("num_experts_per_token", sa.Integer(), nullable=False),
        sa.Column("kv_elements_per_token", sa.BigInteger(), nullable=False),
        sa.Column("checkpoint_bytes", sa.BigInteger(), nullable=True),
        sa.Column("published_parameters", sa.BigInteger(), nullable=True),
        sa.Column("gated", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("source_path", sa.Text(), nullable=True),
        sa.Column("config_json", sa.Text(), nullable=False),
        _set_on_insert("created_at"),
        sa.Column("is_current", sa.Boolean(), nullable=False),
        sa.CheckConstraint("source IN ('bundled', 'local', 'hf-cache', 'hub')", name=op.f("ck_models_source")),
        sa.CheckConstraint(
            "num_layers > 0 AND hidden_size > 0 AND vocab_size > 0", name=op.f("ck_models_positive_sizes")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("repo_id", "config_sha256", name=op.f("uq_models_repo_id_config_sha256")),
    )
    op.create_index(
        "uq_models_repo_id_current",
        "models",
        ["repo_id"],
        unique=True,
        sqlite_where=sa.text("is_current"),
        postgresql_where=sa.text("is_current"),
    )

    op.create_table(
        "gpu_aliases",
        sa.Column("id", ID, nullable=False),
        sa.Column("gpu_sku_id", ID, nullable=False),
        sa.Column("alias", sa.String(length=200), nullable=False),
        sa.Column("normalized_alias", sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(
            ["gpu_sku_id"],
            ["gpu_skus.id"],
            name=op.f("fk_gpu_aliases_gpu_sku_id_gpu_skus"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_aliases")),
        sa.UniqueConstraint("normalized_alias", name=op.f("uq_gpu_aliases_normalized_alias")),
    )
    op.create_index(op.f("ix_gpu_aliases_gpu_sku_id"), "gpu_aliases", ["gpu_sku_id"])

    op.create_table(
        "ingest_errors",
        sa.Column("id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("item_kind", sa.String(length=16), nullable=False),
        sa.Column("item_key", sa.Text(), nullable=False),
        sa.Column("source_path", sa.Text(), nullable=True),
        sa.Column("stage", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("raw_excerpt", sa.Text(), nullable=True),
        sa.CheckConstraint("item_kind IN ('model', 'gpu', 'catalog')", name=op.f("ck_ingest_errors_item_kind")),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["ingest_runs.id"],
            name=op.f("fk_ingest_errors_run_id_ingest_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingest_errors")),
    )
    op.create_index(op.f("ix_ingest_errors_run_id"), "ingest_errors", ["run_id"])

    op.create_table(
        "model_layers",
        sa.Column("id", ID, nullable=False),
        sa.Column("model_id", ID, nullable=False),
        sa.Column("layer_index", sa.Integer(), nullable=False),
        sa.Column("kv_kind", sa.String(length=16), nullable=False),
        sa.Column("num_kv_heads", sa.Integer(), nullable=False),
        sa.Column("k_head_dim", sa.Integer(), nullable=False),
        sa.Column("v_head_dim", sa.Integer(), nullable=False),
        sa.Column("window_tokens", sa.Integer(), nullable=True),
        sa.Column("conv_state_elements", sa.BigInteger(), nullable=False),
        sa.Column("recurrent_state_elements", sa.BigInteger(), nullable=False),
        sa.Column("kv_source_layer", sa.Integer(), nullable=True),
        sa.Column("attention_params", sa.BigInteger(), nullable=False),
        sa.Column("mlp_params", sa.BigInteger(), nullable=False),
        sa.Column("expert_params", sa.BigInteger(), nullable=False),
        sa.Column("router_params", sa.BigInteger(), nullable=False),
        sa.Column("norm_params", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "kv_kind IN ('full', 'sliding', 'chunked', 'mla', 'state', 'shared')",
            name=op.f("ck_model_layers_kv_kind"),
        ),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_model_layers_model_id_models"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_layers")),
        sa.UniqueConstraint("model_id", "layer_index", name=op.f("uq_model_layers_model_id_layer_index")),
    )


def downgrade() -> None:
    op.drop_table("model_layers")
    op.drop_index(op.f("ix_ingest_errors_run_id"), table_name="ingest_errors")
    op.drop_table("ingest_errors")
    op.drop_index(op.f("ix_gpu_aliases_gpu_sku_id"), table_name="gpu_aliases")
    op.drop_table("gpu_aliases")
    op.drop_index("uq_models_repo_id_current", table_name="models")
    op.drop_table("models")
    op.drop_table("ingest_runs")
    op.drop_table("gpu_skus")
