"""GPU health: faults in, GPU states and tenant moves out.

Health events come from the GPU source (NVML on real hosts), from fault
injection on simulated fleets, and from the runtime going unreachable. Each
is recorded as a fault and mapped through the Xid catalogue
(`gpudock.gpu.xid`) to an action. GPU states:

    healthy ──fault──► draining ──no tenant left──► unhealthy ──repair──► healthy
    healthy ──drain (operator)──► draining ──no tenant left──► repairing ──repair──► healthy

Nothing is placed on a GPU that is not healthy (`inventory.capacity_snapshot`).
Moving tenants is `migration.request_move`; `health_pass` converges: it
finishes drains and re-requests moves a crash or a race may have missed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models import (
    GpuAllocationModel,
    GpuDeviceModel,
    GpuEventModel,
    GpuFaultModel,
    GpuShareModel,
    GpuState,
    InstanceModel,
    UserModel,
)
from gpudock.errors import Conflict, Forbidden, InvalidRequest, NotFound
from gpudock.gpu.base import HealthEvent
from gpudock.gpu.xid import KIND_ACTIONS, Action, rule_for
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import moves as migration
from gpudock.services.instances.status import record_instance_note

log = logging.getLogger(__name__)
G = GpuState
ALLOWED_GPU_TRANSITIONS: dict[GpuState, frozenset[GpuState]] = {
    G.HEALTHY: frozenset({G.DRAINING, G.UNHEALTHY}),
    G.DRAINING: frozenset({G.UNHEALTHY, G.REPAIRING, G.HEALTHY}),
    G.UNHEALTHY: frozenset({G.HEALTHY, G.REPAIRING}),
    G.REPAIRING: frozenset({G.HEALTHY, G.DRAINING, G.UNHEALTHY}),
}
DRAINING_ACTIONS = (Action.MIGRATE, Action.DRAIN_HOST)


def switch_gpu_state(
    session: Session, gpu: GpuDeviceModel, new: GpuState, reason: str, at: datetime
) -> None:
    """The only writer of `GpuDeviceModel.state`: validates and records an event."""
    old = gpu.state
    if old == new:
        return
    if new not in ALLOWED_GPU_TRANSITIONS[old]:
        raise Conflict(f"GPU {gpu.id} cannot go from {old} to {new}")
    if gpu.first_seen_at is None:
        gpu.first_seen_at = at
    gpu.state, gpu.state_reason, gpu.state_changed_at = new, reason, at
    session.add(
        GpuEventModel(gpu_id=gpu.id, at=at, from_state=old.value, to_state=new.value, reason=reason)
    )


@dataclass(frozen=True)
class FaultView:
    id: int
    gpu_uuid: str
    host_id: str
    kind: str
    xid: int | None
    action: str
    source: str
    message: str
    at: datetime
    repaired_at: datetime | None
    gpu_state: str

    @classmethod
    def of(cls, fault: GpuFaultModel, gpu: GpuDeviceModel) -> FaultView:
        return cls(
            fault.id,
            fault.gpu_id,
            fault.host_id,
            fault.kind,
            fault.xid,
            fault.action,
            fault.source,
            fault.message,
            fault.at,
            fault.repaired_at,
            gpu.state.value,
        )


def describe(event: HealthEvent) -> tuple[str, Action]:
    if event.kind == "xid" and event.xid is not None:
        rule = rule_for(event.xid)
        return f"Xid {rule.xid} ({rule.name})", rule.action
    if event.kind in KIND_ACTIONS:
        return KIND_ACTIONS[event.kind]
    return f"unknown health event {event.kind!r}", Action.NOTIFY


# -- one fault ----------------------------------------------------------------------
def record_fault(
    ctx: ServiceContext, event: HealthEvent, source: str, at: datetime | None = None
) -> FaultView | None:
    """Record the fault and act on it in one transaction; None when the GPU
    is unknown or the same condition is already open (persistent signals
    such as pending row remapping are reported on every poll)."""
    at = at or ctx.clock()
    with ctx.sessions.begin() as session:
        view = record_fault_in(session, event, source, at)
    if view is not None:
        ctx.wake_reconciler()
    return view


def record_fault_in(
    session: Session,
    event: HealthEvent,
    source: str,
    at: datetime,
    host_id: str | None = None,
) -> FaultView | None:
    """`record_fault` inside the caller's transaction (the caller wakes the
    reconciler). `host_id`: the GPU must be that host's — an agent reports
    only its own host's GPUs."""
    gpu = session.get(GpuDeviceModel, event.gpu_uuid, with_for_update=True)
    if gpu is None:
        log.warning("health event for unknown GPU %s: %s", event.gpu_uuid, event)
        return None
    if host_id is not None and gpu.host_id != host_id:
        log.warning("host %s reported GPU %s of host %s: ignored", host_id, gpu.id, gpu.host_id)
        return None
    if event.kind != "xid" and has_open_fault(session, gpu.id, event.kind):
        return None
    title, action = describe(event)
    message = f"{title}: {event.message}" if event.message else title
    fault = GpuFaultModel(
        gpu_id=gpu.id,
        host_id=gpu.host_id,
        kind=event.kind,
        xid=event.xid,
        action=action.value,
        source=source,
        message=message,
        at=at,
    )
    session.add(fault)
    session.flush()
    _apply(session, gpu, fault, action, at)
    log.warning("GPU %s: %s → %s", gpu.id, message, action.value)
    return FaultView.of(fault, gpu)


