"""gpu_skus: what each price rests on (basis), its provider, region and term, and GPUs obtainable at it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-05 02:50:00.000000+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gpu_skus", schema=None) as batch_op:
        batch_op.add_column(sa.Column("price_basis", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("price_provider", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("price_region", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("price_commitment", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("max_gpus_available", sa.Integer(), nullable=True))
        batch_op.create_check_constraint("price_basis", "price_basis IN ('list', 'contract', 'estimate')")


def downgrade() -> None:
    with op.batch_alter_table("gpu_skus", schema=None) as batch_op:
        batch_op.drop_constraint("price_basis", type_="check")
        batch_op.drop_column("max_gpus_available")
        batch_op.drop_column("price_commitment")
        batch_op.drop_column("price_region")
        batch_op.drop_column("price_provider")
        batch_op.drop_column("price_basis")
