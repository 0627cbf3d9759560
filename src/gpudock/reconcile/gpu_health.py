"""The GPU health pass: poll the GPU source for faults, watch the runtime for a
lost host, and every pass finish drains and re-request moves off failed GPUs.
Faults are recorded and acted on by `services.fleet.gpu_health`."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models import (
    GpuDeviceModel,
    GpuFaultModel,
    HostModel,
)
from gpudock.errors import GpudockError
from gpudock.gpu.xid import Action
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import inventory
from gpudock.services.fleet import moves as migration
from gpudock.services.fleet.gpu_health import (
    DRAINING_ACTIONS,
    G,
    record_fault,
    switch_gpu_state,
    tenants_on,
)
from gpudock.services.fleet.host_outage import bring_back_host, take_out_host
from gpudock.services.instances.status import record_instance_note

log = logging.getLogger(__name__)


@dataclass
class HealthWatch:
    """State the pass keeps between calls (when the runtime was last reachable)."""

    runtime_ok_at: float | None = None
    host_lost: bool = False


def health_pass(ctx: ServiceContext, watch: HealthWatch) -> None:
    """Poll the GPU source and watch the runtime (`converge` runs every pass)."""
    try:
        events = ctx.gpu_source.poll_health(0)
    except GpudockError as exc:
        log.warning("GPU health poll failed: %s", exc)
        events = []
    for event in events:
        record_fault(ctx, event, "nvml")
    _watch_runtime(ctx, watch)


def refresh_inventory(ctx: ServiceContext) -> None:
    """Read the hosts again (`GpuSource.hosts_change`): a new one takes
    placements, one that left (or was cordoned) takes none; what runs on it
    stays and is watched as before."""
    try:
        hosts = ctx.gpu_source.discover()
    except GpudockError as exc:
        log.warning("inventory not read: %s", exc)
        return
    inventory.sync_inventory(ctx, hosts)


def converge(ctx: ServiceContext) -> None:
    """Finish drains (no tenant left → unhealthy or repairing) and re-request
    moves off GPUs whose fault says 'move now' (a crash may have lost one)."""
    with ctx.reader() as session:  # the usual case, nothing draining, takes no write lock
        if (
            session.scalar(select(GpuDeviceModel.id).where(GpuDeviceModel.state == G.DRAINING))
            is None
        ):
            return
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        draining = list(
            session.scalars(
                select(GpuDeviceModel).where(GpuDeviceModel.state == G.DRAINING).with_for_update()
            )
        )
        for gpu in draining:
            tenants = tenants_on(session, [gpu.id])
            open_faults = _open_faults(session, gpu.id) + _open_host_faults(session, gpu.host_id)
            if not tenants:
                target = G.UNHEALTHY if open_faults else G.REPAIRING
                switch_gpu_state(session, gpu, target, f"drained; {gpu.state_reason}", now)
                continue
            if any(f.action in DRAINING_ACTIONS for f in open_faults):
                for instance in tenants:
                    migration.request_move(session, instance, gpu.state_reason, None, now)


def _open_faults(session: Session, gpu_id: str) -> list[GpuFaultModel]:
    return list(
        session.scalars(
            select(GpuFaultModel).where(
                GpuFaultModel.gpu_id == gpu_id,
                GpuFaultModel.repaired_at.is_(None),
                GpuFaultModel.action != Action.NOTIFY.value,
            )
        )
    )


def _open_host_faults(session: Session, host_id: str) -> list[GpuFaultModel]:
    """A GPU that fell off the bus takes its host's other GPUs out of service too."""
    return list(
        session.scalars(
            select(GpuFaultModel).where(
                GpuFaultModel.host_id == host_id,
                GpuFaultModel.repaired_at.is_(None),
                GpuFaultModel.action == Action.DRAIN_HOST.value,
            )
        )
    )


def _watch_runtime(ctx: ServiceContext, watch: HealthWatch) -> None:
    """Host loss: the runtime unreachable longer than `host_lost_after_s`.

    Its GPUs become unhealthy (nothing new is placed there) and the tenants
    are told; they are not moved, because their data volumes live on the
    lost host. When it answers again, those faults close by themselves."""
    now = time.monotonic()
    try:
        ctx.runtime.engine_info()
    except GpudockError as exc:
        watch.runtime_ok_at = watch.runtime_ok_at or now
        if not watch.host_lost and now - watch.runtime_ok_at >= ctx.settings.host_lost_after_s:
            watch.host_lost = True
            _mark_hosts_lost(ctx, str(exc))
        return
    watch.runtime_ok_at = now
    if watch.host_lost:
        watch.host_lost = False
        _restore_lost_hosts(ctx)


def _mark_hosts_lost(ctx: ServiceContext, why: str) -> None:
    now = ctx.clock()
    message = f"host unreachable for {ctx.settings.host_lost_after_s:g} s: {why}"
    with ctx.sessions.begin() as session:
        for host_id in _local_hosts(session):
            for instance in take_out_host(session, host_id, message, "runtime", now):
                record_instance_note(session, instance, f"{message}; waiting for it", now)
    log.error("runtime unreachable: hosts marked lost")


def _restore_lost_hosts(ctx: ServiceContext) -> None:
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        for host_id in _local_hosts(session):
            bring_back_host(session, host_id, "host reachable again", now)
    log.warning("runtime reachable again: lost hosts restored")


def _local_hosts(session: Session) -> list[str]:
    """The hosts the local runtime drives (an agent host's loss is its link's)."""
    return list(
        session.scalars(
            select(HostModel.id).where(HostModel.present.is_(True), HostModel.agent.is_(False))
        )
    )
