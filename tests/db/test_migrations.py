"""The migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from gpudock.db.engine import make_engine, migrate
from gpudock.db.models import Base


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_migrations_match_the_models(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        request.getfixturevalue("postgres_url")
        if backend == "postgres"
        else f"sqlite:///{tmp_path / 'm.db'}"
    )
    engine = make_engine(url)
    try:
        migrate(engine)
        migrate(engine)  # idempotent
        with engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert diff == [], f"models and migrations differ: {diff}"
    finally:
        engine.dispose()
