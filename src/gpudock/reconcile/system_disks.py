"""The system-disk watchdog: where the engine cannot cap a container's writable
layer, measure it, warn the owner at 90 % and stop — never delete — an instance
over its size.

With overlay2 over XFS mounted with pquota, Docker enforces `size=` itself and
writes past it fail with ENOSPC; elsewhere (ext4, most hosts) the layer could
fill the host's disk. Measuring walks the layer (`docker inspect --size`), so
the pass runs every `GPUDOCK_SYSTEM_DISK_CHECK_INTERVAL_S`, not per request.
Stopping keeps the container and its layer: the owner starts it again after
deleting files from a shell, or saves it and moves the data to /root/data.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import select

from gpudock.db.models import DesiredState, InstanceModel, InstanceStatus
from gpudock.errors import GpudockError
from gpudock.services.context import ServiceContext
from gpudock.services.instances import status as instance_status

log = logging.getLogger(__name__)
WARN_FRACTION = 0.9
GB = 10**9


@dataclass
class DiskWatch:
    """Which instances were warned already (one warning per crossing of 90 %)."""

    warned: set[str] = field(default_factory=set)


def watchdog_needed(ctx: ServiceContext) -> bool:
    return ctx.settings.system_disk_enforce == "watchdog" or not ctx.runtime.limits_system_disks()


def check_system_disks(ctx: ServiceContext, watch: DiskWatch) -> list[str]:
    """One pass; returns the ids of the instances it stopped."""
    if not watchdog_needed(ctx):
        return []
    with ctx.reader() as session:
        rows = session.execute(
            select(
                InstanceModel.id,
                InstanceModel.container_id,
                InstanceModel.system_disk_gb,
                InstanceModel.host_id,
            )
            .where(InstanceModel.status == InstanceStatus.RUNNING)
            .where(InstanceModel.container_id.is_not(None))
        ).all()
    stopped = []
    for instance_id, container_id, size_gb, host_id in rows:
        limit = (size_gb or ctx.settings.system_disk_gb) * GB
        if container_id is None:
            continue
        try:
            used = ctx.runtime_for(host_id).writable_layer_bytes(container_id)
        except GpudockError as exc:
            log.warning("could not measure the system disk of %s: %s", instance_id, exc)
            continue
        if used is None:
            continue
        if used > limit and _stop(ctx, instance_id, used, limit):
            stopped.append(instance_id)
        elif used > limit * WARN_FRACTION and instance_id not in watch.warned:
            watch.warned.add(instance_id)
            _note(ctx, instance_id, f"system disk {_gb(used)} of {_gb(limit)}: {_ADVICE}")
        elif used <= limit * WARN_FRACTION:
            watch.warned.discard(instance_id)
    return stopped


_ADVICE = (
    "an instance over its system disk is stopped (its data kept); keep large files in "
    "/root/data, the data volume"
)


def _stop(ctx: ServiceContext, instance_id: str, used: int, limit: int) -> bool:
    now = ctx.clock()
    reason = (
        f"stopped: the system disk holds {_gb(used)}, over its {_gb(limit)}; container and "
        "data kept. Start it, delete files outside /root/data, or save it and create a "
        "bigger one (system_disk_gb)"
    )
    with ctx.sessions.begin() as session:
        row = session.get(InstanceModel, instance_id, with_for_update=True)
        if row is None or row.desired_state != DesiredState.RUNNING:
            return False
        stopped = instance_status.request_stop(session, row, reason, now)
    ctx.wake_reconciler()
    return stopped


def _note(ctx: ServiceContext, instance_id: str, message: str) -> None:
    with ctx.sessions.begin() as session:
        row = session.get(InstanceModel, instance_id)
        if row is not None:
            instance_status.record_instance_note(session, row, message, ctx.clock())


def _gb(size: int) -> str:
    return f"{size / GB:.1f} GB"
