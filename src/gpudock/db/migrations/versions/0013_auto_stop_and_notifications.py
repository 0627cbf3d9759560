"""Auto-stop policies, notifications, their endpoints and the delivery outbox

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _lease() -> list[sa.Column[object]]:
    return [
        sa.Column("lock_token", sa.String(32), nullable=True),
        sa.Column("lock_expires_at", sa.DateTime(timezone=True), nullable=True),
    ]


def upgrade() -> None:
    op.create_table(
        "instance_auto_stops",
        sa.Column("instance_id", sa.String(32), sa.ForeignKey("instances.id"), primary_key=True),
        sa.Column(
            "idle_after_s",
            sa.Integer(),
            nullable=True,
            comment="stop after this long idle; None: no idle stop",
        ),
        sa.Column(
            "idle_below_pct",
            sa.Float(),
            nullable=False,
            comment="idle: every GPU sample below this utilisation",
        ),
        sa.Column(
            "stop_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="stop at this time; None: no time stop",
        ),
        sa.Column(
            "on_exit",
            sa.Boolean(),
            nullable=False,
            comment="stop (not restart) when the main process exits",
        ),
        sa.Column(
            "idle_warned_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when the owner was told an idle stop is near",
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "notification_waits",
        sa.Column("instance_id", sa.String(32), sa.ForeignKey("instances.id"), primary_key=True),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("moving", sa.Boolean(), nullable=False, comment="off a failed GPU"),
    )
    op.create_table(
        "notifications",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.String(32), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("kind", sa.String(48), nullable=False, comment="e.g. instance.stopped"),
        sa.Column("instance_id", sa.String(32), sa.ForeignKey("instances.id"), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False, comment="JSON details, as sent"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_notifications_user_created", "notifications", ["user_id", "created_at"])
    op.create_table(
        "notification_endpoints",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.String(32), sa.ForeignKey("users.id"), nullable=False),
        sa.Column(
            "kind",
            sa.Enum("webhook", "email", name="endpointkind", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("target", sa.Text(), nullable=False, comment="the URL, or the email address"),
        sa.Column(
            "secret",
            sa.String(128),
            nullable=True,
            comment="a webhook's HMAC-SHA256 key; shown once",
        ),
        sa.Column(
            "kinds",
            sa.Text(),
            nullable=False,
            comment="comma-separated notification kinds; '': all",
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_notification_endpoints_user_id", "notification_endpoints", ["user_id"])
    op.create_table(
        "notification_deliveries",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "notification_id", sa.String(32), sa.ForeignKey("notifications.id"), nullable=False
        ),
        sa.Column(
            "endpoint_id",
            sa.String(32),
            sa.ForeignKey("notification_endpoints.id"),
            nullable=False,
        ),
        sa.Column("user_id", sa.String(32), sa.ForeignKey("users.id"), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "pending", "delivered", "failed", name="deliverystate", native_enum=False, length=16
            ),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "last_result",
            sa.Text(),
            nullable=False,
            comment="'HTTP 500', 'connection refused', '250 OK', …",
        ),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        *_lease(),
    )
    op.create_index(
        "ix_notification_deliveries_due", "notification_deliveries", ["state", "next_attempt_at"]
    )
    for column in ("notification_id", "endpoint_id", "user_id"):
        op.create_index(f"ix_notification_deliveries_{column}", "notification_deliveries", [column])
    op.create_table(
        "gpu_watches",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.String(32), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("gpu_model", sa.String(64), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_gpu_watches_user_id", "gpu_watches", ["user_id"])


def downgrade() -> None:
    op.drop_table("gpu_watches")
    op.drop_table("notification_deliveries")
    op.drop_table("notification_endpoints")
    op.drop_table("notifications")
    op.drop_table("notification_waits")
    op.drop_table("instance_auto_stops")
