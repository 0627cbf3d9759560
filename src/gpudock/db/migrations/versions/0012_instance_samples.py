"""Instance samples: CPU, memory, disk, network and GPU figures at three resolutions

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "instance_samples",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column(
            "instance_id", sa.String(length=32), sa.ForeignKey("instances.id"), nullable=False
        ),
        sa.Column(
            "at", sa.DateTime(timezone=True), nullable=False, comment="sample time, or bucket start"
        ),
        sa.Column(
            "resolution_s",
            sa.Integer(),
            nullable=False,
            comment="0: one raw sample; 60 / 3600: the average of a minute / an hour",
        ),
        sa.Column(
            "samples", sa.Integer(), nullable=False, comment="raw samples averaged in this row"
        ),
        sa.Column(
            "cpu_percent",
            sa.Float(),
            nullable=True,
            comment="100 = one core busy; None: the first reading",
        ),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column(
            "data_disk_bytes",
            sa.BigInteger(),
            nullable=True,
            comment="used on /root/data; None: not measurable here",
        ),
        sa.Column(
            "system_disk_bytes",
            sa.BigInteger(),
            nullable=True,
            comment="the container's writable layer",
        ),
        sa.Column("disk_read_bps", sa.Float(), nullable=True),
        sa.Column("disk_write_bps", sa.Float(), nullable=True),
        sa.Column("net_rx_bps", sa.Float(), nullable=True),
        sa.Column("net_tx_bps", sa.Float(), nullable=True),
        sa.Column(
            "gpu_utilisation_max",
            sa.Float(),
            nullable=True,
            comment="the busiest GPU's utilisation %; None: no GPU figure",
        ),
        sa.Column(
            "gpu_utilisation_mean",
            sa.Float(),
            nullable=True,
            comment="the mean over its GPUs' utilisation %; None: no GPU figure",
        ),
        sa.Column(
            "gpus",
            sa.Text(),
            nullable=False,
            comment="JSON: [[utilisation %|null, memory MiB|null], ...] per GPU",
        ),
    )
    op.create_index("ix_instance_samples_instance_at", "instance_samples", ["instance_id", "at"])
    op.create_index("ix_instance_samples_resolution_at", "instance_samples", ["resolution_s", "at"])


def downgrade() -> None:
    op.drop_index("ix_instance_samples_resolution_at", table_name="instance_samples")
    op.drop_index("ix_instance_samples_instance_at", table_name="instance_samples")
    op.drop_table("instance_samples")