def has_open_fault(session: Session, gpu_id: str, kind: str) -> bool:
    return (
        session.scalar(
            select(GpuFaultModel.id).where(
                GpuFaultModel.gpu_id == gpu_id,
                GpuFaultModel.kind == kind,
                GpuFaultModel.repaired_at.is_(None),
            )
        )
        is not None
    )


def held_by_fault(session: Session, gpu_id: str) -> bool:
    """An open fault (not a mere notice) keeps the GPU out of service."""
    return (
        session.scalar(
            select(GpuFaultModel.id).where(
                GpuFaultModel.gpu_id == gpu_id,
                GpuFaultModel.repaired_at.is_(None),
                GpuFaultModel.action != Action.NOTIFY.value,
            )
        )
        is not None
    )


def _apply(
    session: Session, gpu: GpuDeviceModel, fault: GpuFaultModel, action: Action, at: datetime
) -> None:
    where = f"GPU {gpu.index} of host {gpu.host.name}"
    if action == Action.NOTIFY:
        for instance in tenants_on(session, [gpu.id]):
            record_instance_note(
                session,
                instance,
                f"{where} reported {fault.message}: usually the program's own error; "
                "the GPU stays in service",
                at,
            )
        return
    gpus = [gpu]
    if action == Action.DRAIN_HOST:
        gpus = list(
            session.scalars(select(GpuDeviceModel).where(GpuDeviceModel.host_id == gpu.host_id))
        )
    for member in gpus:
        if member.state in (G.HEALTHY, G.REPAIRING):
            switch_gpu_state(session, member, G.DRAINING, f"fault #{fault.id}: {fault.message}", at)
    tenants = tenants_on(session, [g.id for g in gpus])
    if action == Action.MIGRATE_DEFERRED:
        for instance in tenants:
            record_instance_note(
                session,
                instance,
                f"{where} reported {fault.message}; gpudock will move this instance to a "
                "healthy GPU at its next restart or stop (restart it now to move it now)",
                at,
            )
        return
    for instance in tenants:
        migration.request_move(session, instance, f"{where}: {fault.message}", fault.id, at)


def tenants_on(session: Session, gpu_ids: list[str]) -> list[InstanceModel]:
    """Instances holding any of these GPUs, locked (PostgreSQL refuses
    FOR UPDATE with DISTINCT, so duplicates go here)."""
    holders = (
        select(GpuAllocationModel.instance_id)
        .where(GpuAllocationModel.gpu_id.in_(gpu_ids))
        .union(select(GpuShareModel.instance_id).where(GpuShareModel.gpu_id.in_(gpu_ids)))
    )
    rows = session.scalars(
        select(InstanceModel)
        .where(InstanceModel.id.in_(holders))
        .order_by(InstanceModel.id)
        .with_for_update()
    )
    return list({row.id: row for row in rows}.values())


