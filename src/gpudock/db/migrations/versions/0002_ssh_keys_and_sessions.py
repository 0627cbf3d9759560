"""SSH keys and the SSH session audit trail

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ssh_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("algorithm", sa.String(length=64), nullable=False, comment="e.g. ssh-ed25519"),
        sa.Column("bits", sa.Integer(), nullable=False),
        sa.Column(
            "fingerprint",
            sa.String(length=64),
            nullable=False,
            comment="SHA256:… as `ssh-keygen -lf` prints it",
        ),
        sa.Column(
            "public_key", sa.Text(), nullable=False, comment="'<algorithm> <base64>', no comment"
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("fingerprint"),
    )
    op.create_index(op.f("ix_ssh_keys_user_id"), "ssh_keys", ["user_id"], unique=False)
    op.create_index("uq_ssh_keys_user_name", "ssh_keys", ["user_id", "name"], unique=True)
    op.create_table(
        "ssh_sessions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("instance_id", sa.String(length=32), nullable=True),
        sa.Column("user_id", sa.String(length=32), nullable=True),
        sa.Column(
            "login", sa.String(length=128), nullable=False, comment="the SSH user name as sent"
        ),
        sa.Column("client_address", sa.String(length=64), nullable=False),
        sa.Column("key_fingerprint", sa.String(length=64), nullable=True),
        sa.Column(
            "outcome",
            sa.Enum(
                "open",
                "closed",
                "refused",
                name="sshsessionoutcome",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("bytes_in", sa.BigInteger(), nullable=False, comment="client → instance"),
        sa.Column("bytes_out", sa.BigInteger(), nullable=False, comment="instance → client"),
        sa.ForeignKeyConstraint(["instance_id"], ["instances.id"]),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_ssh_sessions_instance_started",
        "ssh_sessions",
        ["instance_id", "started_at"],
        unique=False,
    )
    op.create_index(op.f("ix_ssh_sessions_user_id"), "ssh_sessions", ["user_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_ssh_sessions_user_id"), table_name="ssh_sessions")
    op.drop_index("ix_ssh_sessions_instance_started", table_name="ssh_sessions")
    op.drop_table("ssh_sessions")
    op.drop_index("uq_ssh_keys_user_name", table_name="ssh_keys")
    op.drop_index(op.f("ix_ssh_keys_user_id"), table_name="ssh_keys")
    op.drop_table("ssh_keys")
