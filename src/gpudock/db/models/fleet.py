"""Hosts, their GPUs and the claims on them (whole or shares), GPU faults and
state events, and moves between GPUs."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from gpudock.db.models.base import Base, UTCDateTime, enum_column


class GpuState(enum.StrEnum):
    HEALTHY = "healthy"
    DRAINING = "draining"
    UNHEALTHY = "unhealthy"
    REPAIRING = "repairing"


class HostModel(Base):
    __tablename__ = "hosts"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    cpus: Mapped[float] = mapped_column(Float)
    memory_gb: Mapped[int] = mapped_column(Integer)
    driver_version: Mapped[str] = mapped_column(String(32))
    cuda_version: Mapped[str] = mapped_column(String(16))
    simulated: Mapped[bool] = mapped_column(Boolean)
    agent: Mapped[bool] = mapped_column(
        Boolean,
        default=False,
        comment="reported by its own gpudock agent (id = agent_hosts.id), not the local GPU "
        "source; written by services.fleet.agent_inventory",
    )
    present: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    gpus: Mapped[list[GpuDeviceModel]] = relationship(
        back_populates="host", order_by="GpuDeviceModel.index"
    )


class GpuDeviceModel(Base):
    """One GPU device on a host; its `model` column is the GPU type ("A100-80GB")."""

    __tablename__ = "gpus"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, comment="the GPU's UUID")
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(64), index=True)
    memory_mb: Mapped[int] = mapped_column(Integer)
    pci_bus_id: Mapped[str] = mapped_column(String(32), default="")
    numa_node: Mapped[int | None] = mapped_column(Integer, nullable=True)
    nvlink_peers: Mapped[str] = mapped_column(Text, default="", comment="comma-separated UUIDs")
    state: Mapped[GpuState] = mapped_column(
        enum_column(GpuState),
        default=GpuState.HEALTHY,
        comment="written only by services.health.switch_gpu_state()",
    )
    present: Mapped[bool] = mapped_column(Boolean, default=True)
    # why the state is what it is, and since when (reliability statistics)
    state_reason: Mapped[str] = mapped_column(Text, default="")
    state_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    first_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    host: Mapped[HostModel] = relationship(back_populates="gpus")
    allocation: Mapped[GpuAllocationModel | None] = relationship(back_populates="gpu")
    shares: Mapped[list[GpuShareModel]] = relationship(viewonly=True)

    @property
    def shared_milli(self) -> int:
        """Milli-GPU held by shares (0: none; then it may be allocated whole)."""
        return sum(share.milli for share in self.shares)


class GpuFaultModel(Base):
    """One health event seen on a GPU (or its host), and what gpudock did about it."""

    __tablename__ = "gpu_faults"
    __table_args__ = (Index("ix_gpu_faults_gpu_at", "gpu_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    gpu_id: Mapped[str] = mapped_column(ForeignKey("gpus.id"))
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id"), index=True)
    kind: Mapped[str] = mapped_column(String(32), comment="xid, ecc_dbe, remapped_rows, ...")
    xid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    action: Mapped[str] = mapped_column(String(32), comment="see gpudock.gpu.xid.Action")
    source: Mapped[str] = mapped_column(String(16), comment="nvml, simulated, runtime")
    message: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    repaired_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class GpuEventModel(Base):
    """Every change of a GPU's state; the reliability statistics read it."""

    __tablename__ = "gpu_events"
    __table_args__ = (Index("ix_gpu_events_gpu_at", "gpu_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    gpu_id: Mapped[str] = mapped_column(ForeignKey("gpus.id"))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")


class MigrationModel(Base):
    """One move of an instance to other GPUs: off a fault, or to another host at start."""

    __tablename__ = "migrations"
    __table_args__ = (Index("ix_migrations_instance", "instance_id", "started_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"))
    fault_id: Mapped[int | None] = mapped_column(ForeignKey("gpu_faults.id"), nullable=True)
    reason: Mapped[str] = mapped_column(Text)
    trigger: Mapped[str] = mapped_column(String(16), comment="fault, drain or start")
    gpu_model: Mapped[str | None] = mapped_column(String(64), nullable=True)
    from_host_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    from_gpus: Mapped[str] = mapped_column(Text, default="")
    to_host_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    to_gpus: Mapped[str] = mapped_column(Text, default="")
    outcome: Mapped[str] = mapped_column(
        String(16), comment="moving, done, abandoned (the user stopped or deleted it)"
    )
    bytes_copied: Mapped[int] = mapped_column(BigInteger, default=0)
    started_at: Mapped[datetime] = mapped_column(
        UTCDateTime, comment="the fault's timestamp, or the start request's"
    )
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class GpuAllocationModel(Base):
    """One row per allocated GPU; the primary key makes double allocation impossible."""

    __tablename__ = "gpu_allocations"
    gpu_id: Mapped[str] = mapped_column(ForeignKey("gpus.id"), primary_key=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    allocated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    gpu: Mapped[GpuDeviceModel] = relationship(back_populates="allocation")


class GpuShareModel(Base):
    """A share of one GPU held by one instance. The shares of a GPU never add up
    to a whole card, and never sit on a GPU allocated whole: the placement pass
    checks both under the GPU row's lock in the transaction that inserts one."""

    __tablename__ = "gpu_shares"
    __table_args__ = (CheckConstraint("milli > 0 AND milli < 1000", name="ck_gpu_shares_milli"),)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), primary_key=True)
    gpu_id: Mapped[str] = mapped_column(ForeignKey("gpus.id"), index=True)
    milli: Mapped[int] = mapped_column(Integer)
    allocated_at: Mapped[datetime] = mapped_column(UTCDateTime)
