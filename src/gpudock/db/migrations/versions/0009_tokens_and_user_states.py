"""Named API tokens with expiry, revocation and last use; user states (disabled, deleted)

Revision ID: 0009
Revises: 0006
Create Date: 2026-12-02 10:00:00

Columns only are added (no table is rebuilt, so SQLite's foreign keys into
`users` are never dropped and re-created). Existing users become active and
existing tokens (each user's "default") stay valid, without expiry.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_USER_STATE = sa.Enum(
    "active", "disabled", "deleted", name="userstate", native_enum=False, length=16
)


def upgrade() -> None:
    op.add_column(
        "users",
        sa.Column(
            "state",
            _USER_STATE,
            nullable=False,
            server_default="active",
            comment="written only by services.user_states.switch_user_state()",
        ),
    )
    op.add_column("users", sa.Column("state_reason", sa.Text(), nullable=False, server_default=""))
    op.add_column("users", sa.Column("state_changed_at", sa.DateTime(timezone=True)))
    op.add_column("api_tokens", sa.Column("expires_at", sa.DateTime(timezone=True)))
    op.add_column("api_tokens", sa.Column("revoked_at", sa.DateTime(timezone=True)))
    op.add_column(
        "api_tokens",
        sa.Column(
            "last_used_at",
            sa.DateTime(timezone=True),
            comment="to the minute: written at most once a minute",
        ),
    )
    op.create_index(
        "uq_api_tokens_live_name",
        "api_tokens",
        ["user_id", "name"],
        unique=True,
        sqlite_where=sa.text("revoked_at IS NULL"),
        postgresql_where=sa.text("revoked_at IS NULL"),
    )


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite >= 3.35), not a batch rebuild: rebuilding `users`
    # drops the table, and with foreign keys on that cascades into every
    # user's tokens, keys and passwords.
    op.drop_index("uq_api_tokens_live_name", table_name="api_tokens")
    for column in ("last_used_at", "revoked_at", "expires_at"):
        op.drop_column("api_tokens", column)
    for column in ("state_changed_at", "state_reason", "state"):
        op.drop_column("users", column)
