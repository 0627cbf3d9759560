"""What the lifecycle does next for every (status, desired state, placed), as a
table; and the scan that finds rows with a step to take finds exactly those."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import not_, select, text

from gpudock.db.models import DesiredState, InstanceModel, InstanceStatus
from gpudock.platform import Platform
from gpudock.reconcile.lifecycle import SETTLED, UNSETTLED, Step, active_instance_ids, plan_step
from gpudock.services.accounts import users
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
        for n, (status, desired, placed, _step) in enumerate(CASES):
            session.add(
                InstanceModel(
                    id=f"i-{n:04d}",
                    name=f"case{n}",
                    user_id=owner,
                    gpu_count=0,
                    image="gpudock/base:bookworm",
                    system_image="gpudock/base:bookworm",
                    cpu=1.0,
                    memory_gb=1,
                    disk_gb=1,
                    env="{}",
                    status=status,
                    desired_state=desired,
                    placed=placed,
                    created_at=at,
                    updated_at=at,
                    queued_at=at,
                )
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


def test_the_scan_searches_the_index_instead_of_reading_every_row(
    platform_factory: PlatformFactory,
) -> None:
    """On SQLite (the default database) the plan names the composite index and
    never scans the table: a fleet is nearly all settled rows."""
    platform = platform_factory()
    _add_every_case(platform)
    query = select(InstanceModel.id).where(UNSETTLED)
    with platform.ctx.reader() as session:
        compiled = query.compile(session.get_bind(), compile_kwargs={"literal_binds": True})
        plan = [row[3] for row in session.execute(text(f"EXPLAIN QUERY PLAN {compiled}"))]
    assert any("ix_instances_status_desired" in step for step in plan), plan
    assert not any(step.startswith("SCAN instances") for step in plan), plan
