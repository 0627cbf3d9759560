"""ORM models. The database holds desired state; reconcilers converge reality to it.

Invariants the schema itself enforces (not the scheduler's good will):
- a GPU is allocated to at most one instance (`gpu_allocations.gpu_id` is the key);
- an instance name is unique among one user's live instances (partial unique index);
- a token hash is unique.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime

from sqlalchemy import (
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in and out, whatever the backend stores."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTCDateTime column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


def _enum_column(enum_class: type[enum.StrEnum]) -> Enum:
    """Store enum *values* ('running'), portable across SQLite and PostgreSQL."""
    return Enum(
        enum_class,
        native_enum=False,
        length=16,
        values_callable=lambda members: [m.value for m in members],
        validate_strings=True,
    )


class InstanceStatus(enum.StrEnum):
    PENDING = "pending"
    CREATING = "creating"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    STARTING = "starting"
    DELETING = "deleting"
    DELETED = "deleted"
    FAILED = "failed"


class DesiredState(enum.StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"
    DELETED = "deleted"


class GpuState(enum.StrEnum):
    HEALTHY = "healthy"
    DRAINING = "draining"
    UNHEALTHY = "unhealthy"
    REPAIRING = "repairing"


class MetaModel(Base):
    """Key/value facts about this installation (e.g. its cluster id)."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class UserModel(Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ApiTokenModel(Base):
    """API tokens, stored as SHA-256 hex digests only."""

    __tablename__ = "api_tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    user: Mapped[UserModel] = relationship()


class HostModel(Base):
    __tablename__ = "hosts"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    cpus: Mapped[float] = mapped_column(Float)
    memory_gb: Mapped[int] = mapped_column(Integer)
    driver_version: Mapped[str] = mapped_column(String(32))
    cuda_version: Mapped[str] = mapped_column(String(16))
    simulated: Mapped[bool] = mapped_column(Boolean)
    present: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    gpus: Mapped[list[GpuModel]] = relationship(back_populates="host", order_by="GpuModel.index")


class GpuModel(Base):
    __tablename__ = "gpus"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, comment="the GPU's UUID")
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(64), index=True)
    memory_mb: Mapped[int] = mapped_column(Integer)
    pci_bus_id: Mapped[str] = mapped_column(String(32), default="")
    numa_node: Mapped[int | None] = mapped_column(Integer, nullable=True)
    nvlink_peers: Mapped[str] = mapped_column(Text, default="", comment="comma-separated UUIDs")
    state: Mapped[GpuState] = mapped_column(_enum_column(GpuState), default=GpuState.HEALTHY)
    present: Mapped[bool] = mapped_column(Boolean, default=True)

    host: Mapped[HostModel] = relationship(back_populates="gpus")
    allocation: Mapped[GpuAllocationModel | None] = relationship(back_populates="gpu")


class InstanceModel(Base):
    __tablename__ = "instances"
    __table_args__ = (
        Index(
            "uq_instances_live_name",
            "user_id",
            "name",
            unique=True,
            sqlite_where=text("status != 'deleted'"),
            postgresql_where=text("status != 'deleted'"),
        ),
        Index("ix_instances_status", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(63))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    gpu_model: Mapped[str | None] = mapped_column(String(64), nullable=True)
    gpu_count: Mapped[int] = mapped_column(Integer)
    image: Mapped[str] = mapped_column(String(512), comment="the image the user asked for")
    system_image: Mapped[str] = mapped_column(
        String(512), comment="what the next container is created from (a commit after a move)"
    )
    env: Mapped[str] = mapped_column(Text, default="{}", comment="user env as JSON")
    cpu: Mapped[float] = mapped_column(Float)
    memory_gb: Mapped[int] = mapped_column(Integer)
    disk_gb: Mapped[int] = mapped_column(Integer)
    status: Mapped[InstanceStatus] = mapped_column(
        _enum_column(InstanceStatus),
        comment="written only by services.instances.switch_instance_status()",
    )
    status_reason: Mapped[str] = mapped_column(Text, default="")
    desired_state: Mapped[DesiredState] = mapped_column(_enum_column(DesiredState))
    host_id: Mapped[str | None] = mapped_column(
        ForeignKey("hosts.id"), nullable=True, comment="where it runs, or ran last"
    )
    placed: Mapped[bool] = mapped_column(
        Boolean, default=False, comment="holds its GPUs, CPU and memory on host_id now"
    )
    container_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    container_gpus: Mapped[str] = mapped_column(
        Text, default="", comment="GPU UUIDs the existing container was created with"
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    queued_at: Mapped[datetime] = mapped_column(UTCDateTime)
    lock_token: Mapped[str | None] = mapped_column(String(32), nullable=True)
    lock_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    allocations: Mapped[list[GpuAllocationModel]] = relationship(back_populates="instance")
    host: Mapped[HostModel | None] = relationship()


class GpuAllocationModel(Base):
    """One row per allocated GPU; the primary key makes double allocation impossible."""

    __tablename__ = "gpu_allocations"
    gpu_id: Mapped[str] = mapped_column(ForeignKey("gpus.id"), primary_key=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    allocated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    gpu: Mapped[GpuModel] = relationship(back_populates="allocation")
    instance: Mapped[InstanceModel] = relationship(back_populates="allocations")


class InstanceEventModel(Base):
    __tablename__ = "instance_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    from_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text, default="")
