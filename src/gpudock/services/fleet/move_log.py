"""The record of instance moves, kept in step with status changes.

`on_transition()` is called by `instances.switch_instance_status()` inside
its transaction: an open move is done when the instance runs again, and
abandoned when the user stops or deletes it (or it fails) first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models import HostModel, InstanceModel, InstanceStatus, MigrationModel

S = InstanceStatus
MOVING, DONE, ABANDONED = "moving", "done", "abandoned"
_ABANDONING = frozenset({S.STOPPED, S.DELETING, S.DELETED, S.FAILED})


def open_move(session: Session, instance_id: str) -> MigrationModel | None:
    return session.scalars(
        select(MigrationModel).where(
            MigrationModel.instance_id == instance_id, MigrationModel.outcome == MOVING
        )
    ).first()


@dataclass(frozen=True)
class Eviction:
    """An open move off a host whose platform ended the instance's container."""

    host_id: str
    host_name: str
    at: datetime


def open_evictions(session: Session, trigger: str, since: datetime) -> dict[str, Eviction]:
    """Instance id → the host it was evicted from, for open moves with `trigger`
    that began after `since`."""
    rows = session.execute(
        select(MigrationModel.instance_id, HostModel.id, HostModel.name, MigrationModel.started_at)
        .join(HostModel, HostModel.id == MigrationModel.from_host_id)
        .where(
            MigrationModel.outcome == MOVING,
            MigrationModel.trigger == trigger,
            MigrationModel.started_at > since,
        )
    ).all()
    return {row[0]: Eviction(row[1], row[2], row[3]) for row in rows}


def on_transition(
    session: Session,
    instance: InstanceModel,
    old: InstanceStatus | None,
    new: InstanceStatus,
    at: datetime,
) -> None:
    if old == new or (new != S.RUNNING and new not in _ABANDONING):
        return
    move = open_move(session, instance.id)
    if move is None:
        return
    move.finished_at = at
    if new == S.RUNNING:
        move.outcome = DONE
        move.to_host_id = instance.host_id
        move.to_gpus = instance.container_gpus
    else:
        move.outcome = ABANDONED