# -- operator actions -----------------------------------------------------------------
def _require_admin(actor: UserModel) -> None:
    if not actor.is_admin:
        raise Forbidden("only an admin can change GPU health")


def _gpu_or_404(session: Session, gpu_uuid: str) -> GpuDeviceModel:
    gpu = session.get(GpuDeviceModel, gpu_uuid, with_for_update=True)
    if gpu is None:
        raise NotFound(f"no GPU {gpu_uuid!r}: `gpudock hosts` lists them with their UUIDs")
    return gpu


def inject_fault(
    ctx: ServiceContext, actor: UserModel, gpu_uuid: str, xid: int, message: str = ""
) -> FaultView:
    """Simulated fleets only: make a GPU report Xid `xid`, as NVML would."""
    _require_admin(actor)
    if not 1 <= xid <= 65535:
        raise InvalidRequest(
            f"bad Xid {xid}: Xids are positive integers, e.g. 48 or 79", field="xid"
        )
    with ctx.sessions() as session:
        gpu = _gpu_or_404(session, gpu_uuid)
        if not gpu.host.simulated:
            raise Conflict(
                f"GPU {gpu_uuid} is real: faults can only be injected on a simulated fleet "
                "(start a server with --simulate SPEC)"
            )
    view = record_fault(ctx, HealthEvent(gpu_uuid, "xid", xid, message), "simulated")
    if view is None:  # cannot happen for an Xid on a known GPU; say so if it does
        raise NotFound(f"no GPU {gpu_uuid!r}")
    return view


def repair_gpu(ctx: ServiceContext, actor: UserModel, gpu_uuid: str) -> GpuDeviceModel:
    """Back into service: open faults closed, state healthy. Refused while
    tenants are still being moved off it."""
    _require_admin(actor)
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        gpu = _gpu_or_404(session, gpu_uuid)
        if gpu.state == G.DRAINING and tenants_on(session, [gpu.id]):
            raise Conflict(
                f"GPU {gpu_uuid} still has tenants being moved off it; repair it once it "
                "is unhealthy or repairing (`gpudock hosts` shows its state)"
            )
        for fault in session.scalars(
            select(GpuFaultModel).where(
                GpuFaultModel.gpu_id == gpu.id, GpuFaultModel.repaired_at.is_(None)
            )
        ):
            fault.repaired_at = now
        switch_gpu_state(session, gpu, G.HEALTHY, f"repaired by {actor.name}", now)
        session.flush()
        session.expunge(gpu)
    ctx.wake_reconciler()  # queued instances may fit now
    return gpu


def drain_gpu(ctx: ServiceContext, actor: UserModel, gpu_uuid: str) -> GpuDeviceModel:
    """Maintenance: no new tenants, current ones moved now; 'repairing' once empty."""
    _require_admin(actor)
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        gpu = _gpu_or_404(session, gpu_uuid)
        if gpu.state in (G.HEALTHY, G.REPAIRING):
            switch_gpu_state(session, gpu, G.DRAINING, f"drained by {actor.name}", now)
        for instance in tenants_on(session, [gpu.id]):
            migration.request_move(session, instance, f"GPU drained by {actor.name}", None, now)
        session.flush()
        session.expunge(gpu)
    ctx.wake_reconciler()
    return gpu


def list_faults(ctx: ServiceContext, actor: UserModel, limit: int = 200) -> list[FaultView]:
    _require_admin(actor)
    with ctx.reader() as session:
        rows = session.execute(
            select(GpuFaultModel, GpuDeviceModel)
            .join(GpuDeviceModel, GpuDeviceModel.id == GpuFaultModel.gpu_id)
            .order_by(GpuFaultModel.id.desc())
            .limit(limit)
        ).all()
        return [FaultView.of(fault, gpu) for fault, gpu in rows]
