"""Engine and session factory; migrations applied on start."""

from __future__ import annotations

import ast
import re
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from gpudock.errors import InvalidRequest

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
READ_ONLY_OPTION = "gpudock_read_only"
SQLITE_BUSY_TIMEOUT_S = 30
_HOLDS_WRITE_TURN = "gpudock_holds_write_turn"
_WRITE_TURNS: weakref.WeakKeyDictionary[Engine, threading.Lock] = weakref.WeakKeyDictionary()


def make_engine(url: str) -> Engine:
    try:
        return _make_engine(url)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise InvalidRequest(
            f"bad database URL {url.split('@')[-1]!r}: {exc}; use e.g. "
            "sqlite:////var/lib/gpudock/gpudock.db or postgresql+psycopg://user:pass@host/db",
            field="database_url",
        ) from exc


def _make_engine(url: str) -> Engine:
    """Create an engine; SQLite gets WAL, a busy timeout, BEGIN IMMEDIATE and a
    write turn (`_queue_writers_in_process`).

    BEGIN IMMEDIATE makes every SQLite transaction take the write lock up
    front, so two writers queue instead of failing with 'database is locked'
    when a reader tries to upgrade.
    """
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
            pool_size=20,
        )
        _queue_writers_in_process(engine)  # first: its "begin" runs before BEGIN IMMEDIATE
        _configure_sqlite(engine)
        return engine
    return create_engine(url, pool_size=20, max_overflow=10, pool_pre_ping=True)


def write_turn(engine: Engine) -> threading.Lock | None:
    """The lock this process's writers take turns on (SQLite only; None otherwise)."""
    return _WRITE_TURNS.get(engine)


def _queue_writers_in_process(engine: Engine) -> None:
    """Writers of this process take turns on a lock before BEGIN IMMEDIATE.

    Without it, a writer that finds SQLite's write lock taken sleeps in SQLite's busy
    handler (1, 2, 5 … 100 ms, growing) and sees the lock free only when it wakes:
    under load the lock sits idle between holders while a queue of writers sleeps,
    each holding a pooled connection, and readers then wait for a connection too.
    A lock in the process hands the turn over the moment the last writer's
    connection goes back to the pool (after its COMMIT or rollback). Other processes
    on the same file still meet SQLite's busy handler, as before; a turn not had
    within the busy timeout falls back to it too (never worse than without)."""
    turn = _WRITE_TURNS[engine] = threading.Lock()

    @event.listens_for(engine, "begin")
    def _take_turn(connection: Any) -> None:
        if connection.get_execution_options().get(READ_ONLY_OPTION, False):
            return
        info = connection.connection.info  # the pooled connection's, kept across uses
        if not info.get(_HOLDS_WRITE_TURN) and turn.acquire(timeout=SQLITE_BUSY_TIMEOUT_S):
            info[_HOLDS_WRITE_TURN] = True

    def _give_turn_back(_dbapi_connection: Any, record: Any, *_args: Any) -> None:
        if record is not None and record.info.pop(_HOLDS_WRITE_TURN, False):
            turn.release()

    event.listen(engine, "checkin", _give_turn_back)
    event.listen(engine, "invalidate", _give_turn_back)  # closed: its transaction is gone


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # Read-only sessions (make_read_sessionmaker) take no write lock: in
        # WAL mode they read a snapshot while a writer works.
        read_only = connection.get_execution_options().get(READ_ONLY_OPTION, False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    # The ORM is imported here, not with the module: `gpudock server` opens the
    # database with the core alone before it listens (api/staged.py).
    from sqlalchemy.orm import sessionmaker

    return sessionmaker(engine, expire_on_commit=False)


def make_read_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions for queries only; on SQLite they do not queue behind writers."""
    from sqlalchemy.orm import sessionmaker

    return sessionmaker(
        engine.execution_options(**{READ_ONLY_OPTION: True}), expire_on_commit=False
    )


def alembic_config(engine: Engine) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection_engine"] = engine
    return config


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (idempotent). A database already
    there is told so without Alembic, whose import alone costs a good part of
    a second of the server's start."""
    if applied_revisions(engine) == head_revisions():
        return
    from alembic import command

    command.upgrade(alembic_config(engine), "heads")


_REVISION_LINE = re.compile(r"^(revision|down_revision|depends_on)\b[^=]*=\s*(.+)$", re.MULTILINE)


def head_revisions() -> set[str]:
    """The revisions no other revision builds on or depends on (Alembic's heads,
    as `alembic_version` holds them), read from the scripts' headers."""
    revisions: set[str] = set()
    built_on: set[str] = set()
    for script in (MIGRATIONS_DIR / "versions").glob("*.py"):
        for name, value in _REVISION_LINE.findall(script.read_text()):
            parsed = ast.literal_eval(value.split("#", 1)[0].strip())
            if name == "revision":
                revisions.add(parsed)
            elif parsed is not None:
                built_on.update((parsed,) if isinstance(parsed, str) else parsed)
    return revisions - built_on


def applied_revisions(engine: Engine) -> set[str]:
    """What `alembic_version` says the database is at (empty: not migrated yet)."""
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT version_num FROM alembic_version"))
            return {row[0] for row in rows}
    except DBAPIError:
        return set()
