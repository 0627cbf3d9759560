"""Job commands (an instance's main process) and the last service-URL use

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 04:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "instances",
        sa.Column(
            "command",
            sa.Text(),
            nullable=True,
            comment="a job's shell command line, run as the container's main process "
            "(/bin/sh -c); None: gpudock's keep-alive",
        ),
    )
    op.add_column(
        "instances",
        sa.Column(
            "last_service_use_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="the last request or open stream through the service-URL proxy "
            "(written at most once a minute); the idle rule counts from it",
        ),
    )


def downgrade() -> None:
    op.drop_column("instances", "last_service_use_at")
    op.drop_column("instances", "command")
