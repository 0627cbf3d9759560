"""Instances, their events, and the GPU allocations that tie them to GPUs."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from gpudock.db.models.base import Base, UTCDateTime, enum_column

if TYPE_CHECKING:
    from gpudock.db.models.fleet import HostModel


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
    MIGRATING = "migrating"  # moving off a failed GPU or host
    UNREACHABLE = "unreachable"  # its host is lost; waiting for it (the data lives there)


class HostLossPolicy(enum.StrEnum):
    """What happens to an instance whose host is lost."""

    WAIT = "wait"  # wait for the host: the data volume lives there
    ELSEWHERE = "elsewhere"  # restart on another host, with an empty data volume


class DesiredState(enum.StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"
    DELETED = "deleted"


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
        # The lifecycle's scan for rows that need a step (migration 0022).
        Index("ix_instances_status_desired", "status", "desired_state"),
        # What placed instances hold per host, read by every placement pass
        # (host first: the queue's `placed IS 0` must not pick it; migration 0022).
        Index("ix_instances_placed_host", "host_id", "placed", "cpu", "memory_gb"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(63))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    gpu_model: Mapped[str | None] = mapped_column(String(64), nullable=True)
    gpu_count: Mapped[int] = mapped_column(Integer)
    gpu_model_choices: Mapped[str] = mapped_column(
        Text,
        default="",
        comment="comma-separated GPU models the request accepts ('': gpu_model only); "
        "placement sets gpu_model to the one it got",
    )
    gpu_share_milli: Mapped[int | None] = mapped_column(
        Integer, nullable=True, comment="a share of one GPU, in milli-GPU; None: whole GPUs"
    )
    image: Mapped[str] = mapped_column(String(512), comment="the image the user asked for")
    system_image: Mapped[str] = mapped_column(
        String(512), comment="what the next container is created from (a commit after a move)"
    )
    env: Mapped[str] = mapped_column(Text, default="{}", comment="user env as JSON")
    cpu: Mapped[float] = mapped_column(Float)
    memory_gb: Mapped[int] = mapped_column(Integer)
    disk_gb: Mapped[int] = mapped_column(Integer)
    # The system disk's size; None: rows from before it was recorded (the setting's default).
    system_disk_gb: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status: Mapped[InstanceStatus] = mapped_column(
        enum_column(InstanceStatus),
        comment="written only by services.instances.switch_instance_status()",
    )
    status_reason: Mapped[str] = mapped_column(Text, default="")
    status_reason_msg: Mapped[dict[str, Any] | None] = mapped_column(
        JSON, nullable=True, comment="status_reason as message id + parameters (gpudock.messages)"
    )
    desired_state: Mapped[DesiredState] = mapped_column(enum_column(DesiredState))
    host_id: Mapped[str | None] = mapped_column(
        ForeignKey("hosts.id"), nullable=True, comment="where it runs, or ran last"
    )
    placed: Mapped[bool] = mapped_column(
        Boolean, default=False, comment="holds its GPUs, CPU and memory on host_id now"
    )
    placement_generation: Mapped[int] = mapped_column(
        Integer,
        default=0,
        server_default="0",
        comment="grows by one each time the placement pass places it (written there "
        "only); an agent refuses a command for an older generation than it has seen",
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
    # where the data volume lives now (it follows the instance between hosts)
    data_volume: Mapped[str | None] = mapped_column(
        String(255), nullable=True, comment="the data volume's name; None until first created"
    )
    data_host_id: Mapped[str | None] = mapped_column(
        ForeignKey("hosts.id"), nullable=True, comment="the host that holds data_volume"
    )
    stay_on_host: Mapped[bool] = mapped_column(
        Boolean, default=False, comment="start waits for host_id instead of moving"
    )
    host_labels: Mapped[str] = mapped_column(
        Text, default="{}", comment="labels a host must carry to be placed on (JSON object)"
    )
    host_loss_policy: Mapped[HostLossPolicy] = mapped_column(
        enum_column(HostLossPolicy), default=HostLossPolicy.WAIT
    )

    service_token: Mapped[str | None] = mapped_column(
        String(64),
        nullable=True,
        comment="what the proxy presents to services that ask for a token (JupyterLab); "
        "the container has it as GPUDOCK_SERVICE_TOKEN; None: rows from before service URLs",
    )
    command: Mapped[str | None] = mapped_column(
        Text,
        nullable=True,
        comment="a job's shell command line, run as the container's main process "
        "(/bin/sh -c); None: gpudock's keep-alive",
    )
    last_service_use_at: Mapped[datetime | None] = mapped_column(
        UTCDateTime,
        nullable=True,
        comment="the last request or open stream through the service-URL proxy "
        "(written at most once a minute); the idle rule counts from it",
    )

    host: Mapped[HostModel | None] = relationship(foreign_keys=[host_id])

    @property
    def accepted_models(self) -> tuple[str, ...]:
        """The GPU models this instance may be placed on, its own first."""
        choices = [m for m in self.gpu_model_choices.split(",") if m]
        return tuple(dict.fromkeys([*([self.gpu_model] if self.gpu_model else []), *choices]))


class InstanceEventModel(Base):
    __tablename__ = "instance_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    from_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text, default="")
    message_msg: Mapped[dict[str, Any] | None] = mapped_column(
        JSON, nullable=True, comment="message as message id + parameters (gpudock.messages)"
    )
