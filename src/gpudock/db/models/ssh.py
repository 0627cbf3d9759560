"""SSH keys and the gateway's session audit."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from gpudock.db.models.base import Base, UTCDateTime, enum_column


class SshKeyModel(Base):
    """A user's SSH public key; the SSH gateway finds keys by fingerprint.

    A key belongs to one user only (the fingerprint is unique), so a key
    names exactly one person when it authenticates.
    """

    __tablename__ = "ssh_keys"
    __table_args__ = (Index("uq_ssh_keys_user_name", "user_id", "name", unique=True),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    algorithm: Mapped[str] = mapped_column(String(64), comment="e.g. ssh-ed25519")
    bits: Mapped[int] = mapped_column(Integer)
    fingerprint: Mapped[str] = mapped_column(
        String(64), unique=True, comment="SHA256:… as `ssh-keygen -lf` prints it"
    )
    public_key: Mapped[str] = mapped_column(Text, comment="'<algorithm> <base64>', no comment")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    verified_at: Mapped[datetime | None] = mapped_column(
        UTCDateTime,
        nullable=True,
        comment="when its holder proved possession; None: registered before proofs",
    )


class SshSessionOutcome(enum.StrEnum):
    OPEN = "open"
    CLOSED = "closed"
    REFUSED = "refused"


class SshSessionOrigin(enum.StrEnum):
    """Where a session came in: the SSH gateway, or the console's browser terminal."""

    SSH = "ssh"
    WEB = "web"


class SshSessionModel(Base):
    """The SSH audit trail: one row per authenticated connection (open, then
    closed with its byte counts) and one per refused attempt, with the reason.
    A browser terminal's shell is a row too (`origin` web, no key): one row per
    shell, however often its page reconnects to it."""

    __tablename__ = "ssh_sessions"
    __table_args__ = (Index("ix_ssh_sessions_instance_started", "instance_id", "started_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_id: Mapped[str | None] = mapped_column(ForeignKey("instances.id"), nullable=True)
    user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True, index=True
    )
    login: Mapped[str] = mapped_column(String(128), comment="the SSH user name as sent")
    client_address: Mapped[str] = mapped_column(String(64))
    key_fingerprint: Mapped[str | None] = mapped_column(String(64), nullable=True)
    origin: Mapped[SshSessionOrigin] = mapped_column(
        enum_column(SshSessionOrigin), default=SshSessionOrigin.SSH, server_default="ssh"
    )
    outcome: Mapped[SshSessionOutcome] = mapped_column(enum_column(SshSessionOutcome))
    reason: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    bytes_in: Mapped[int] = mapped_column(BigInteger, default=0, comment="client → instance")
    bytes_out: Mapped[int] = mapped_column(BigInteger, default=0, comment="instance → client")
