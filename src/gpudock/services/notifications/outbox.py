"""The outbox: a notification and its deliveries are written in the caller's
transaction, the one that records what caused it (a stop, a warning, a fault).

So a crash keeps the cause and its deliveries together or neither; the
delivery thread (`services.notifications.delivery`) sends them later, at least
once, each under its own stable id. Nothing here does I/O.

`on_transition()` is the status machine's hook (called by
`services.instances.status.switch_instance_status()` in the same transaction):
it tells the owner when an instance moves off a failed GPU, when its host is
lost and back, and when one that waited for GPUs runs.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpudock.db.models import (
    DeliveryState,
    HostLossPolicy,
    InstanceModel,
    InstanceStatus,
    NotificationDeliveryModel,
    NotificationEndpointModel,
    NotificationModel,
    QueueWaitModel,
)
from gpudock.services.context import ServiceContext

S = InstanceStatus
KINDS: dict[str, str] = {
    "balance.low": "the balance or monthly budget runs low",
    "instance.stopped": "an instance stopped by itself: money, idle, time or its program exited",
    "instance.idle_warning": "an instance stops for being idle soon",
    "instance.gpu_fault": "an instance's GPU failed; it moves to a healthy one",
    "instance.host_lost": "an instance's host was lost: it waits for it, unbilled, "
    "or restarts elsewhere",
    "instance.running": "an instance runs after waiting for GPUs (or after a move, "
    "or its host's return)",
    "gpu.available": "a GPU model you watch has free GPUs",
    "image.build_finished": "an image build finished (built or failed)",
}
QUEUE_WAIT_NOTICE_S = 60.0  # shorter waits are placement, not a queue worth telling
_WAITING = frozenset({S.PENDING, S.STARTING})
_NOT_WAITING = frozenset({S.STOPPED, S.DELETING, S.DELETED, S.FAILED})


def notify(
    session: Session,
    user_id: str,
    kind: str,
    message: str,
    at: datetime,
    *,
    instance: InstanceModel | None = None,
    data: Mapping[str, Any] | None = None,
) -> NotificationModel:
    """Record a notification and one pending delivery per endpoint of this
    user that takes `kind`, in the caller's transaction."""
    if kind not in KINDS:
        raise ValueError(f"unknown notification kind {kind!r}")
    details = dict(data or {})
    if instance is not None:
        details.setdefault("instance", {"id": instance.id, "name": instance.name})
    note = NotificationModel(
        id="n-" + secrets.token_hex(8),
        user_id=user_id,
        kind=kind,
        instance_id=instance.id if instance is not None else None,
        message=message,
        data=json.dumps(details, sort_keys=True),
        created_at=at,
    )
    session.add(note)
    endpoints = session.scalars(
        select(NotificationEndpointModel).where(
            NotificationEndpointModel.user_id == user_id,
            NotificationEndpointModel.removed_at.is_(None),
        )
    )
    for endpoint in endpoints:
        if takes(endpoint, kind):
            session.add(
                NotificationDeliveryModel(
                    id="d-" + secrets.token_hex(8),
                    notification_id=note.id,
                    endpoint_id=endpoint.id,
                    user_id=user_id,
                    state=DeliveryState.PENDING,
                    attempts=0,
                    next_attempt_at=at,
                    last_result="",
                    created_at=at,
                )
            )
    return note


def notify_now(
    ctx: ServiceContext,
    user_id: str,
    kind: str,
    message: str,
    *,
    data: Mapping[str, Any] | None = None,
) -> None:
    """`notify` in a transaction of its own, for causes that have none (a build
    streamed to the client finished)."""
    with ctx.sessions.begin() as session:
        notify(session, user_id, kind, message, ctx.clock(), data=data)


def takes(endpoint: NotificationEndpointModel, kind: str) -> bool:
    wanted = [k for k in endpoint.kinds.split(",") if k]
    return not wanted or kind in wanted


def on_transition(
    session: Session,
    instance: InstanceModel,
    old: InstanceStatus | None,
    new: InstanceStatus,
    reason: str,
    at: datetime,
) -> None:
    """Remember a wait for GPUs; tell the owner of a GPU fault and of the run that ends a wait."""
    if old == new and new in _WAITING and reason.startswith("waiting for"):
        if session.get(QueueWaitModel, instance.id) is None:  # the placement pass's note
            session.add(QueueWaitModel(instance_id=instance.id, since=at, moving=False))
    elif new == S.UNREACHABLE and old != S.UNREACHABLE:
        if instance.host_loss_policy is not HostLossPolicy.ELSEWHERE:  # else: told of the restart
            _tell_host_lost(session, instance, f"{reason}; not billed until it runs again", at)
    elif new == S.MIGRATING and old == S.UNREACHABLE:
        _tell_host_lost(session, instance, reason, at)
    elif new == S.RUNNING and old == S.UNREACHABLE:
        message = f"instance {instance.name} is running again: its host is back"
        notify(session, instance.user_id, "instance.running", message, at, instance=instance)
    elif new == S.MIGRATING and old != S.MIGRATING:
        _remember_move(session, instance, at)
        notify(
            session,
            instance.user_id,
            "instance.gpu_fault",
            f"instance {instance.name}: {reason}; it starts again on a healthy GPU, data kept",
            at,
            instance=instance,
            data={"reason": reason},
        )
    elif new == S.RUNNING and old != S.RUNNING:
        wait = session.get(QueueWaitModel, instance.id)
        if wait is not None:
            session.delete(wait)
            _tell_running(session, instance, wait, at)
    elif new in _NOT_WAITING:
        session.execute(delete(QueueWaitModel).where(QueueWaitModel.instance_id == instance.id))


def _tell_host_lost(session: Session, instance: InstanceModel, what: str, at: datetime) -> None:
    policy = instance.host_loss_policy.value
    message = f"instance {instance.name}: {what}"
    data = {"reason": what, "policy": policy}
    notify(
        session, instance.user_id, "instance.host_lost", message, at, instance=instance, data=data
    )


def _remember_move(session: Session, instance: InstanceModel, at: datetime) -> None:
    wait = session.get(QueueWaitModel, instance.id)
    if wait is None:
        session.add(QueueWaitModel(instance_id=instance.id, since=at, moving=True))
    else:
        wait.moving = True


def _tell_running(
    session: Session, instance: InstanceModel, wait: QueueWaitModel, at: datetime
) -> None:
    waited = (at - wait.since).total_seconds()
    if wait.moving:
        message = f"instance {instance.name} is running again after moving off a failed GPU"
    elif waited >= QUEUE_WAIT_NOTICE_S:
        message = f"instance {instance.name} is running after waiting {_minutes(waited)} for GPUs"
    else:
        return
    notify(
        session,
        instance.user_id,
        "instance.running",
        message,
        at,
        instance=instance,
        data={"waited_s": int(waited), "moved": wait.moving},
    )


def _minutes(seconds: float) -> str:
    return f"{round(seconds / 60)} min" if seconds >= 60 else f"{int(seconds)} s"
