"""Published ports of instances (service URLs) and the token links that open them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from gpudock.db.models.base import Base, UTCDateTime


class InstanceServiceModel(Base):
    """A port inside an instance that the server's proxy serves at a URL of its
    own (`/i/<instance id>/<name>/`, or a subdomain); written only by
    `services.instances.published`."""

    __tablename__ = "instance_services"
    __table_args__ = (Index("uq_instance_services_name", "instance_id", "name", unique=True),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    instance_id: Mapped[str] = mapped_column(
        ForeignKey("instances.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(32), comment="the URL's service part")
    port: Mapped[int] = mapped_column(Integer, comment="TCP port inside the instance")
    kind: Mapped[str] = mapped_column(
        String(16),
        comment="http: the URL prefix is stripped; jupyter: the prefix is kept and the "
        "instance's service token is presented; tensorboard: the prefix is kept",
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ServiceLinkModel(Base):
    """A token that opens one service without a console login (a link the
    owner copies); the database keeps only its SHA-256."""

    __tablename__ = "service_links"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    service_id: Mapped[str] = mapped_column(
        ForeignKey("instance_services.id", ondelete="CASCADE"), index=True
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(
        UTCDateTime, nullable=True, comment="None: until revoked (a link the owner copied)"
    )
