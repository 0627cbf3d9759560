"""Users, their API tokens, console passwords and sessions."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import (
    Boolean,
    ForeignKey,
    Index,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from gpudock.db.models.base import Base, UTCDateTime, enum_column


class UserState(enum.StrEnum):
    ACTIVE = "active"
    DISABLED = "disabled"  # no access, instances stopped, data kept; enable reverses it
    DELETED = "deleted"  # the row stays for the ledger and audit that point at it


class UserModel(Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    state: Mapped[UserState] = mapped_column(
        enum_column(UserState),
        default=UserState.ACTIVE,
        comment="written only by services.user_states.switch_user_state()",
    )
    state_reason: Mapped[str] = mapped_column(Text, default="")
    state_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class ApiTokenModel(Base):
    """API tokens, stored as SHA-256 hex digests only.

    Revoked tokens keep their row, so that presenting one is answered "revoked"
    rather than "unknown"; their names are free for new tokens.
    """

    __tablename__ = "api_tokens"
    __table_args__ = (
        Index(
            "uq_api_tokens_live_name",
            "user_id",
            "name",
            unique=True,
            sqlite_where=text("revoked_at IS NULL"),
            postgresql_where=text("revoked_at IS NULL"),
        ),
    )
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(
        UTCDateTime, nullable=True, comment="to the minute: written at most once a minute"
    )

    user: Mapped[UserModel] = relationship()


class UserPasswordModel(Base):
    """A console password: an argon2id hash, one per user (API tokens live apart)."""

    __tablename__ = "user_passwords"
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    password_hash: Mapped[str] = mapped_column(String(256))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class WebSessionModel(Base):
    """A console login; the cookie holds a random value, the row only its SHA-256."""

    __tablename__ = "web_sessions"
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)

    user: Mapped[UserModel] = relationship()
