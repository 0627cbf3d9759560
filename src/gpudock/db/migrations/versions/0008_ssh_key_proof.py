"""SSH keys record when their holder proved possession of the private key

Keys already registered stay, unproven (verified_at NULL): whoever registered
them never had to show they hold the private half.

Revision ID: 0008
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
# ssh_keys is made by 0002, on another branch from 0001: run after it.
depends_on: str | Sequence[str] | None = "0002"


def upgrade() -> None:
    with op.batch_alter_table("ssh_keys") as batch_op:
        batch_op.add_column(
            sa.Column(
                "verified_at",
                sa.DateTime(timezone=True),
                nullable=True,
                comment="when its holder proved possession; None: registered before proofs",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("ssh_keys") as batch_op:
        batch_op.drop_column("verified_at")
