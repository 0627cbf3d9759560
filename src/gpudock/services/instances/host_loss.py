"""Instances on a host that was lost, and when it is back.

Each instance follows its own `host_loss_policy`:

- `wait` (the default): its data volume lives on that host, so it waits for
  it, `unreachable`. The status change is dated at the host's last heartbeat,
  so its compute interval closes there and nothing after it is charged (a
  charge already posted past it is refunded at the close). When the host is
  back it is `running` again from that moment: the interval that opens then
  is the only one it pays for, and no interval ever opens before the last
  one closed (`billing.intervals`). If its container did not survive, the
  liveness pass finds it exited and closes that interval where it opened.
- `elsewhere` (opted in per instance): it is restarted on another host with
  an empty data volume at once; the old volume stays on the lost host.

Stops and deletes asked for meanwhile are the lifecycle's, as ever: they
finish once the host answers. Owners are told (`notifications.outbox`, from
the status hook).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpudock.billing.metering import IntervalKind
from gpudock.db.models import (
    DesiredState,
    GpuAllocationModel,
    GpuShareModel,
    HostLossPolicy,
    InstanceModel,
    InstanceStatus,
)
from gpudock.messages import Message
from gpudock.services.billing import intervals
from gpudock.services.instances.status import switch_instance_status

S = InstanceStatus
WAITING_FOR_HOST = (S.RUNNING, S.STOPPING)  # its compute interval closes at the loss


def on_host_lost(
    session: Session, host_id: str, host_name: str, last_heard: datetime, at: datetime
) -> list[InstanceModel]:
    """Apply each instance's policy to those placed on the lost host that are
    billed for running; they are locked in id order, the lifecycle's order. A
    delete in flight stays deleting (a delete only finishes), unbilled from the
    last heartbeat all the same."""
    rows = list(
        session.scalars(
            select(InstanceModel)
            .where(
                InstanceModel.host_id == host_id,
                InstanceModel.placed.is_(True),
                InstanceModel.status.in_((*WAITING_FOR_HOST, S.DELETING)),
            )
            .order_by(InstanceModel.id)
            .with_for_update()
        )
    )
    since = f"{last_heard:%Y-%m-%d %H:%M:%S} UTC"
    for row in rows:
        if row.status is S.DELETING:
            intervals.close(session, row.id, IntervalKind.COMPUTE, last_heard)
            continue
        reason = Message(
            "host {host} lost: no heartbeat since {since}; waiting for it (the data is there)",
            host=host_name,
            since=since,
        )
        switch_instance_status(session, row, S.UNREACHABLE, reason, last_heard)
        if row.host_loss_policy is HostLossPolicy.ELSEWHERE and (
            row.desired_state is DesiredState.RUNNING
        ):
            _restart_elsewhere(session, row, host_name, at)
    return rows


def on_host_back(session: Session, host_id: str, host_name: str, at: datetime) -> int:
    """Instances that waited for the host and still want to run are running
    again from `at`; how many."""
    rows = session.scalars(
        select(InstanceModel)
        .where(
            InstanceModel.host_id == host_id,
            InstanceModel.status == S.UNREACHABLE,
            InstanceModel.desired_state == DesiredState.RUNNING,
        )
        .order_by(InstanceModel.id)
        .with_for_update()
    ).all()
    for row in rows:
        reason = Message("running on {host} again: its host is back", host=host_name)
        switch_instance_status(session, row, S.RUNNING, reason, at)
    return len(rows)


def stranded_on(session: Session, host_ids: list[str]) -> set[str]:
    """Those of the hosts that have instances waiting for them to run again."""
    if not host_ids:
        return set()
    rows = session.scalars(
        select(InstanceModel.host_id).where(
            InstanceModel.host_id.in_(host_ids),
            InstanceModel.status == S.UNREACHABLE,
            InstanceModel.desired_state == DesiredState.RUNNING,
        )
    )
    return {host_id for host_id in rows if host_id is not None}


def _restart_elsewhere(
    session: Session, instance: InstanceModel, host_name: str, at: datetime
) -> None:
    """Off the lost host's GPUs, with no data volume: the placement pass finds it
    a host, and the run step makes a new, empty volume there."""
    session.execute(delete(GpuAllocationModel).where(GpuAllocationModel.instance_id == instance.id))
    session.execute(delete(GpuShareModel).where(GpuShareModel.instance_id == instance.id))
    instance.placed = False
    instance.data_volume, instance.data_host_id = None, None
    instance.container_id, instance.container_gpus = None, ""
    reason = Message(
        "host {host} lost; restarting elsewhere with an empty data volume "
        "(the old one stays on {host})",
        host=host_name,
    )
    switch_instance_status(session, instance, S.MIGRATING, reason, at)
