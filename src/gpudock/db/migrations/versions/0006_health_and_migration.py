"""GPU health and migration: faults, GPU state events, migrations, data volume location

Revision ID: 0006
Revises: 0001
Create Date: 2026-11-29 21:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.add_column(sa.Column("state_reason", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(
            sa.Column("state_changed_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.alter_column(
            "state",
            existing_type=sa.String(length=16),
            existing_nullable=False,
            comment="written only by services.health.switch_gpu_state()",
        )
    with op.batch_alter_table("instances") as batch_op:
        batch_op.add_column(
            sa.Column(
                "data_volume",
                sa.String(length=255),
                nullable=True,
                comment="the data volume's name; None until first created",
            )
        )
        batch_op.add_column(
            sa.Column(
                "data_host_id",
                sa.String(length=32),
                nullable=True,
                comment="the host that holds data_volume",
            )
        )
        batch_op.add_column(
            sa.Column(
                "stay_on_host",
                sa.Boolean(),
                nullable=False,
                server_default=sa.false(),
                comment="start waits for host_id instead of moving",
            )
        )
        batch_op.create_foreign_key(
            "fk_instances_data_host_id_hosts", "hosts", ["data_host_id"], ["id"]
        )
    op.create_table(
        "gpu_faults",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("gpu_id", sa.String(length=64), nullable=False),
        sa.Column("host_id", sa.String(length=32), nullable=False),
        sa.Column(
            "kind", sa.String(length=32), nullable=False, comment="xid, ecc_dbe, remapped_rows, ..."
        ),
        sa.Column("xid", sa.Integer(), nullable=True),
        sa.Column(
            "action", sa.String(length=32), nullable=False, comment="see gpudock.gpu.xid.Action"
        ),
        sa.Column(
            "source", sa.String(length=16), nullable=False, comment="nvml, simulated, runtime"
        ),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("repaired_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"]),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_gpu_faults_gpu_at", "gpu_faults", ["gpu_id", "at"], unique=False)
    op.create_index(op.f("ix_gpu_faults_host_id"), "gpu_faults", ["host_id"], unique=False)
    op.create_table(
        "gpu_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("gpu_id", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=False),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_gpu_events_gpu_at", "gpu_events", ["gpu_id", "at"], unique=False)
    op.create_table(
        "migrations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("instance_id", sa.String(length=32), nullable=False),
        sa.Column("fault_id", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False, comment="fault, drain or start"),
        sa.Column("gpu_model", sa.String(length=64), nullable=True),
        sa.Column("from_host_id", sa.String(length=32), nullable=True),
        sa.Column("from_gpus", sa.Text(), nullable=False),
        sa.Column("to_host_id", sa.String(length=32), nullable=True),
        sa.Column("to_gpus", sa.Text(), nullable=False),
        sa.Column(
            "outcome",
            sa.String(length=16),
            nullable=False,
            comment="moving, done, abandoned (the user stopped or deleted it)",
        ),
        sa.Column("bytes_copied", sa.BigInteger(), nullable=False),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="the fault's timestamp, or the start request's",
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["fault_id"], ["gpu_faults.id"]),
        sa.ForeignKeyConstraint(["instance_id"], ["instances.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_migrations_instance", "migrations", ["instance_id", "started_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_migrations_instance", table_name="migrations")
    op.drop_table("migrations")
    op.drop_index("ix_gpu_events_gpu_at", table_name="gpu_events")
    op.drop_table("gpu_events")
    op.drop_index(op.f("ix_gpu_faults_host_id"), table_name="gpu_faults")
    op.drop_index("ix_gpu_faults_gpu_at", table_name="gpu_faults")
    op.drop_table("gpu_faults")
    with op.batch_alter_table("instances") as batch_op:
        batch_op.drop_constraint("fk_instances_data_host_id_hosts", type_="foreignkey")
        batch_op.drop_column("stay_on_host")
        batch_op.drop_column("data_host_id")
        batch_op.drop_column("data_volume")
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.drop_column("first_seen_at")
        batch_op.drop_column("state_changed_at")
        batch_op.drop_column("state_reason")
