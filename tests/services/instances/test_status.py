"""The status machine, as a table: every pair of statuses is allowed or refused
exactly as ALLOWED_TRANSITIONS says, and the table says what the product needs
(no way back from deleted, a running container is stopped before it counts as
stopped, everything can be deleted)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select

from gpudock.db.models import InstanceEventModel, InstanceModel, InstanceStatus
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.instances.status import (
    ALLOWED_TRANSITIONS,
    InvalidTransition,
    switch_instance_status,
)
from tests.support.factories import instance_row
from tests.support.platforms import PlatformFactory

S = InstanceStatus
T = datetime(2026, 12, 1, tzinfo=UTC)
# The table written out: it repeats the code's on purpose, so that changing
# one without the other fails here.
EXPECTED: dict[InstanceStatus | None, set[InstanceStatus]] = {
    None: {S.PENDING},
    S.PENDING: {S.CREATING, S.STOPPED, S.DELETING, S.FAILED},
    S.CREATING: {S.RUNNING, S.STOPPING, S.DELETING, S.FAILED, S.MIGRATING},
    S.RUNNING: {S.STOPPING, S.DELETING, S.CREATING, S.FAILED, S.MIGRATING, S.UNREACHABLE},
    S.STOPPING: {S.STOPPED, S.STARTING, S.DELETING, S.FAILED, S.UNREACHABLE},
    S.STOPPED: {S.STARTING, S.DELETING},
    S.STARTING: {S.RUNNING, S.STOPPING, S.STOPPED, S.DELETING, S.FAILED, S.MIGRATING},
    S.FAILED: {S.STARTING, S.STOPPED, S.DELETING},
    S.MIGRATING: {S.STARTING, S.STOPPING, S.STOPPED, S.DELETING, S.FAILED},
    S.UNREACHABLE: {S.RUNNING, S.STOPPING, S.DELETING, S.MIGRATING},
    S.DELETING: {S.DELETED},
    S.DELETED: set(),
}


def test_the_code_has_the_table() -> None:
    assert {k: set(v) for k, v in ALLOWED_TRANSITIONS.items()} == EXPECTED


def test_the_table_keeps_the_product_rules() -> None:
    assert not EXPECTED[S.DELETED], "deleted is final"
    assert EXPECTED[S.DELETING] == {S.DELETED}, "a delete only finishes"
    assert S.STOPPED not in EXPECTED[S.RUNNING], "a running container is stopped first"
    for status in S:
        if status not in (S.DELETED, S.DELETING):
            assert S.DELETING in EXPECTED[status], f"{status} cannot be deleted"
    reachable: set[InstanceStatus] = set()
    todo: list[InstanceStatus | None] = [None]
    while todo:
        for following in EXPECTED[todo.pop()]:
            if following not in reachable:
                reachable.add(following)
                todo.append(following)
    assert reachable == set(S), "every status is reachable from a new instance"


def _row(user_id: str, n: int) -> InstanceModel:
    return instance_row(f"i-{n:010d}", f"t{n}", user_id, T)


Outcome = tuple[bool, InstanceStatus | None, list[tuple[str | None, str]]]


class _Refused(Exception):
    """Roll the test's transaction back, as a request's would be."""


def _attempt(
    platform: Platform, user_id: str, n: int, old: InstanceStatus | None, new: InstanceStatus
) -> Outcome:
    """Put a row in `old` (directly: the machine is what is tested), switch it to
    `new`; what the database holds afterwards."""
    refused = False
    try:
        with platform.ctx.sessions.begin() as session:
            row = _row(user_id, n)
            session.add(row)
            if old is not None:
                row.status, row.status_reason = old, "set by the test"
                session.flush()
            try:
                switch_instance_status(session, row, new, "switched by the test", T)
            except InvalidTransition as exc:
                raise _Refused from exc
    except _Refused:
        refused = True
    with platform.ctx.sessions() as session:
        stored = session.get(InstanceModel, f"i-{n:010d}")
        events = session.execute(
            select(InstanceEventModel.from_status, InstanceEventModel.to_status).where(
                InstanceEventModel.instance_id == f"i-{n:010d}"
            )
        ).all()
    return refused, stored.status if stored else None, [(e[0], e[1]) for e in events]


def test_switch_allows_exactly_the_table(platform_factory: PlatformFactory) -> None:
    platform = platform_factory()
    user_id = users.create_user(platform.ctx, "table").user.id
    pairs = [(old, new) for old in EXPECTED for new in S if new != old]
    for n, (old, new) in enumerate(pairs):
        refused, stored, events = _attempt(platform, user_id, n, old, new)
        if new in EXPECTED[old]:
            assert not refused and stored == new, (old, new)
            assert events == [(old.value if old else None, new.value)], (old, new)
        else:
            assert refused, f"{old} → {new} was allowed"
            assert stored is None and events == [], (old, new)  # all of it rolled back
