"""Hosts with their own agent in the inventory the scheduler places on.

An enrolled agent host is a `hosts` row with the id of its `agent_hosts` row
(`agent` set) and its GPUs `gpus` rows keyed by their real UUIDs; the link
writes them from each report (`services.agents` calls in here, in the
transaction that records the report). The local GPU source never touches
these rows (`inventory.sync_inventory` passes them by), and nothing here
touches the local ones.

A GPU the agent stops reporting is marked absent and unhealthy (a
`gpu_missing` fault, so that it comes back healthy by itself when it is
reported again, unless another fault holds it); its row stays, and so does
an instance's allocation of it. A removed host's rows stay too, absent: the
instances that ran there keep pointing at them, as for a simulated host that
vanished. Placement skips a host whose agent host is not active (pending,
draining), `inventory.capacity_snapshot`.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpudock.db.models import (
    GpuDeviceModel,
    GpuFaultModel,
    GpuState,
    HostModel,
    InstanceModel,
    InstanceStatus,
)
from gpudock.errors import Conflict
from gpudock.gpu.base import GpuInfo, HostInfo
from gpudock.messages import Message
from gpudock.services.fleet.gpu_health import held_by_fault, switch_gpu_state, tenants_on
from gpudock.services.instances.status import record_instance_note, switch_instance_status

GPU_MISSING = "gpu_missing"
_OUT_OF_SERVICE = (GpuState.HEALTHY, GpuState.REPAIRING, GpuState.DRAINING)


def host_id_for(session: Session, name: str) -> str | None:
    """The id a new agent host named `name` must take: that of an earlier agent
    host of that name, removed (its instances keep pointing at it); None: a new
    one. A name the local GPU source's hosts hold is refused."""
    row = session.scalars(select(HostModel).where(HostModel.name == name)).first()
    if row is None:
        return None
    if not row.agent:
        raise Conflict(
            f"host name {name!r} is taken by a host of this server's own GPU source; "
            "give the agent host another name",
            field="name",
        )
    return row.id


def is_recorded(session: Session, host_id: str, info: HostInfo) -> bool:
    """Does the inventory hold the host as `info` has it? Asked only when the
    report's GPUs are the ones the agent reported last time (the caller compares
    them), so that an unchanged heartbeat — nearly all of them — costs two
    reads instead of two per GPU: the host row present with these sizes and
    versions, and as many present GPU rows as reported (a GPU removed or
    retired meanwhile makes the counts differ, and the full sync runs)."""
    host = session.get(HostModel, host_id)
    if host is None or not host.present:
        return False
    sizes = (info.cpus or host.cpus, info.memory_gb or host.memory_gb)
    versions = (info.driver_version or host.driver_version, info.cuda_version or host.cuda_version)
    if sizes != (host.cpus, host.memory_gb) or versions != (host.driver_version, host.cuda_version):
        return False
    present = session.scalar(
        select(func.count())
        .select_from(GpuDeviceModel)
        .where(GpuDeviceModel.host_id == host_id, GpuDeviceModel.present.is_(True))
    )
    return present == len(info.gpus)


def sync_agent_host(session: Session, host_id: str, info: HostInfo, at: datetime) -> bool:
    """Write what the agent reported: the host present with its CPUs, memory and
    versions (zero or empty: keep what was known), its GPUs upserted, the ones
    it left out missing. True when something became placeable (a new host or
    GPU, one back), so that the caller wakes the placement pass."""
    host = session.get(HostModel, host_id)
    grown = host is None or not host.present
    if host is None:
        host = HostModel(
            id=host_id,
            name=info.name,
            cpus=info.cpus,
            memory_gb=info.memory_gb,
            driver_version=info.driver_version,
            cuda_version=info.cuda_version,
            simulated=False,
            agent=True,
            present=True,
            created_at=at,
        )
        session.add(host)
        session.flush()
    host.present = True
    if info.cpus:
        host.cpus = info.cpus
    if info.memory_gb:
        host.memory_gb = info.memory_gb
    host.driver_version = info.driver_version or host.driver_version
    host.cuda_version = info.cuda_version or host.cuda_version
    for gpu_info in sorted(info.gpus, key=lambda g: g.uuid):  # one lock order
        grown |= _upsert_gpu(session, host, gpu_info, at)
    reported = {gpu.uuid for gpu in info.gpus}
    for gpu in session.scalars(
        select(GpuDeviceModel)
        .where(GpuDeviceModel.host_id == host_id, GpuDeviceModel.present.is_(True))
        .order_by(GpuDeviceModel.id)
    ):
        if gpu.id not in reported:
            _mark_missing(session, gpu, at)
    return grown


