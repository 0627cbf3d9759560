"""The ledger's accounts and postings, metering intervals, prices. Money is
integer micro-units (BigInteger) everywhere; see gpudock.billing."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from gpudock.db.models.base import Base, UTCDateTime

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
    description_msg: Mapped[dict[str, Any] | None] = mapped_column(
        JSON, nullable=True, comment="description as message id + parameters (gpudock.messages)"
    )
    created_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    request_digest: Mapped[str | None] = mapped_column(
        String(64), nullable=True, comment="what a top-up asked for, to refuse a reused key"
    )


class BillingMonthTotalModel(Base):
    """What each user's postings of one kind add up to in one calendar month (UTC),
    moved by `post_many` in the postings' own transaction: a month's spending is
    then a few rows, not a sum over every per-minute charge of the month."""

    __tablename__ = "billing_month_totals"
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), primary_key=True)
    month: Mapped[str] = mapped_column(String(7), primary_key=True, comment="YYYY-MM, UTC")
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    amount_micro: Mapped[int] = mapped_column(BigInteger)


class BillingPriceModel(Base):
    """Admin prices: `gpu:<model>` per GPU-hour, `no_gpu` per hour, `disk` per GB-day."""

    __tablename__ = "billing_prices"
    key: Mapped[str] = mapped_column(String(80), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    gpu_model: Mapped[str | None] = mapped_column(String(64), nullable=True)
    amount_micro: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
