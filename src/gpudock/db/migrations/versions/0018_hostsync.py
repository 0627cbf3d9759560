"""Agent hosts in the inventory: hosts reported by agents, labels, host loss

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "hosts",
        sa.Column(
            "agent",
            sa.Boolean(),
            nullable=False,
            server_default=sa.false(),
            comment="reported by its own gpudock agent (id = agent_hosts.id), not the "
            "local GPU source; written by services.fleet.agent_inventory",
        ),
    )
    op.add_column(
        "agent_hosts",
        sa.Column(
            "lost_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when the host was declared lost (no heartbeat for "
            "GPUDOCK_HOST_LOST_AFTER_S); None: not lost",
        ),
    )
    op.add_column(
        "agent_hosts",
        sa.Column(
            "labels",
            sa.Text(),
            nullable=False,
            server_default="{}",
            comment="the operator's labels (JSON object, e.g. region, zone)",
        ),
    )
    op.add_column(
        "instances",
        sa.Column(
            "host_labels",
            sa.Text(),
            nullable=False,
            server_default="{}",
            comment="labels a host must carry to be placed on (JSON object)",
        ),
    )
    op.add_column(
        "instances",
        sa.Column(
            "host_loss_policy",
            sa.Enum(
                "wait",
                "elsewhere",
                name="hostlosspolicy",
                native_enum=False,
                length=16,
            ),
            nullable=False,
            server_default="wait",
        ),
    )


def downgrade() -> None:
    op.drop_column("instances", "host_loss_policy")
    op.drop_column("instances", "host_labels")
    op.drop_column("agent_hosts", "labels")
    op.drop_column("agent_hosts", "lost_at")
    op.drop_column("hosts", "agent")
