"""The fleet as built, for the placement policies: every present host's CPUs
and memory and every present GPU with its topology.

Read as plain columns (two statements), like `inventory.capacity_snapshot`,
which says what of it is free now; the placement pass reads both each pass and
rebuilds the policy's snapshot only when this changes.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models import GpuDeviceModel, HostModel
from gpudock.scheduler.hosts import HostBuild
from gpudock.scheduler.placement import GpuSlot


def host_builds(session: Session) -> list[HostBuild]:
    gpus: defaultdict[str, list[GpuSlot]] = defaultdict(list)
    rows = session.execute(
        select(
            GpuDeviceModel.host_id,
            GpuDeviceModel.id,
            GpuDeviceModel.model,
            GpuDeviceModel.index,
            GpuDeviceModel.numa_node,
            GpuDeviceModel.nvlink_peers,
        )
        .where(GpuDeviceModel.present.is_(True))
        .order_by(GpuDeviceModel.host_id, GpuDeviceModel.index)
    )
    for host_id, gpu_id, model, index, numa_node, nvlink_peers in rows:
        peers = frozenset(p for p in nvlink_peers.split(",") if p)
        gpus[host_id].append(GpuSlot(gpu_id, model, index, numa_node, peers))
    hosts = session.execute(
        select(HostModel.id, HostModel.cpus, HostModel.memory_gb).where(HostModel.present.is_(True))
    )
    return [
        HostBuild(host_id, float(cpus), float(memory_gb), tuple(gpus[host_id]))
        for host_id, cpus, memory_gb in hosts
    ]
