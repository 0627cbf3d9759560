"""billing: ledger accounts, postings, metering intervals, prices

Revision ID: 0003
Revises: 0001
Create Date: 2026-11-29 19:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "billing_accounts",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=True),
        sa.Column(
            "balance_micro",
            sa.BigInteger(),
            nullable=False,
            comment="cache of credits minus debits, updated in each posting's transaction",
        ),
        sa.Column("monthly_budget_micro", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("user_id"),
    )
    op.create_table(
        "billing_intervals",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("instance_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False, comment="compute | storage"),
        sa.Column(
            "opened_at", sa.DateTime(timezone=True), nullable=False, comment="the runtime's time"
        ),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("gpu_model", sa.String(length=64), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("disk_gb", sa.Integer(), nullable=False),
        sa.Column("unit_price_micro", sa.BigInteger(), nullable=False),
        sa.Column("rate_micro", sa.BigInteger(), nullable=False),
        sa.Column(
            "rate_per_s",
            sa.Integer(),
            nullable=False,
            comment="3600 (per hour) or 86400 (per day)",
        ),
        sa.Column("charged_seconds", sa.BigInteger(), nullable=False),
        sa.Column("warned", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["instance_id"], ["instances.id"]),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_billing_intervals_instance_id", "billing_intervals", ["instance_id"], unique=False
    )
    op.create_index(
        "ix_billing_intervals_user_closed",
        "billing_intervals",
        ["user_id", "closed_at"],
        unique=False,
    )
    op.create_index(
        "uq_billing_intervals_open",
        "billing_intervals",
        ["instance_id", "kind"],
        unique=True,
        sqlite_where=sa.text("closed_at IS NULL"),
        postgresql_where=sa.text("closed_at IS NULL"),
    )
    op.create_table(
        "billing_postings",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False, comment="idempotency key"),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("debit_account", sa.String(length=64), nullable=False),
        sa.Column("credit_account", sa.String(length=64), nullable=False),
        sa.Column("amount_micro", sa.BigInteger(), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, comment="when the money moved"),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("instance_id", sa.String(length=32), nullable=True),
        sa.Column("interval_id", sa.String(length=32), nullable=True),
        sa.Column("from_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("to_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("seconds", sa.BigInteger(), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("rate_micro", sa.BigInteger(), nullable=True),
        sa.Column("rate_per_s", sa.Integer(), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(length=32), nullable=True),
        sa.Column(
            "request_digest",
            sa.String(length=64),
            nullable=True,
            comment="what a top-up asked for, to refuse a reused key",
        ),
        sa.CheckConstraint("amount_micro > 0", name="ck_billing_postings_amount_positive"),
        sa.ForeignKeyConstraint(["credit_account"], ["billing_accounts.id"]),
        sa.ForeignKeyConstraint(["debit_account"], ["billing_accounts.id"]),
        sa.ForeignKeyConstraint(["instance_id"], ["instances.id"]),
        sa.ForeignKeyConstraint(["interval_id"], ["billing_intervals.id"]),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    op.create_index(
        "ix_billing_postings_credit_account", "billing_postings", ["credit_account"], unique=False
    )
    op.create_index(
        "ix_billing_postings_debit_account", "billing_postings", ["debit_account"], unique=False
    )
    op.create_index(
        "ix_billing_postings_interval_id", "billing_postings", ["interval_id"], unique=False
    )
    op.create_index(
        "ix_billing_postings_user_at", "billing_postings", ["user_id", "at"], unique=False
    )
    op.create_table(
        "billing_prices",
        sa.Column("key", sa.String(length=80), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=True),
        sa.Column("amount_micro", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=32), nullable=True),
        sa.PrimaryKeyConstraint("key"),
    )


def downgrade() -> None:
    op.drop_table("billing_prices")
    op.drop_index("ix_billing_postings_user_at", table_name="billing_postings")
    op.drop_index("ix_billing_postings_interval_id", table_name="billing_postings")
    op.drop_index("ix_billing_postings_debit_account", table_name="billing_postings")
    op.drop_index("ix_billing_postings_credit_account", table_name="billing_postings")
    op.drop_table("billing_postings")
    op.drop_index("uq_billing_intervals_open", table_name="billing_intervals")
    op.drop_index("ix_billing_intervals_user_closed", table_name="billing_intervals")
    op.drop_index("ix_billing_intervals_instance_id", table_name="billing_intervals")
    op.drop_table("billing_intervals")
    op.drop_table("billing_accounts")
