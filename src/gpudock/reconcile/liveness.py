"""The liveness pass: a running instance whose container exited is restarted,
one whose container vanished is recreated with its data volume."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import select

from gpudock.db.models import (
    DesiredState,
    InstanceModel,
    InstanceStatus,
)
from gpudock.errors import GpudockError
from gpudock.messages import Message
from gpudock.services.context import ServiceContext
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.status import switch_instance_status

log = logging.getLogger(__name__)
S = InstanceStatus


def check_running(ctx: ServiceContext) -> None:
    """Restart containers that exited on their own; recreate vanished ones."""
    # Rows first: a row that says running now had its container started before the listing.
    with ctx.sessions() as session:
        running = session.scalars(
            select(InstanceModel).where(
                InstanceModel.status == S.RUNNING,
                InstanceModel.desired_state == DesiredState.RUNNING,
                InstanceModel.lock_token.is_(None),
            )
        ).all()
    try:
        labels = containers.cluster_labels(ctx.cluster_id)
        found = {c.name: c for c in ctx.runtime.list_containers(labels)}
    except GpudockError as exc:
        log.warning("health check skipped: %s", exc)
        return
    for instance in running:
        container = found.get(containers.container_name(ctx.cluster_id, instance.id))
        if container is None or not container.running:
            _recover(ctx, instance.id, container is None)


def _recover(ctx: ServiceContext, instance_id: str, vanished: bool) -> None:
    reason = Message(
        "container disappeared; recreating" if vanished else "container exited; restarting"
    )
    at = ctx.clock() if vanished else _exited_at(ctx, instance_id)
    with ctx.sessions.begin() as session:
        row = session.get(InstanceModel, instance_id, with_for_update=True)
        if row is None or row.status != S.RUNNING or row.lock_token is not None:
            return
        switch_instance_status(session, row, S.CREATING, reason, at)
    ctx.wake_reconciler()


def _exited_at(ctx: ServiceContext, instance_id: str) -> datetime:
    """When the runtime says the container stopped (metering closes there), else now."""
    name = containers.container_name(ctx.cluster_id, instance_id)
    try:
        state = ctx.runtime.inspect_container(name)
    except GpudockError:
        state = None
    if state is None or state.running or state.finished_at is None:
        return ctx.clock()
    return min(state.finished_at, ctx.clock())
