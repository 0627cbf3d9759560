"""Agent health journals: the highest record of each agent's journal recorded as a fault

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04 03:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "agent_hosts",
        sa.Column(
            "health_seq",
            sa.Integer(),
            nullable=False,
            server_default="0",
            comment="the highest number of the agent's health journal recorded as faults "
            "(each record is recorded once, however often it is sent)",
        ),
    )


def downgrade() -> None:
    op.drop_column("agent_hosts", "health_seq")
