"""The wait queue: instances that want to run and hold no GPUs yet, first
come, first served.

The placement pass (`reconcile.placement`) walks `waiting_in_order()` and
gives each instance what fits; one that does not fit waits without blocking
the others. So an instance's place in the queue is among those that want the
same GPU models (FIFO per model), and the pass reads its requests here
(`placement_request`), so the queue that is shown is the queue that is served.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models import DesiredState, InstanceModel, InstanceStatus
from gpudock.scheduler.placement import PlacementRequest, place
from gpudock.services.context import ServiceContext
from gpudock.services.fleet.inventory import current_capacity

S = InstanceStatus
WAITING = (S.PENDING, S.STARTING, S.MIGRATING)  # unplaced rows the placement pass serves
WAIT_UNKNOWN = (
    "unknown: the instances holding these GPUs run until their owners stop them, "
    "and gpudock has no run-time limit to go by"
)
WAIT_SOON = "at the next placement pass: capacity for it is free now"


def waiting_in_order(session: Session) -> list[InstanceModel]:
    """The queue, in the order the placement pass serves it."""
    return list(
        session.scalars(
            select(InstanceModel)
            .where(
                InstanceModel.desired_state == DesiredState.RUNNING,
                InstanceModel.placed.is_(False),
                InstanceModel.status.in_(WAITING),
            )
            .order_by(InstanceModel.queued_at, InstanceModel.id)
        )
    )


def is_waiting(instance: InstanceModel) -> bool:
    """Whether the row, as read, is in the queue `waiting_in_order` reads."""
    return (
        instance.desired_state == DesiredState.RUNNING
        and not instance.placed
        and instance.status in WAITING
    )


def placement_request(instance: InstanceModel) -> PlacementRequest:
    """What the instance asks the scheduler for (its old GPUs preferred, if whole)."""
    previous = frozenset(g for g in instance.container_gpus.split(",") if g)
    sticky = instance.gpu_share_milli is None and len(previous) == instance.gpu_count
    return PlacementRequest(
        gpu_model=instance.gpu_model,
        gpu_count=instance.gpu_count,
        cpus=instance.cpu,
        memory_gb=instance.memory_gb,
        preferred_gpus=previous if sticky else frozenset(),
        preferred_host=instance.host_id,
        share_milli=instance.gpu_share_milli,
        other_models=frozenset(instance.accepted_models) - {instance.gpu_model or ""},
        host_labels=frozenset(json.loads(instance.host_labels or "{}").items()),
    )


@dataclass(frozen=True)
class QueuePosition:
    position: int  # 1: the next to be served among those that want its models
    waiting: int  # how many want those models, itself included
    reason: str
    estimate: str


def queue_position(ctx: ServiceContext, instance: InstanceModel) -> QueuePosition | None:
    """Where a waiting instance stands; None when it does not wait for placement
    (as `instance` was read: the queue is not read at all then)."""
    if not is_waiting(instance):
        return None
    with ctx.reader() as session:
        queue = waiting_in_order(session)
        mine = next((i for i in queue if i.id == instance.id), None)
        if mine is None:
            return None
        rivals = [i for i in queue if _competes(i, mine)]
        position = rivals.index(mine) + 1
        request = placement_request(mine)
        if mine.stay_on_host and mine.host_id is not None:  # --stay: its own host only
            request = replace(request, allowed_hosts=frozenset({mine.host_id}))
        fits_now = place(current_capacity(ctx, session), request) is not None
    estimate = WAIT_SOON if position == 1 and fits_now else WAIT_UNKNOWN
    return QueuePosition(position, len(rivals), mine.status_reason, estimate)


def _competes(other: InstanceModel, mine: InstanceModel) -> bool:
    """Do the two want the same kind of capacity: a GPU model in common, or
    (both without GPUs) CPU and memory only?"""
    theirs, ours = set(other.accepted_models), set(mine.accepted_models)
    if not ours or mine.gpu_count == 0:
        return other.gpu_count == 0 and other.gpu_share_milli is None
    return other.gpu_count > 0 and bool(theirs & ours)
