"""Hosts enrolled with a gpudock agent, and their one-time join tokens

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_hosts",
        sa.Column("id", sa.String(length=32), primary_key=True),
        sa.Column("name", sa.String(length=64), nullable=False, unique=True),
        sa.Column(
            "state",
            sa.Enum(
                "pending", "active", "draining", name="agenthoststate", native_enum=False, length=16
            ),
            nullable=False,
            comment="change only via services.agents.hosts",
        ),
        sa.Column(
            "agent_key",
            sa.Text(),
            nullable=True,
            unique=True,
            comment="the agent's pinned SSH host key (OpenSSH form)",
        ),
        sa.Column("agent_version", sa.String(length=32), nullable=False),
        sa.Column("engine_version", sa.String(length=32), nullable=False),
        sa.Column("driver_version", sa.String(length=32), nullable=False),
        sa.Column(
            "gpus",
            sa.Text(),
            nullable=False,
            comment="JSON list of the GPUs the agent's NVML reports",
        ),
        sa.Column(
            "link_state",
            sa.Enum("none", "up", "down", name="linkstate", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("link_changed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "link_peer",
            sa.String(length=64),
            nullable=False,
            comment="the address the agent's connection came from",
        ),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("enrolled_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "agent_join_tokens",
        sa.Column("id", sa.String(length=16), primary_key=True),
        sa.Column(
            "host_id",
            sa.String(length=32),
            sa.ForeignKey("agent_hosts.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_agent_join_tokens_host_id", "agent_join_tokens", ["host_id"])


def downgrade() -> None:
    op.drop_index("ix_agent_join_tokens_host_id", table_name="agent_join_tokens")
    op.drop_table("agent_join_tokens")
    op.drop_table("agent_hosts")
