"""SQLite writers of one process take turns on a lock before BEGIN IMMEDIATE, and
every way a transaction ends gives the turn back (a turn kept would stop every
writer of the server)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from gpudock.db.engine import (
    make_engine,
    make_read_sessionmaker,
    make_sessionmaker,
    write_turn,
)


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    made = make_engine(f"sqlite:///{tmp_path / 'turns.db'}")
    with made.begin() as conn:
        conn.execute(text("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)"))
        conn.execute(text("INSERT INTO counter VALUES (1, 0)"))
    return made


def test_a_write_session_holds_the_turn_until_its_connection_is_back(engine: Engine) -> None:
    turn = write_turn(engine)
    assert turn is not None and not turn.locked()
    with make_sessionmaker(engine).begin() as session:
        session.execute(text("UPDATE counter SET n = n + 1"))
        assert turn.locked()
        with make_read_sessionmaker(engine)() as reader:  # a reader never takes it
            assert reader.execute(text("SELECT n FROM counter")).scalar_one() == 0
    assert not turn.locked()


def test_a_rolled_back_or_failed_transaction_gives_the_turn_back(engine: Engine) -> None:
    turn = write_turn(engine)
    assert turn is not None
    with pytest.raises(IntegrityError), make_sessionmaker(engine).begin() as session:
        session.execute(text("INSERT INTO counter VALUES (1, 5)"))  # the key is taken
    assert not turn.locked()
    with make_sessionmaker(engine)() as session:
        session.execute(text("UPDATE counter SET n = 7"))
        session.rollback()
    assert not turn.locked()
    with engine.connect() as conn:  # one connection, two transactions: no deadlock
        conn.execute(text("UPDATE counter SET n = n + 1"))
        conn.commit()
        conn.execute(text("UPDATE counter SET n = n + 1"))
        conn.commit()
    assert not turn.locked()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n FROM counter")).scalar_one() == 2


def test_writers_in_many_threads_all_commit_and_lose_no_update(engine: Engine) -> None:
    sessions = make_sessionmaker(engine)

    def add_ten(_writer: int) -> None:
        for _ in range(10):
            with sessions.begin() as session:
                n = session.execute(text("SELECT n FROM counter")).scalar_one()
                session.execute(text("UPDATE counter SET n = :n"), {"n": n + 1})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(add_ten, range(16)))  # a writer's exception is raised here
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n FROM counter")).scalar_one() == 160
    turn = write_turn(engine)
    assert turn is not None and not turn.locked()


def test_postgresql_has_no_turn_of_its_own() -> None:
    url = "postgresql+psycopg://nobody@127.0.0.1:1/none"  # made, never connected
    assert write_turn(make_engine(url)) is None
