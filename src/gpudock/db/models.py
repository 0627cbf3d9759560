"""ORM models. The database holds desired state; reconcilers converge reality to it.

Invariants the schema itself enforces (not the scheduler's good will):
- a GPU is allocated to at most one instance (`gpu_allocations.gpu_id` is the key);
- an instance name is unique among one user's live instances (partial unique index);
- a token hash is unique, and a token name unique among one user's unrevoked tokens.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
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
    MIGRATING = "migrating"  # moving off a failed GPU or host


class DesiredState(enum.StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"
    DELETED = "deleted"


class UserState(enum.StrEnum):
    ACTIVE = "active"
    DISABLED = "disabled"  # no access, instances stopped, data kept; enable reverses it
    DELETED = "deleted"  # the row stays for the ledger and audit that point at it


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
    state: Mapped[UserState] = mapped_column(
        _enum_column(UserState),
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
    state: Mapped[GpuState] = mapped_column(
        _enum_column(GpuState),
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
    # The system disk's size; None: rows from before it was recorded (the setting's default).
    system_disk_gb: Mapped[int | None] = mapped_column(Integer, nullable=True)
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

    allocations: Mapped[list[GpuAllocationModel]] = relationship(back_populates="instance")
    host: Mapped[HostModel | None] = relationship(foreign_keys=[host_id])


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


# -- console accounts --


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


# -- image catalog --


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


# -- billing --
# Money is integer micro-units (BigInteger) everywhere; see gpudock.billing.
_BIG_ID = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements INTEGER only


class BillingAccountModel(Base):
    """A ledger account: `user:<id>`, `revenue:compute`, `revenue:storage`, `external:topups`."""

    __tablename__ = "billing_accounts"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"), nullable=True, unique=True)
    balance_micro: Mapped[int] = mapped_column(
        BigInteger,
        default=0,
        comment="cache of credits minus debits, updated in each posting's transaction",
    )
    monthly_budget_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class BillingIntervalModel(Base):
    """One stretch of chargeable time of one instance, its rate frozen when it opened."""

    __tablename__ = "billing_intervals"
    __table_args__ = (
        Index(
            "uq_billing_intervals_open",
            "instance_id",
            "kind",
            unique=True,
            sqlite_where=text("closed_at IS NULL"),
            postgresql_where=text("closed_at IS NULL"),
        ),
        Index("ix_billing_intervals_user_closed", "user_id", "closed_at"),
    )
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    kind: Mapped[str] = mapped_column(String(16), comment="compute | storage")
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime, comment="the runtime's time")
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    gpu_model: Mapped[str | None] = mapped_column(String(64), nullable=True)
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    disk_gb: Mapped[int] = mapped_column(Integer, default=0)
    unit_price_micro: Mapped[int] = mapped_column(BigInteger)
    rate_micro: Mapped[int] = mapped_column(BigInteger)
    rate_per_s: Mapped[int] = mapped_column(Integer, comment="3600 (per hour) or 86400 (per day)")
    charged_seconds: Mapped[int] = mapped_column(BigInteger, default=0)
    warned: Mapped[bool] = mapped_column(Boolean, default=False)


class BillingPostingModel(Base):
    """Append-only: `amount_micro` moves from `debit_account` to `credit_account`."""

    __tablename__ = "billing_postings"
    __table_args__ = (
        CheckConstraint("amount_micro > 0", name="ck_billing_postings_amount_positive"),
        Index("ix_billing_postings_user_at", "user_id", "at"),
    )
    id: Mapped[int] = mapped_column(_BIG_ID, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(200), unique=True, comment="idempotency key")
    kind: Mapped[str] = mapped_column(String(16))
    debit_account: Mapped[str] = mapped_column(ForeignKey("billing_accounts.id"), index=True)
    credit_account: Mapped[str] = mapped_column(ForeignKey("billing_accounts.id"), index=True)
    amount_micro: Mapped[int] = mapped_column(BigInteger)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    at: Mapped[datetime] = mapped_column(UTCDateTime, comment="when the money moved")
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime)
    instance_id: Mapped[str | None] = mapped_column(ForeignKey("instances.id"), nullable=True)
    interval_id: Mapped[str | None] = mapped_column(
        ForeignKey("billing_intervals.id"), nullable=True, index=True
    )
    from_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    to_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    seconds: Mapped[int] = mapped_column(BigInteger, default=0)
    gpu_model: Mapped[str | None] = mapped_column(String(64), nullable=True)
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    rate_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    rate_per_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    request_digest: Mapped[str | None] = mapped_column(
        String(64), nullable=True, comment="what a top-up asked for, to refuse a reused key"
    )


class BillingPriceModel(Base):
    """Admin prices: `gpu:<model>` per GPU-hour, `no_gpu` per hour, `disk` per GB-day."""

    __tablename__ = "billing_prices"
    key: Mapped[str] = mapped_column(String(80), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    gpu_model: Mapped[str | None] = mapped_column(String(64), nullable=True)
    amount_micro: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_by: Mapped[str | None] = mapped_column(String(32), nullable=True)


# -- SSH keys and sessions --


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


class SshSessionModel(Base):
    """The SSH audit trail: one row per authenticated connection (open, then
    closed with its byte counts) and one per refused attempt, with the reason."""

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
    outcome: Mapped[SshSessionOutcome] = mapped_column(_enum_column(SshSessionOutcome))
    reason: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    bytes_in: Mapped[int] = mapped_column(BigInteger, default=0, comment="client → instance")
    bytes_out: Mapped[int] = mapped_column(BigInteger, default=0, comment="instance → client")


# -- GPU health and migration --


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
