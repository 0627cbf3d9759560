"""Hosts enrolled with a `gpudock agent`, and the one-time tokens that enroll them.

An enrolled host is also a row of `hosts` (the inventory the scheduler places
on) with the same id, and its GPUs rows of `gpus`, written from its agent's
reports by `services.fleet.agent_inventory`; this table keeps what only an
agent host has: its key, its link and the operator's labels.
"""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpudock.db.models.base import Base, UTCDateTime, enum_column


class AgentHostState(enum.StrEnum):
    PENDING = "pending"  # added, its join token not yet redeemed
    ACTIVE = "active"
    DRAINING = "draining"  # keeps its tenants, takes no new ones


class LinkState(enum.StrEnum):
    NONE = "none"  # never connected
    UP = "up"
    DOWN = "down"


class AgentHostModel(Base):
    """One real host and its agent. Removing the host deletes the row, which is
    what revokes the agent: its key is then unknown to every server."""

    __tablename__ = "agent_hosts"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    state: Mapped[AgentHostState] = mapped_column(
        enum_column(AgentHostState), comment="change only via services.agents.hosts"
    )
    agent_key: Mapped[str | None] = mapped_column(
        Text, nullable=True, unique=True, comment="the agent's pinned SSH host key (OpenSSH form)"
    )
    agent_version: Mapped[str] = mapped_column(String(32), default="")
    engine_version: Mapped[str] = mapped_column(String(32), default="")
    driver_version: Mapped[str] = mapped_column(String(32), default="")
    gpus: Mapped[str] = mapped_column(
        Text, default="[]", comment="JSON list of the GPUs the agent's NVML reports"
    )
    link_state: Mapped[LinkState] = mapped_column(enum_column(LinkState))
    link_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    link_peer: Mapped[str] = mapped_column(
        String(64), default="", comment="the address the agent's connection came from"
    )
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    lost_at: Mapped[datetime | None] = mapped_column(
        UTCDateTime,
        nullable=True,
        comment="when the host was declared lost (no heartbeat for GPUDOCK_HOST_LOST_AFTER_S); "
        "None: not lost",
    )
    labels: Mapped[str] = mapped_column(
        Text, default="{}", comment="the operator's labels (JSON object, e.g. region, zone)"
    )
    health_seq: Mapped[int] = mapped_column(
        Integer,
        default=0,
        server_default="0",
        comment="the highest number of the agent's health journal recorded as faults "
        "(each record is recorded once, however often it is sent)",
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    enrolled_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class JoinTokenModel(Base):
    """A one-time enrollment token for one host, stored as the SHA-256 of its secret."""

    __tablename__ = "agent_join_tokens"
    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    host_id: Mapped[str] = mapped_column(
        ForeignKey("agent_hosts.id", ondelete="CASCADE"), index=True
    )
    secret_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
