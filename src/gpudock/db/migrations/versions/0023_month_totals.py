"""Monthly totals of each user's postings, so that a month's spending is a few rows

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-08 02:10:00

The balance page, the funds check under a budget and every charging pass over a
budgeted user summed the month's postings: with a charge per running instance per
minute that is ~43,000 rows per instance-month (345,600 rows took 412 ms on SQLite
here; `bench/month_spent.py`). `post_many` now moves `billing_month_totals` in the postings' own
transaction; the rows already posted are summed into it once, here.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

POSTINGS = sa.table(
    "billing_postings",
    sa.column("user_id", sa.String),
    sa.column("kind", sa.String),
    sa.column("at", sa.DateTime),
    sa.column("amount_micro", sa.BigInteger),
)
TOTALS = sa.table(
    "billing_month_totals",
    sa.column("user_id", sa.String),
    sa.column("month", sa.String),
    sa.column("kind", sa.String),
    sa.column("amount_micro", sa.BigInteger),
)


def _month_of_at(dialect: str) -> sa.ColumnElement[str]:
    """The month of `at` in UTC: SQLite keeps it as UTC text, PostgreSQL as a timestamptz."""
    if dialect == "postgresql":
        return sa.func.to_char(sa.func.timezone("UTC", POSTINGS.c.at), "YYYY-MM")
    return sa.func.substr(POSTINGS.c.at, 1, 7)


def upgrade() -> None:
    op.create_table(
        "billing_month_totals",
        sa.Column("user_id", sa.String(length=32), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False, comment="YYYY-MM, UTC"),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("amount_micro", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "month", "kind"),
    )
    month = _month_of_at(op.get_bind().dialect.name)
    sums = sa.select(
        POSTINGS.c.user_id, month, POSTINGS.c.kind, sa.func.sum(POSTINGS.c.amount_micro)
    ).group_by(POSTINGS.c.user_id, month, POSTINGS.c.kind)
    op.execute(TOTALS.insert().from_select(["user_id", "month", "kind", "amount_micro"], sums))


def downgrade() -> None:
    op.drop_table("billing_month_totals")
