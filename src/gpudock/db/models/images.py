"""Registered images (the built-in catalog lives in code)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    ForeignKey,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from gpudock.db.models.base import Base, UTCDateTime


class ImageModel(Base):
    """A registered image: built here, saved from an instance, or added by hand.

    The built-in public catalog lives in code (`images.catalog`); these rows
    add to it. `compute_capabilities` is a JSON list ('[]': no constraint).
    """

    __tablename__ = "images"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    reference: Mapped[str] = mapped_column(String(512), unique=True)
    # The engine's id of what the entry was registered for: access is decided by
    # id, so an alias of another tenant's private image grants nothing.
    engine_image_id: Mapped[str | None] = mapped_column(String(80), nullable=True, index=True)
    name: Mapped[str] = mapped_column(String(128))
    description: Mapped[str] = mapped_column(Text, default="")
    os: Mapped[str] = mapped_column(String(64), default="")
    python: Mapped[str | None] = mapped_column(String(16), nullable=True)
    framework: Mapped[str | None] = mapped_column(String(32), nullable=True)
    framework_version: Mapped[str | None] = mapped_column(String(32), nullable=True)
    cuda: Mapped[str | None] = mapped_column(String(16), nullable=True)
    cudnn: Mapped[str | None] = mapped_column(String(16), nullable=True)
    min_driver: Mapped[str | None] = mapped_column(String(32), nullable=True)
    compute_capabilities: Mapped[str] = mapped_column(Text, default="[]")
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    visibility: Mapped[str] = mapped_column(String(16))
    origin: Mapped[str] = mapped_column(String(16))
    owner_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), nullable=True, index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
