"""Web terminal: where an audited session came in (the SSH gateway or the console)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 02:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
# ssh_sessions is made by 0002, on another branch from 0001: run after it.
depends_on: str | Sequence[str] | None = "0002"


def upgrade() -> None:
    # Every row before this one came through the SSH gateway.
    op.add_column(
        "ssh_sessions",
        sa.Column(
            "origin",
            sa.Enum("ssh", "web", name="sshsessionorigin", native_enum=False, length=16),
            nullable=False,
            server_default="ssh",
        ),
    )


def downgrade() -> None:
    with op.batch_alter_table("ssh_sessions") as batch:
        batch.drop_column("origin")