def retire_agent_host(session: Session, host_id: str, at: datetime) -> None:
    """The host was removed: it and its GPUs leave the inventory (rows kept), and
    the instances running there are unreachable from now (so no longer billed:
    nothing can reach them). Enrolled again, the host loss pass finds them
    waiting on a host it hears, and runs them again."""
    host = session.get(HostModel, host_id)
    if host is None:
        return
    host.present = False
    for gpu in host.gpus:
        gpu.present = False
    stranded = session.scalars(
        select(InstanceModel)
        .where(
            InstanceModel.host_id == host_id,
            InstanceModel.placed.is_(True),
            InstanceModel.status.in_((InstanceStatus.RUNNING, InstanceStatus.STOPPING)),
        )
        .order_by(InstanceModel.id)
        .with_for_update()
    )
    reason = Message("host {host} was removed (its agent revoked)", host=host.name)
    for instance in stranded:
        switch_instance_status(session, instance, InstanceStatus.UNREACHABLE, reason, at)


def _upsert_gpu(session: Session, host: HostModel, info: GpuInfo, at: datetime) -> bool:
    gpu = session.get(GpuDeviceModel, info.uuid)
    grown = gpu is None or not gpu.present or gpu.host_id != host.id
    if gpu is None:
        gpu = GpuDeviceModel(id=info.uuid, state=GpuState.HEALTHY, first_seen_at=at)
        session.add(gpu)
    gpu.host_id, gpu.index = host.id, info.index
    gpu.model, gpu.memory_mb = info.model, info.memory_mb
    gpu.pci_bus_id, gpu.numa_node = info.pci_bus_id, info.numa_node
    gpu.nvlink_peers = ",".join(info.nvlink_peers)
    gpu.present = True
    gpu.first_seen_at = gpu.first_seen_at or at
    missing = _open(session, gpu.id, GPU_MISSING)
    for fault in missing:
        fault.repaired_at = at
    if missing and gpu.state == GpuState.UNHEALTHY and not held_by_fault(session, gpu.id):
        switch_gpu_state(session, gpu, GpuState.HEALTHY, "reported again by its host's agent", at)
    return grown


def _mark_missing(session: Session, gpu: GpuDeviceModel, at: datetime) -> None:
    message = f"GPU {gpu.index} ({gpu.id}) is no longer reported by its host's agent"
    gpu.present = False
    if not _open(session, gpu.id, GPU_MISSING):
        session.add(
            GpuFaultModel(
                gpu_id=gpu.id,
                host_id=gpu.host_id,
                kind=GPU_MISSING,
                action=GPU_MISSING,
                source="agent",
                message=message,
                at=at,
            )
        )
    if gpu.state in _OUT_OF_SERVICE:
        switch_gpu_state(session, gpu, GpuState.UNHEALTHY, message, at)
    for instance in tenants_on(session, [gpu.id]):
        record_instance_note(session, instance, message, at)


def _open(session: Session, gpu_id: str, kind: str) -> list[GpuFaultModel]:
    return list(
        session.scalars(
            select(GpuFaultModel).where(
                GpuFaultModel.gpu_id == gpu_id,
                GpuFaultModel.kind == kind,
                GpuFaultModel.repaired_at.is_(None),
            )
        )
    )
