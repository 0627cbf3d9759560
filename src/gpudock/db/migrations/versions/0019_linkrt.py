"""Placement generations: what an agent checks each command for an instance against

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "instances",
        sa.Column(
            "placement_generation",
            sa.Integer(),
            nullable=False,
            server_default="0",
            comment="grows by one each time the placement pass places it (written there "
            "only); an agent refuses a command for an older generation than it has seen",
        ),
    )


def downgrade() -> None:
    op.drop_column("instances", "placement_generation")
