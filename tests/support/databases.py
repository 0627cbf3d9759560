"""Fresh databases for tests: SQLite as copies of one migrated once per test
process, PostgreSQL as copies of a migrated template made ahead of time.

Migrating an empty SQLite database through every revision costs a quarter to a
half of a second (and a server process imports Alembic for it); a suite that
opens a thousand platforms and a hundred servers pays minutes for it. The copy
is the same file a migration makes, so what runs on it is unchanged; the
migrations themselves are tested from an empty database in `tests/db`.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache
from pathlib import Path

import psycopg

from gpudock.db.engine import make_engine, migrate

DATABASE_FILE = "gpudock.db"  # where the server keeps SQLite in its data dir


@cache
def migrated_template() -> Path:
    """A database at the newest schema, made on first use, removed at exit."""
    directory = Path(tempfile.mkdtemp(prefix="gpudock-schema-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    path = directory / DATABASE_FILE
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()  # the last connection checkpoints the WAL into the file
    return path


def seed_sqlite(data_dir: Path) -> None:
    """Give a data dir with no database yet a migrated one (one that has a database
    keeps it, whatever its revision)."""
    target = data_dir / DATABASE_FILE
    if target.exists():
        return
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    shutil.copyfile(migrated_template(), target)


class PostgresCopies:
    """Copies of a migrated template database, each made before a test asks for it.

    CREATE DATABASE … TEMPLATE and DROP DATABASE take PostgreSQL a few tenths of a
    second each; one worker thread makes the next copy and drops the last one while
    a test runs (the server does that work in its own processes), so a test waits
    only when it comes faster than the copies."""

    def __init__(self, admin_url: str, template: str) -> None:
        self._plain = admin_url.replace("postgresql+psycopg://", "postgresql://")
        self._base = admin_url.rpartition("/")[0]
        self._template = template
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="pg-copies")
        self._next: Future[str] = self._worker.submit(self._create)

    def take(self) -> str:
        """The URL of a fresh copy, all the test's own (drop it with `give_back`)."""
        name = self._next.result()
        self._next = self._worker.submit(self._create)
        return f"{self._base}/{name}"

    def give_back(self, url: str) -> None:
        self._worker.submit(self._drop, url.rpartition("/")[2])

    def close(self) -> None:
        self._worker.submit(self._drop_next)
        self._worker.shutdown(wait=True)

    def _create(self) -> str:
        name = "gpudock_test_" + uuid.uuid4().hex[:10]
        with psycopg.connect(self._plain, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
        return name

    def _drop(self, name: str) -> None:
        with psycopg.connect(self._plain, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _drop_next(self) -> None:
        if self._next.exception() is None:
            self._drop(self._next.result())
