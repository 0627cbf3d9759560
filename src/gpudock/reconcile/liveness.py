"""The liveness pass: a running instance whose container exited is restarted
(or stopped, when its auto-stop says to stop on exit), one whose container
vanished is recreated with its data volume."""

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
from gpudock.runtime.base import ContainerState, Runtime
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import moves as migration
from gpudock.services.instances import auto_stop
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
    by_engine: dict[int, tuple[Runtime, list[InstanceModel]]] = {}
    for instance in running:
        runtime = ctx.runtime_for(instance.host_id)
        by_engine.setdefault(id(runtime), (runtime, []))[1].append(instance)
    for runtime, rows in by_engine.values():
        _check_engine(ctx, runtime, rows)


def _check_engine(ctx: ServiceContext, runtime: Runtime, rows: list[InstanceModel]) -> None:
    """One engine's instances: one listing (a host whose link is down is skipped:
    its containers are not known to have gone)."""
    try:
        labels = containers.cluster_labels(ctx.cluster_id)
        found = {c.name: c for c in runtime.list_containers(labels)}
    except GpudockError as exc:
        log.warning("health check skipped: %s", exc)
        return
    for instance in rows:
        container = found.get(containers.container_name(ctx.cluster_id, instance.id))
        if container is not None and container.fault is not None and not container.running:
            _move_off(ctx, instance, container)
        elif container is None or not container.running:
            _recover(ctx, instance, container is None)


def _move_off(ctx: ServiceContext, instance: InstanceModel, ended: ContainerState) -> None:
    """The platform ended it (evicted): it moves, with its data, and avoids that
    host for `GPUDOCK_EVICTION_AVOID_S`; billing closed when the container ended."""
    at = _exited_at(ctx, ended)
    with ctx.sessions.begin() as session:
        row = session.get(InstanceModel, instance.id, with_for_update=True)
        if row is None or row.status != S.RUNNING or row.lock_token is not None:
            return
        reason = Message(
            "the cluster ended its container ({fault})", fault=ended.fault or "evicted"
        )
        if not migration.request_move(session, row, reason, None, at, trigger=migration.EVICTED):
            return
    log.info("instance %s was ended by its host's platform (%s): moving", instance.id, ended.fault)
    ctx.wake_reconciler()


def _recover(ctx: ServiceContext, instance: InstanceModel, vanished: bool) -> None:
    """Restart (or recreate) it; an exited one whose auto-stop says so stops instead."""
    instance_id = instance.id
    reason = Message(
        "container disappeared; recreating" if vanished else "container exited; restarting"
    )
    state = None if vanished else _exited_state(ctx, instance)
    at = _exited_at(ctx, state)
    with ctx.sessions.begin() as session:
        row = session.get(InstanceModel, instance_id, with_for_update=True)
        if row is None or row.status != S.RUNNING or row.lock_token is not None:
            return
        if not vanished and auto_stop.stops_on_exit(session, instance_id):
            auto_stop.stop_exited(session, row, state.exit_code if state else None, at)
        else:
            switch_instance_status(session, row, S.CREATING, reason, at)
    ctx.wake_reconciler()


def _exited_state(ctx: ServiceContext, instance: InstanceModel) -> ContainerState | None:
    name = containers.container_name(ctx.cluster_id, instance.id)
    try:
        return containers.runtime_of(ctx, instance).inspect_container(name)
    except GpudockError:
        return None


def _exited_at(ctx: ServiceContext, state: ContainerState | None) -> datetime:
    """When the runtime says the container stopped (metering closes there), else now."""
    if state is None or state.running or state.finished_at is None:
        return ctx.clock()
    return min(state.finished_at, ctx.clock())
