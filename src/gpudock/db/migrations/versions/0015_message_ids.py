"""Message ids: status reasons, events and ledger descriptions as id + parameters

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 03:00:00

Each human text keeps its English rendering (the API's field, the CSV) and gets
its structure beside it, so that the console and the API render it in the
reader's language. Existing rows are matched against the message catalog's
templates (`gpudock.messages.parse`); a text no template fits keeps a NULL
structure and is shown as it was written. The ledger's money columns are not
touched: a description's structure explains a posting, it does not change it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpudock.messages import parse

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = ("0003",)  # the billing tables

COLUMNS = (
    ("instances", "id", "status_reason", "status_reason_msg"),
    ("instance_events", "id", "message", "message_msg"),
    ("billing_postings", "id", "description", "description_msg"),
)
BATCH = 500


def upgrade() -> None:
    for table, _key, text, structure in COLUMNS:
        op.add_column(
            table,
            sa.Column(
                structure,
                sa.JSON(),
                nullable=True,
                comment=f"{text} as message id + parameters (gpudock.messages)",
            ),
        )
    for table, key, text, structure in COLUMNS:
        _fill(table, key, text, structure)


def _fill(table_name: str, key: str, text: str, structure: str) -> None:
    """Set the structure of every row whose text one of the catalog's templates fits."""
    table = sa.table(table_name, sa.column(key), sa.column(text), sa.column(structure, sa.JSON()))
    bind = op.get_bind()
    rows = bind.execute(sa.select(table.c[key], table.c[text]).where(table.c[text] != ""))
    pending: list[dict[str, object]] = []
    for row_key, value in rows.all():
        found = parse(value)
        if found is not None:
            pending.append({"row_key": row_key, "value": found.to_json()})
        if len(pending) >= BATCH:
            _write(table, key, structure, pending)
            pending = []
    if pending:
        _write(table, key, structure, pending)


def _write(
    table: sa.TableClause, key: str, structure: str, pending: list[dict[str, object]]
) -> None:
    statement = (
        sa.update(table)
        .where(table.c[key] == sa.bindparam("row_key"))
        .values({structure: sa.bindparam("value", type_=sa.JSON())})
    )
    op.get_bind().execute(statement, pending)


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite >= 3.35), not a batch rebuild: rebuilding
    # `instances` drops the table, which its events' foreign keys refuse.
    for table, _key, _text, structure in COLUMNS:
        op.drop_column(table, structure)
