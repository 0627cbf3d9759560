"""The status machine of an instance: its transitions, the one writer of its
status, and the changes the system (not the owner) asks for.

`switch_instance_status()` is the only writer of `InstanceModel.status`. It
calls the status hooks in the same transaction — billing intervals open
and close (`services.billing.intervals.on_transition`), moves finish
(`services.fleet.move_log.on_transition`), owners are told of GPU faults and
of runs after a wait (`services.notifications.outbox.on_transition`) — so no
path that changes a status can forget them. These calls are the domain seams
import-linter allows.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from gpudock import messages
from gpudock.db.models import DesiredState, InstanceEventModel, InstanceModel, InstanceStatus
from gpudock.errors import Conflict
from gpudock.services.billing import intervals
from gpudock.services.fleet import move_log
from gpudock.services.instances import changes
from gpudock.services.notifications import outbox

S = InstanceStatus
ALLOWED_TRANSITIONS: dict[InstanceStatus | None, frozenset[InstanceStatus]] = {
    None: frozenset({S.PENDING}),
    S.PENDING: frozenset({S.CREATING, S.STOPPED, S.DELETING, S.FAILED}),
    S.CREATING: frozenset({S.RUNNING, S.STOPPING, S.DELETING, S.FAILED, S.MIGRATING}),
    S.RUNNING: frozenset(
        {S.STOPPING, S.DELETING, S.CREATING, S.FAILED, S.MIGRATING, S.UNREACHABLE}
    ),
    S.STOPPING: frozenset({S.STOPPED, S.STARTING, S.DELETING, S.FAILED, S.UNREACHABLE}),
    S.STOPPED: frozenset({S.STARTING, S.DELETING}),
    S.STARTING: frozenset({S.RUNNING, S.STOPPING, S.STOPPED, S.DELETING, S.FAILED, S.MIGRATING}),
    S.FAILED: frozenset({S.STARTING, S.STOPPED, S.DELETING}),
    # off a failed GPU; placed again → starting, or the user stops/deletes it
    S.MIGRATING: frozenset({S.STARTING, S.STOPPING, S.STOPPED, S.DELETING, S.FAILED}),
    # its host lost: back to running when the host is, or stopped, deleted or moved meanwhile
    S.UNREACHABLE: frozenset({S.RUNNING, S.STOPPING, S.DELETING, S.MIGRATING}),
    S.DELETING: frozenset({S.DELETED}),
    S.DELETED: frozenset(),
}
TERMINAL = frozenset({S.DELETED})


class InvalidTransition(Conflict):
    code = "invalid_transition"


def switch_instance_status(
    session: Session,
    instance: InstanceModel,
    new: InstanceStatus,
    reason: str,
    at: datetime,
) -> None:
    """The only writer of `InstanceModel.status`: validates and records an event.

    Staying in the same status with a new reason records the new reason (e.g.
    "waiting for 2 × A100-80GB"); the same status and reason is a no-op.
    """
    old = instance.status if instance.status is not None else None
    if old == new:
        if instance.status_reason == reason:
            return
    elif new not in ALLOWED_TRANSITIONS[old]:
        raise InvalidTransition(f"instance {instance.id} cannot go from {old} to {new}")
    changes.mark_changed(session)
    instance.status = new
    instance.status_reason = reason
    instance.status_reason_msg = messages.stored(reason)
    instance.updated_at = at
    if old is None:
        session.flush()  # a new row goes in before the event that references it
    session.add(
        InstanceEventModel(
            instance_id=instance.id,
            at=at,
            from_status=old.value if old else None,
            to_status=new.value,
            message=reason,
            message_msg=messages.stored(reason),
        )
    )
    intervals.on_transition(session, instance, old, new, at)  # billing intervals open/close
    move_log.on_transition(session, instance, old, new, at)  # moves finish
    outbox.on_transition(session, instance, old, new, reason, at)  # owners told


def current_reason(instance: InstanceModel) -> str:
    """The status reason as a `Message` where it has its structure, to build on."""
    structure = instance.status_reason_msg
    return messages.Message.from_json(structure) if structure else instance.status_reason


def record_instance_note(
    session: Session, instance: InstanceModel, message: str, at: datetime
) -> None:
    """An event on the instance's timeline that changes nothing (e.g. an Xid
    its program caused); the status and its reason stay as they are."""
    status = instance.status.value
    session.add(
        InstanceEventModel(
            instance_id=instance.id,
            at=at,
            from_status=status,
            to_status=status,
            message=message,
            message_msg=messages.stored(message),
        )
    )


def is_leased(instance: InstanceModel, now: datetime) -> bool:
    return instance.lock_token is not None and (
        instance.lock_expires_at is not None and instance.lock_expires_at > now
    )


def switch_for_request(
    session: Session, instance: InstanceModel, desired: DesiredState, reason: str, now: datetime
) -> bool:
    """Switch to the status the request leads to, if no I/O is needed first;
    False if the status stays (the reconciler gets there)."""
    status = instance.status
    if desired == DesiredState.RUNNING and status in (S.STOPPED, S.FAILED):
        switch_instance_status(session, instance, S.STARTING, reason, now)
    elif desired == DesiredState.STOPPED:
        unplaced = status in (S.STARTING, S.MIGRATING) and not instance.placed
        if status in (S.PENDING, S.FAILED) or unplaced:
            instance.placed = False
            switch_instance_status(session, instance, S.STOPPED, reason, now)
        elif status in (S.RUNNING, S.CREATING, S.STARTING, S.MIGRATING, S.UNREACHABLE):
            switch_instance_status(session, instance, S.STOPPING, reason, now)
        else:
            return False
    elif desired == DesiredState.DELETED and status != S.DELETING:
        switch_instance_status(session, instance, S.DELETING, reason, now)
    else:
        return False
    return True


def request_stop(session: Session, instance: InstanceModel, reason: str, now: datetime) -> bool:
    """The ordinary stop, asked by someone other than the owner (an admin
    disabling them): GPUs released, container and data kept. The reason is
    on the instance's timeline either way. False if it was not to run."""
    if instance.desired_state != DesiredState.RUNNING:
        return False
    instance.desired_state = DesiredState.STOPPED
    instance.updated_at = now
    leased = is_leased(instance, now)
    if leased or not switch_for_request(session, instance, DesiredState.STOPPED, reason, now):
        record_instance_note(session, instance, reason, now)  # the worker's stop follows
    return True


def request_delete(session: Session, instance: InstanceModel, reason: str, now: datetime) -> None:
    """The ordinary delete: the reconciler removes the container, the data
    volume and any committed system disk."""
    if instance.status == S.DELETED:
        return
    instance.desired_state = DesiredState.DELETED
    if not is_leased(instance, now) and instance.status != S.DELETING:
        switch_instance_status(session, instance, S.DELETING, reason, now)
