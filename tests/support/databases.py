"""Fresh SQLite databases as copies of one migrated once per test process.

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
from functools import cache
from pathlib import Path

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
