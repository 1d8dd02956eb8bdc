"""model_layers: the attention parameters every TP rank keeps whole (MLA's q_a / kv_a down-projections, DSA's
indexer), apart from the TP-split `attention_params`. Rows stored before keep 0 here until their model is stored
again.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07 09:30:00.000000+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("model_layers", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("replicated_attention_params", sa.BigInteger(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("model_layers", schema=None) as batch_op:
        batch_op.drop_column("replicated_attention_params")
