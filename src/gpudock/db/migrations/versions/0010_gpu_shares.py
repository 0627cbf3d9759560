"""GPU shares: a share of one GPU per instance, accepted model sets

Revision ID: 0010
Revises: 0006
Create Date: 2026-12-01 23:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "instances",
        sa.Column(
            "gpu_model_choices",
            sa.Text(),
            nullable=False,
            server_default="",
            comment="comma-separated GPU models the request accepts ('': gpu_model only); "
            "placement sets gpu_model to the one it got",
        ),
    )
    op.add_column(
        "instances",
        sa.Column(
            "gpu_share_milli",
            sa.Integer(),
            nullable=True,
            comment="a share of one GPU, in milli-GPU; None: whole GPUs",
        ),
    )
    op.create_table(
        "gpu_shares",
        sa.Column(
            "instance_id", sa.String(length=32), sa.ForeignKey("instances.id"), nullable=False
        ),
        sa.Column("gpu_id", sa.String(length=64), sa.ForeignKey("gpus.id"), nullable=False),
        sa.Column("milli", sa.Integer(), nullable=False),
        sa.Column("allocated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("milli > 0 AND milli < 1000", name="ck_gpu_shares_milli"),
        sa.PrimaryKeyConstraint("instance_id"),
    )
    op.create_index("ix_gpu_shares_gpu_id", "gpu_shares", ["gpu_id"])


def downgrade() -> None:
    op.drop_index("ix_gpu_shares_gpu_id", table_name="gpu_shares")
    op.drop_table("gpu_shares")
    op.drop_column("instances", "gpu_share_milli")
    op.drop_column("instances", "gpu_model_choices")
