"""What a running instance uses now: CPU, memory, processes and its GPUs.

The runtime gives one reading at a time (no waiting for a second sample), so a
CPU percentage needs the previous reading of the same container: a `CpuMeter`
keeps it. The meter is an object its owner creates and keeps (the console makes
one per app, for the instance page's polling), bounded so that the containers
of deleted instances do not pile up in a long-running server.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpudock.db.models import HostModel, InstanceStatus, UserModel
from gpudock.runtime.base import ContainerStats
from gpudock.services.context import ServiceContext
from gpudock.services.instances import actions as instances

MAX_CONTAINERS = 4096


class CpuMeter:
    """CPU % of containers from two readings: each reading replaces the previous
    one of its container; past `max_containers` the oldest is dropped first.
    Safe to share between request threads."""

    def __init__(self, max_containers: int = MAX_CONTAINERS) -> None:
        self.max_containers = max_containers
        self._previous: OrderedDict[str, ContainerStats] = OrderedDict()
        self._lock = threading.Lock()

    def cpu_percent(self, container_id: str, stats: ContainerStats) -> float | None:
        """Δcpu / Δwall × 100 against the previous reading (100 = one core busy).
        None on the first reading, or when the counters went back (a restart)."""
        with self._lock:
            previous = self._previous.pop(container_id, None)
            self._previous[container_id] = stats
            while len(self._previous) > self.max_containers:
                self._previous.popitem(last=False)
        if previous is None:
            return None
        wall_ns = (stats.read_at - previous.read_at) / timedelta(microseconds=1) * 1000
        cpu_ns = stats.cpu_total_ns - previous.cpu_total_ns
        if wall_ns <= 0 or cpu_ns < 0:
            return None
        return cpu_ns / wall_ns * 100


@dataclass(frozen=True)
class InstanceUsage:
    """What a running instance uses now. No per-GPU utilisation: the fleet's
    GPU sources do not measure it (simulated GPUs have none to measure)."""

    cpu_percent: float | None  # 100 = one core busy; None until a second reading
    cpu_limit: float | None  # CPUs it may use
    memory_bytes: int  # page cache excluded
    memory_limit_bytes: int | None
    pids: int
    gpus: list[str]  # the allocated GPUs' UUIDs
    gpus_simulated: bool
    read_at: datetime


def instance_usage(
    ctx: ServiceContext, user: UserModel, ref: str, meter: CpuMeter
) -> InstanceUsage | None:
    """The instance's CPU, memory and process use now, or None unless it is
    running. CPU % compares this reading with the meter's previous one for the
    same container (None on the first). `NotFound` for another user's instance."""
    instance = instances.get_instance(ctx, user, ref)
    if instance.status != InstanceStatus.RUNNING or not instance.container_id:
        return None
    stats = ctx.runtime_for(instance.host_id).container_stats(instance.container_id)
    if stats is None:
        return None
    view = instances.view(ctx, instance)
    with ctx.reader() as session:
        host = session.get(HostModel, instance.host_id) if instance.host_id else None
    return InstanceUsage(
        cpu_percent=meter.cpu_percent(instance.container_id, stats),
        cpu_limit=stats.cpu_limit,
        memory_bytes=stats.memory_bytes,
        memory_limit_bytes=stats.memory_limit_bytes,
        pids=stats.pids,
        gpus=view.gpus,
        gpus_simulated=host.simulated if host is not None else False,
        read_at=stats.read_at,
    )
