"""The share watchdog: a share's processes may not hold more GPU memory than
its part of the card.

Without HAMi-core (`GPUDOCK_SHARE_HOOK_LIBRARY`) nothing inside the container
holds a share to `GPUDOCK_GPU_MEMORY_LIMIT`, and with it a process that
escapes the preload is not held either; this pass checks what the driver
sees. Every `GPUDOCK_SHARE_WATCH_INTERVAL_S` it reads each compute process's
memory (`GpuSource.process_memory`, NVML on a real host), maps each PID to
its container through its cgroup (`Runtime.container_of_pid`), adds up per
running share, and for one over its limit records an event (once per
crossing) and, with `GPUDOCK_SHARE_ENFORCE=stop`, stops it: the GPU share is
released, the container and its data are kept, nothing is deleted.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import select

from gpudock.db.models import (
    DesiredState,
    GpuDeviceModel,
    GpuShareModel,
    InstanceModel,
    InstanceStatus,
)
from gpudock.gpu.base import GpuDiscoveryError, GpuProcess
from gpudock.services.context import ServiceContext
from gpudock.services.instances import sizing
from gpudock.services.instances import status as instance_status

log = logging.getLogger(__name__)


@dataclass
class ShareWatch:
    """The shares found over their limit and not yet back under (one event per crossing)."""

    over: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class _Share:
    instance_id: str
    container_id: str
    limit_mb: int


@dataclass(frozen=True)
class Overuse:
    instance_id: str
    used_mb: int
    limit_mb: int
    pids: tuple[int, ...]


def watch_shares(ctx: ServiceContext, watch: ShareWatch) -> list[Overuse]:
    """One pass; returns the shares over their limit now."""
    if ctx.settings.share_enforce == "off":
        return []
    shares = _running_shares(ctx)
    if not shares:
        watch.over.clear()
        return []
    try:
        processes = ctx.gpu_source.process_memory()
    except GpuDiscoveryError as exc:
        log.warning("share watchdog: could not read GPU processes: %s", exc)
        return []
    found = _overuse(ctx, shares, processes)
    for overuse in found:
        if overuse.instance_id not in watch.over:
            watch.over.add(overuse.instance_id)
            _act(ctx, overuse)
    watch.over &= {o.instance_id for o in found}
    return found


def _running_shares(ctx: ServiceContext) -> dict[str, _Share]:
    """Running shares by container id, with their memory limits."""
    with ctx.reader() as session:
        rows = session.execute(
            select(
                InstanceModel.id,
                InstanceModel.container_id,
                InstanceModel.gpu_share_milli,
                GpuDeviceModel.memory_mb,
            )
            .join(GpuShareModel, GpuShareModel.instance_id == InstanceModel.id)
            .join(GpuDeviceModel, GpuDeviceModel.id == GpuShareModel.gpu_id)
            .where(InstanceModel.status == InstanceStatus.RUNNING)
        ).all()
    return {
        container_id: _Share(instance_id, container_id, sizing.share_memory_mb(card_mb, milli))
        for instance_id, container_id, milli, card_mb in rows
        if container_id is not None and milli is not None
    }


def _overuse(
    ctx: ServiceContext, shares: dict[str, _Share], processes: list[GpuProcess]
) -> list[Overuse]:
    used: dict[str, int] = defaultdict(int)
    pids: dict[str, list[int]] = defaultdict(list)
    for process in processes:
        if process.used_memory_mb is None:
            continue
        container_id = ctx.runtime.container_of_pid(process.pid)
        if container_id in shares:
            used[container_id] += process.used_memory_mb
            pids[container_id].append(process.pid)
    return [
        Overuse(share.instance_id, used[cid], share.limit_mb, tuple(sorted(pids[cid])))
        for cid, share in shares.items()
        if used[cid] > share.limit_mb
    ]


def _act(ctx: ServiceContext, overuse: Overuse) -> None:
    stop = ctx.settings.share_enforce == "stop"
    what = (
        f"GPU memory over its share: its processes ({', '.join(map(str, overuse.pids))}) "
        f"hold {overuse.used_mb} MiB of a {overuse.limit_mb} MiB limit"
    )
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        row = session.get(InstanceModel, overuse.instance_id, with_for_update=True)
        if row is None or row.desired_state != DesiredState.RUNNING:
            return
        if stop:
            reason = (
                f"stopped: {what} (GPUDOCK_SHARE_ENFORCE=stop); container and data kept. "
                "Start it again with less on the GPU, or ask for a larger share"
            )
            instance_status.request_stop(session, row, reason, now)
        else:
            instance_status.record_instance_note(
                session, row, f"{what}; it may starve the share beside it", now
            )
    log.warning("instance %s: %s", overuse.instance_id, what)
    if stop:
        ctx.wake_reconciler()
