"""Auto-stop policies of instances, and what users are told: notifications,
the endpoints they go to (webhooks, email) and the outbox of deliveries."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpudock.db.models.base import Base, UTCDateTime, enum_column


class AutoStopModel(Base):
    """When an instance stops by itself. One row per instance that has a policy;
    written by `services.instances.auto_stop`, read by the auto-stop pass."""

    __tablename__ = "instance_auto_stops"

    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), primary_key=True)
    idle_after_s: Mapped[int | None] = mapped_column(
        Integer, nullable=True, comment="stop after this long idle; None: no idle stop"
    )
    idle_below_pct: Mapped[float] = mapped_column(
        Float, default=5.0, comment="idle: every GPU sample below this utilisation"
    )
    stop_at: Mapped[datetime | None] = mapped_column(
        UTCDateTime, nullable=True, comment="stop at this time; None: no time stop"
    )
    on_exit: Mapped[bool] = mapped_column(
        Boolean, default=False, comment="stop (not restart) when the main process exits"
    )
    idle_warned_at: Mapped[datetime | None] = mapped_column(
        UTCDateTime, nullable=True, comment="when the owner was told an idle stop is near"
    )
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class QueueWaitModel(Base):
    """An instance that waits for GPUs (queued, or moving off a failed one):
    its owner is told when it runs. Kept by `services.notifications.outbox.on_transition`."""

    __tablename__ = "notification_waits"

    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), primary_key=True)
    since: Mapped[datetime] = mapped_column(UTCDateTime)
    moving: Mapped[bool] = mapped_column(Boolean, default=False, comment="off a failed GPU")


class NotificationModel(Base):
    """Something a user is told; the console's list. Its deliveries are written
    in the same transaction (the outbox)."""

    __tablename__ = "notifications"
    __table_args__ = (Index("ix_notifications_user_created", "user_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    kind: Mapped[str] = mapped_column(String(48), comment="e.g. instance.stopped")
    instance_id: Mapped[str | None] = mapped_column(ForeignKey("instances.id"), nullable=True)
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[str] = mapped_column(Text, default="{}", comment="JSON details, as sent")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class EndpointKind(enum.StrEnum):
    WEBHOOK = "webhook"
    EMAIL = "email"


class NotificationEndpointModel(Base):
    """Where a user's notifications go: a webhook URL (signed with its own
    secret) or an email address. Removed endpoints stay, so the delivery log
    can name them."""

    __tablename__ = "notification_endpoints"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    kind: Mapped[EndpointKind] = mapped_column(enum_column(EndpointKind))
    target: Mapped[str] = mapped_column(Text, comment="the URL, or the email address")
    secret: Mapped[str | None] = mapped_column(
        String(128), nullable=True, comment="a webhook's HMAC-SHA256 key; shown once"
    )
    kinds: Mapped[str] = mapped_column(
        Text, default="", comment="comma-separated notification kinds; '': all"
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    removed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class DeliveryState(enum.StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class NotificationDeliveryModel(Base):
    """The outbox: one notification to one endpoint. Its id is the stable
    delivery id receivers de-duplicate on (sending is at least once)."""

    __tablename__ = "notification_deliveries"
    __table_args__ = (Index("ix_notification_deliveries_due", "state", "next_attempt_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    notification_id: Mapped[str] = mapped_column(ForeignKey("notifications.id"), index=True)
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("notification_endpoints.id"), index=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    state: Mapped[DeliveryState] = mapped_column(enum_column(DeliveryState))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_result: Mapped[str] = mapped_column(
        Text, default="", comment="'HTTP 500', 'connection refused', '250 OK', …"
    )
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    lock_token: Mapped[str | None] = mapped_column(String(32), nullable=True)
    lock_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class GpuWatchModel(Base):
    """'Tell me when N × MODEL are free': fired once, then kept as history."""

    __tablename__ = "gpu_watches"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    gpu_model: Mapped[str] = mapped_column(String(64))
    count: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    fired_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
