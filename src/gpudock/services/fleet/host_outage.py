"""A lost host's GPUs: out of service while it is gone, back when it is.

A host is lost when the server cannot reach it: its agent sent no heartbeat
for `GPUDOCK_HOST_LOST_AFTER_S` (`reconcile.host_loss`), or, for the hosts of
the local GPU source, the runtime did not answer that long
(`reconcile.gpu_health`). Each of its GPUs gets an open `host_lost` fault and
becomes unhealthy, so nothing is placed there; its tenants are not moved by
this (their data volumes live on the lost host). When the host is back the
faults close, and a GPU no other fault holds is healthy again.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models import GpuDeviceModel, GpuFaultModel, GpuState, InstanceModel
from gpudock.services.fleet.gpu_health import (
    has_open_fault,
    held_by_fault,
    switch_gpu_state,
    tenants_on,
)

HOST_LOST = "host_lost"
_IN_SERVICE = (GpuState.HEALTHY, GpuState.REPAIRING, GpuState.DRAINING)


def take_out_host(
    session: Session, host_id: str, message: str, source: str, at: datetime
) -> list[InstanceModel]:
    """Fault every GPU of the host as lost (once) and make it unhealthy; the
    instances holding them (locked), for the caller to tell or move."""
    gpus = list(
        session.scalars(
            select(GpuDeviceModel)
            .where(GpuDeviceModel.host_id == host_id)
            .order_by(GpuDeviceModel.id)
            .with_for_update()
        )
    )
    for gpu in gpus:
        if has_open_fault(session, gpu.id, HOST_LOST):
            continue
        session.add(
            GpuFaultModel(
                gpu_id=gpu.id,
                host_id=host_id,
                kind=HOST_LOST,
                action=HOST_LOST,
                source=source,
                message=message,
                at=at,
            )
        )
        if gpu.state in _IN_SERVICE:
            switch_gpu_state(session, gpu, GpuState.UNHEALTHY, message, at)
    return tenants_on(session, [gpu.id for gpu in gpus])


def bring_back_host(session: Session, host_id: str, reason: str, at: datetime) -> None:
    """Close the host's `host_lost` faults; a GPU nothing else holds is healthy again."""
    faults = session.scalars(
        select(GpuFaultModel).where(
            GpuFaultModel.host_id == host_id,
            GpuFaultModel.kind == HOST_LOST,
            GpuFaultModel.repaired_at.is_(None),
        )
    ).all()
    for fault in faults:
        fault.repaired_at = at
    for fault in faults:
        gpu = session.get(GpuDeviceModel, fault.gpu_id)
        if gpu is None or gpu.state != GpuState.UNHEALTHY or held_by_fault(session, gpu.id):
            continue
        switch_gpu_state(session, gpu, GpuState.HEALTHY, reason, at)
