"""Alembic environment: the engine comes from gpudock, never from an ini file."""

from __future__ import annotations

from alembic import context

from gpudock.db.models import Base

engine = context.config.attributes["connection_engine"]

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
