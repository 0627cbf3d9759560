"""What the lifecycle does next for every (status, desired state, placed), as a table."""

from __future__ import annotations

import pytest

from gpudock.db.models import DesiredState, InstanceStatus
from gpudock.reconcile.lifecycle import Step, plan_step

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
