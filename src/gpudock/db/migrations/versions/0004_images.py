"""image catalog

Revision ID: 0004
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "images",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("reference", sa.String(length=512), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("os", sa.String(length=64), nullable=False),
        sa.Column("python", sa.String(length=16), nullable=True),
        sa.Column("framework", sa.String(length=32), nullable=True),
        sa.Column("framework_version", sa.String(length=32), nullable=True),
        sa.Column("cuda", sa.String(length=16), nullable=True),
        sa.Column("cudnn", sa.String(length=16), nullable=True),
        sa.Column("min_driver", sa.String(length=32), nullable=True),
        sa.Column("compute_capabilities", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("visibility", sa.String(length=16), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("owner_id", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("reference"),
    )
    op.create_index(op.f("ix_images_owner_id"), "images", ["owner_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_images_owner_id"), table_name="images")
    op.drop_table("images")
