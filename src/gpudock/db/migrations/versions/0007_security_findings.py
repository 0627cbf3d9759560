"""Security findings: image ids on registered images, system-disk sizes

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 21:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = ("0004",)  # the images table


def upgrade() -> None:
    with op.batch_alter_table("images") as batch_op:
        batch_op.add_column(sa.Column("engine_image_id", sa.String(length=80), nullable=True))
        batch_op.create_index("ix_images_engine_image_id", ["engine_image_id"])
    op.add_column("instances", sa.Column("system_disk_gb", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("instances", "system_disk_gb")
    with op.batch_alter_table("images") as batch_op:
        batch_op.drop_index("ix_images_engine_image_id")
        batch_op.drop_column("engine_image_id")
