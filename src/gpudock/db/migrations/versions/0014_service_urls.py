"""Service URLs: published ports, their token links, the instance's service token

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "instances",
        sa.Column(
            "service_token",
            sa.String(length=64),
            nullable=True,
            comment="what the proxy presents to services that ask for a token (JupyterLab); "
            "the container has it as GPUDOCK_SERVICE_TOKEN; None: rows from before service URLs",
        ),
    )
    op.create_table(
        "instance_services",
        sa.Column("id", sa.String(length=32), primary_key=True),
        sa.Column(
            "instance_id",
            sa.String(length=32),
            sa.ForeignKey("instances.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(length=32), nullable=False, comment="the URL's service part"),
        sa.Column("port", sa.Integer(), nullable=False, comment="TCP port inside the instance"),
        sa.Column(
            "kind",
            sa.String(length=16),
            nullable=False,
            comment="http: the URL prefix is stripped; jupyter: the prefix is kept and the "
            "instance's service token is presented; tensorboard: the prefix is kept",
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_instance_services_instance_id", "instance_services", ["instance_id"])
    op.create_index(
        "uq_instance_services_name", "instance_services", ["instance_id", "name"], unique=True
    )
    op.create_table(
        "service_links",
        sa.Column("id", sa.String(length=32), primary_key=True),
        sa.Column(
            "service_id",
            sa.String(length=32),
            sa.ForeignKey("instance_services.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("token_hash", sa.String(length=64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "expires_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="None: until revoked (a link the owner copied)",
        ),
    )
    op.create_index("ix_service_links_service_id", "service_links", ["service_id"])


def downgrade() -> None:
    op.drop_index("ix_service_links_service_id", table_name="service_links")
    op.drop_table("service_links")
    op.drop_index("uq_instance_services_name", table_name="instance_services")
    op.drop_index("ix_instance_services_instance_id", table_name="instance_services")
    op.drop_table("instance_services")
    op.drop_column("instances", "service_token")
