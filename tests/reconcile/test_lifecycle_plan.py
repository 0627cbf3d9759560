"""What the lifecycle does next for every (status, desired state, placed), as a
table; and the scan that finds rows with a step to take finds exactly those."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import pytest
from sqlalchemy import event, not_, select

from gpudock.db.models import DesiredState, InstanceModel, InstanceStatus
from gpudock.platform import Platform
from gpudock.reconcile.lifecycle import SETTLED, UNSETTLED, Step, active_instance_ids, plan_step
from gpudock.services.accounts import users
from gpudock.services.fleet import inventory
from gpudock.services.instances import queue
from tests.support.factories import instance_row
from tests.support.platforms import PlatformFactory

S, D = InstanceStatus, DesiredState
N, MS, MST, RUN, STOP, DEL, EV = (
    Step.NONE,
    Step.MARK_STOPPED,
    Step.MARK_STARTING,
    Step.RUN,
    Step.STOP,
    Step.DELETE,
    Step.EVACUATE,
)
# status: (wanted running: unplaced, placed), (wanted stopped: …), (wanted deleted: …)
TABLE = {
    S.PENDING: ((N, N), (MS, STOP), (DEL, DEL)),
    S.CREATING: ((N, RUN), (STOP, STOP), (DEL, DEL)),
    S.RUNNING: ((N, N), (STOP, STOP), (DEL, DEL)),
    S.STOPPING: ((STOP, STOP), (STOP, STOP), (DEL, DEL)),
    S.STOPPED: ((MST, MST), (N, N), (DEL, DEL)),
    S.STARTING: ((N, RUN), (MS, STOP), (DEL, DEL)),
    S.FAILED: ((MST, MST), (N, N), (DEL, DEL)),
    S.MIGRATING: ((N, EV), (MS, STOP), (DEL, DEL)),
    S.UNREACHABLE: ((N, N), (STOP, STOP), (DEL, DEL)),  # waits for its host to run again
    S.DELETING: ((DEL, DEL), (DEL, DEL), (DEL, DEL)),
    S.DELETED: ((N, N), (N, N), (N, N)),
}
CASES = [
    (status, desired, placed, TABLE[status][d][p])
    for status in TABLE
    for d, desired in enumerate((D.RUNNING, D.STOPPED, D.DELETED))
    for p, placed in enumerate((False, True))
]


def test_the_table_covers_every_status() -> None:
    assert set(TABLE) == set(S)


@pytest.mark.parametrize(
    ("status", "desired", "placed", "step"),
    CASES,
    ids=[f"{s}-{d}-{'placed' if p else 'unplaced'}" for s, d, p, _ in CASES],
)
def test_plan_step(status: InstanceStatus, desired: DesiredState, placed: bool, step: Step) -> None:
    assert plan_step(status, desired, placed) == step


def _add_every_case(platform: Platform) -> None:
    owner = users.create_user(platform.ctx, "ada").user.id
    at = datetime(2026, 12, 1, tzinfo=UTC)
    with platform.ctx.sessions.begin() as session:
        session.add_all(
            instance_row(
                f"i-{n:04d}",
                f"case{n}",
                owner,
                at,
                status=status,
                desired_state=desired,
                placed=placed,
            )
            for n, (status, desired, placed, _step) in enumerate(CASES)
        )


def test_the_scan_finds_every_row_with_a_step_and_no_other(platform: Platform) -> None:
    """One row per case in the database; the scan filters most in SQL, so this
    holds that filter to the table above."""
    _add_every_case(platform)
    with platform.ctx.reader() as session:
        found = set(active_instance_ids(session))
    expected = {f"i-{n:04d}" for n, (*_case, step) in enumerate(CASES) if step != N}
    assert found == expected


def test_the_indexed_filter_is_exactly_the_complement_of_settled(platform: Platform) -> None:
    """UNSETTLED is NOT SETTLED said so that an index can search it: the same
    rows, for every case (an extra row would only cost time, a missing one a
    step never taken)."""
    _add_every_case(platform)
    with platform.ctx.reader() as session:
        unsettled = set(session.scalars(select(InstanceModel.id).where(UNSETTLED)))
        not_settled = set(session.scalars(select(InstanceModel.id).where(not_(SETTLED))))
    assert unsettled == not_settled
    assert {f"i-{n:04d}" for n, (*_case, step) in enumerate(CASES) if step != N} <= unsettled


def _tick_statements(platform: Platform) -> list[tuple[str, tuple[object, ...]]]:
    """The reads of instances that every tick makes (the lifecycle's scan, the
    placement pass's queue and what placed instances hold per host), with their
    parameters, as the platform's engine ran them."""
    statements: list[tuple[str, tuple[object, ...]]] = []
    engine = platform.ctx.sessions.kw["bind"]

    def capture(_conn: object, _cursor: object, sql: str, params: object, *_: object) -> None:
        if sql.lstrip().upper().startswith("SELECT") and "FROM instances" in sql:
            statements.append((sql, tuple(params) if isinstance(params, tuple | list) else ()))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with platform.ctx.reader() as session:
            active_instance_ids(session)
            queue.waiting_in_order(session)
            inventory.capacity_snapshot(session)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    return statements


def _vm_steps(database: str, sql: str, params: tuple[object, ...]) -> int:
    """SQLite's virtual-machine instructions for one statement, counted by its
    progress handler (deterministic, unlike a time)."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    connection = sqlite3.connect(database)
    try:
        connection.set_progress_handler(tick, 1)
        connection.execute(sql, params).fetchall()
    finally:
        connection.close()
    return steps


def test_a_tick_costs_the_same_however_many_settled_instances_there_are(
    platform_factory: PlatformFactory,
) -> None:
    """The lifecycle's scan and the placement pass (its queue, and what placed
    instances hold per host) run on every tick, and a fleet is nearly all
    settled rows. On SQLite, the default database, adding 3,000 stopped
    instances must not make any of their statements read them: each costs the
    same number of SQLite instructions before and after, give or take. (A scan,
    or an index SQLite picks because its leading column is compared but nearly
    every row shares it, would cost thousands more.)"""
    platform = platform_factory()
    _add_every_case(platform)
    database = str(platform.ctx.sessions.kw["bind"].url.database)
    before = {sql: _vm_steps(database, sql, params) for sql, params in _tick_statements(platform)}
    owner = users.create_user(platform.ctx, "bob").user.id
    at = datetime(2026, 12, 1, tzinfo=UTC)
    with platform.ctx.sessions.begin() as session:
        session.add_all(
            instance_row(
                f"s-{n:05d}", f"stopped{n}", owner, at, status=S.STOPPED, desired_state=D.STOPPED
            )
            for n in range(3_000)
        )
    after = {sql: _vm_steps(database, sql, params) for sql, params in _tick_statements(platform)}
    assert len(before) == 3 and set(after) == set(before), list(after)
    grew = {sql: after[sql] - before[sql] for sql in before if after[sql] - before[sql] > 300}
    assert not grew, grew
