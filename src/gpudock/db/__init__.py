"""Persistence: SQLAlchemy 2 models, engine set-up and Alembic migrations."""
