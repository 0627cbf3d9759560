"""The placement pass: waiting instances in queue order get GPUs, one per
transaction, chosen by the configured policy (`GPUDOCK_PLACEMENT_POLICY`, the
house policy by default) over a snapshot of healthy capacity
(`scheduler.hosts.HostPlacer`).

The database makes double allocation impossible (a GPU's allocation row is
keyed by its UUID), whatever the scheduler decides; the balance is checked
again here because money may have gone while the request waited.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpudock.db.models import (
    DesiredState,
    GpuAllocationModel,
    GpuDeviceModel,
    GpuShareModel,
    InstanceModel,
    InstanceStatus,
)
from gpudock.messages import Message
from gpudock.scheduler.hosts import HostPlacer
from gpudock.scheduler.placement import (
    WHOLE_MILLI,
    HostCapacity,
    Placement,
    PlacementRequest,
    carries_labels,
)
from gpudock.services.billing import balances as billing
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import move_log
from gpudock.services.fleet.builds import host_builds
from gpudock.services.fleet.inventory import KeptCapacity, capacity_snapshot
from gpudock.services.fleet.moves import EVICTED
from gpudock.services.fleet.shape import fleet_shape
from gpudock.services.images import catalog as images
from gpudock.services.instances import queue
from gpudock.services.instances.status import switch_instance_status
from gpudock.settings import Settings

log = logging.getLogger(__name__)
S = InstanceStatus
WAITING = queue.WAITING
WARM_UP_REQUESTS = 8000  # four half-lives of the workload estimate: older ones weigh little


class PlacementState:
    """What the placement pass keeps from one pass to the next: the policy over
    the fleet (the workload it has learned, its admission balance) and the
    `queued_at` of each waiting instance it has tried, so that the policy is
    told of each request once, when it arrives. Lost with the process: the next
    one learns the workload again from the instances placed then (`_warm_up`),
    and every waiting instance arrives afresh."""

    def __init__(self, settings: Settings) -> None:
        self.placer = HostPlacer(settings.placement_policy)
        self.tried: dict[str, datetime] = {}
        self.warm = False
        self.capacity = KeptCapacity()

    def sync(self, ctx: ServiceContext, session: Session) -> None:
        if not self.warm:
            _warm_up(session, self.placer)
            self.warm = True
        shape = fleet_shape(ctx, session)
        self.placer.sync(host_builds(shape), capacity_snapshot(session, shape, self.capacity))

    def arrives(self, instance: InstanceModel) -> bool:
        """Is this the instance's first try since it was queued?"""
        first = self.tried.get(instance.id) != instance.queued_at
        self.tried[instance.id] = instance.queued_at
        return first


def place_waiting(ctx: ServiceContext, state: PlacementState | None = None) -> None:
    """Place waiting instances in queue order; the database rejects a GPU
    given twice (primary key on the allocation), whatever the timing.

    Anti-starvation: later, smaller requests may overtake one that does not fit
    for `GPUDOCK_QUEUE_OVERTAKE_LIMIT_S`; after that it is placed wherever it
    fits (the policy may not hold it back) or reserves the host that comes
    closest to holding it, and nothing younger is placed there until it runs.
    The reservation is worked out afresh each pass from the queue, so a
    restart keeps it and nothing needs cleaning up. `state` is what the
    reconciler keeps between passes (without one, a fresh policy)."""
    state = state or PlacementState(ctx.settings)
    now = ctx.clock()
    with ctx.reader() as session:  # no write lock: commits re-check under the row lock
        waiting = queue.waiting_in_order(session)
        if not waiting:
            state.tried.clear()
            return
        state.sync(ctx, session)
        avoid_since = now - timedelta(seconds=ctx.settings.eviction_avoid_s)
        evicted = move_log.open_evictions(session, EVICTED, avoid_since)
    placer = state.placer
    # Which hosts can run an image on a model does not change within a pass: asked
    # once per (image, model), not once per waiting instance.
    runnable: dict[tuple[str, str | None], frozenset[str] | None] = {}
    reserved: dict[str, InstanceModel] = {}  # host id → the starving instance holding it
    for instance in waiting:
        request = _request_of(ctx, instance, runnable)
        if request.host_labels:  # the policies see hosts, not labels: those that carry them
            request = _labelled(request, placer.hosts)
        if reserved:
            request = _without(request, placer.hosts, frozenset(reserved))
        eviction = evicted.get(instance.id) if instance.status == S.MIGRATING else None
        if eviction is not None:  # not back onto the host that just ended it
            request = _without(request, placer.hosts, frozenset({eviction.host_id}))
        starving = _waited_s(instance, now) >= ctx.settings.queue_overtake_limit_s
        arrival = state.arrives(instance)
        placement = placer.place(request, arrival=arrival, may_defer=not starving)
        if placement is None:
            host = _nearest_host(placer.hosts, request) if starving else None
            if host is not None:
                reserved[host] = instance
            _note_waiting(ctx, instance, host, eviction)
            continue
        if _commit_placement(ctx, instance, placement):
            placer.placed(placement, request)
            ctx.crash_point("after_placement")
        else:
            with ctx.reader() as session:
                state.sync(ctx, session)
    state.tried = {i.id: state.tried[i.id] for i in waiting if i.id in state.tried}


def _warm_up(session: Session, placer: HostPlacer) -> None:
    """Teach a new policy the workload from the instances placed now, oldest first."""
    latest = session.scalars(
        select(InstanceModel)
        .where(InstanceModel.placed.is_(True))
        .order_by(InstanceModel.created_at.desc(), InstanceModel.id)
        .limit(WARM_UP_REQUESTS)
    ).all()
    placer.warm(queue.placement_request(i) for i in reversed(latest))


def _request_of(
    ctx: ServiceContext,
    instance: InstanceModel,
    runnable: dict[tuple[str, str | None], frozenset[str] | None],
) -> PlacementRequest:
    key = (instance.image, instance.gpu_model)
    if key not in runnable:
        runnable[key] = images.runnable_hosts(ctx, instance.image, instance.gpu_model)
    hosts = runnable[key]
    if instance.stay_on_host and instance.host_id is not None:  # --stay
        own = frozenset({instance.host_id})
        hosts = own if hosts is None else hosts & own
    return replace(queue.placement_request(instance), allowed_hosts=hosts)


def _waited_s(instance: InstanceModel, now: datetime) -> float:
    return (now - instance.queued_at).total_seconds()


def _without(
    request: PlacementRequest, snapshot: list[HostCapacity], reserved: frozenset[str]
) -> PlacementRequest:
    allowed = request.allowed_hosts
    everywhere = frozenset(h.host_id for h in snapshot) if allowed is None else allowed
    return replace(request, allowed_hosts=everywhere - reserved)


def _labelled(request: PlacementRequest, hosts: list[HostCapacity]) -> PlacementRequest:
    carrying = frozenset(h.host_id for h in hosts if carries_labels(h, request))
    allowed = request.allowed_hosts
    return replace(request, allowed_hosts=carrying if allowed is None else allowed & carrying)


def _nearest_host(snapshot: list[HostCapacity], request: PlacementRequest) -> str | None:
    """The host that comes closest to holding `request`: among those it may use
    and that have one of its models, the one with most of them free."""
    models = request.models
    usable = [
        h
        for h in snapshot
        if (request.allowed_hosts is None or h.host_id in request.allowed_hosts)
        and carries_labels(h, request)
        and (not models or models & h.gpu_models)
    ]
    if not usable:
        return None

    def closeness(host: HostCapacity) -> tuple[int, float, float]:
        free = sum(1 for g in host.free_gpus if g.model in models)
        return free, host.free_cpus, host.free_memory_gb

    return max(usable, key=closeness).host_id


def waiting_reason(
    instance: InstanceModel, avoiding: move_log.Eviction | None, avoid_s: float
) -> str:
    what = _wanted(instance)
    if instance.status == S.MIGRATING and avoiding is not None:
        until = avoiding.at + timedelta(seconds=avoid_s)
        return Message(
            "moving: waiting for a healthy {what} on another host than {host}, which ended it; "
            "{host} takes it again after {until}",
            what=what,
            host=avoiding.host_name,
            until=until.strftime("%H:%M:%S UTC"),
        )
    if instance.status == S.MIGRATING:
        return Message("moving: waiting for a healthy {what}; no capacity free now", what=what)
    return Message("waiting for {what}", what=what)


def _wanted(instance: InstanceModel) -> Message:
    models = " or ".join(instance.accepted_models)
    if instance.gpu_share_milli is not None:
        share = f"{instance.gpu_share_milli / 1000:.3f}"
        return Message("a {share} share of one {models}", share=share, models=models)
    if instance.gpu_count and instance.stay_on_host:
        template = "{count} × {models} on its own host (started with --stay)"
        return Message(template, count=instance.gpu_count, models=models)
    if instance.gpu_count:
        return Message("{count} × {models}", count=instance.gpu_count, models=models)
    template = "{cpu} CPU and {memory} GB of memory"
    return Message(template, cpu=f"{instance.cpu:g}", memory=instance.memory_gb)


def _note_waiting(
    ctx: ServiceContext,
    instance: InstanceModel,
    reserving: str | None,
    avoiding: move_log.Eviction | None,
) -> None:
    reason = waiting_reason(instance, avoiding, ctx.settings.eviction_avoid_s)
    if reserving is not None:
        reason = Message(
            "{reason}; waiting longer than {limit} s, so it holds host {host}: nothing that "
            "came later is placed there until it runs",
            reason=reason,
            limit=f"{ctx.settings.queue_overtake_limit_s:g}",
            host=reserving,
        )
    if instance.status_reason == reason:
        return
    with ctx.sessions.begin() as session:
        row = session.get(InstanceModel, instance.id, with_for_update=True)
        if row is not None and not row.placed and row.status in WAITING:
            switch_instance_status(session, row, row.status, reason, ctx.clock())


def _commit_placement(ctx: ServiceContext, instance: InstanceModel, placement: Placement) -> bool:
    now = ctx.clock()
    try:
        with ctx.sessions.begin() as session:
            row = session.get(
                InstanceModel, instance.id, with_for_update=True, populate_existing=True
            )
            if (
                row is None
                or row.placed
                or row.desired_state != DesiredState.RUNNING
                or row.status not in WAITING
            ):
                return False
            refused = billing.shortfall(
                session, ctx.settings, row.user_id, row, now, waiting_self=row.id
            )
            if refused is not None:  # the balance is checked again at placement
                row.desired_state = DesiredState.STOPPED
                switch_instance_status(
                    session, row, S.STOPPED, Message("not started: {why}", why=refused), now
                )
                return False
            if row.gpu_share_milli is not None:
                _claim_share(session, row, placement.gpu_uuids[0], now)
            else:
                _check_unshared(session, placement.gpu_uuids)
            for gpu_id in placement.gpu_uuids if row.gpu_share_milli is None else ():
                session.add(GpuAllocationModel(gpu_id=gpu_id, instance_id=row.id, allocated_at=now))
            row.placed, row.host_id = True, placement.host_id
            row.placement_generation += 1  # older commands to its hosts are refused now
            _record_model(row, placement.model)
            session.flush()
            new_status = S.CREATING if row.status == S.PENDING else S.STARTING
            reason = Message("placed; starting the container")
            if row.status == S.MIGRATING:
                reason = Message("placed on healthy GPUs; moving")
            switch_instance_status(session, row, new_status, reason, now)
    except (IntegrityError, _ShareTaken):
        log.info("placement of %s lost a race for a GPU; will retry", instance.id)
        return False
    ctx.wake_reconciler()
    return True


def _record_model(row: InstanceModel, model: str | None) -> None:
    """The instance records the model it got; the others it accepts stay
    acceptable (a later start may land on any of them)."""
    if model is None or model == row.gpu_model:
        return
    row.gpu_model_choices = ",".join(m for m in row.accepted_models if m != model)
    row.gpu_model = model


class _ShareTaken(Exception):
    """The GPU no longer has room for the share (or is held whole)."""


def _claim_share(session: Session, row: InstanceModel, gpu_id: str, now: datetime) -> None:
    """Insert the share if the GPU still has room: checked under the GPU row's
    lock, so two shares can never add up to more than the card."""
    assert row.gpu_share_milli is not None
    gpu = session.get(GpuDeviceModel, gpu_id, with_for_update=True, populate_existing=True)
    whole = session.get(GpuAllocationModel, gpu_id)
    held = session.scalar(
        select(func.coalesce(func.sum(GpuShareModel.milli), 0)).where(
            GpuShareModel.gpu_id == gpu_id
        )
    )
    if gpu is None or whole is not None or int(held or 0) + row.gpu_share_milli > WHOLE_MILLI:
        raise _ShareTaken(gpu_id)
    session.add(
        GpuShareModel(
            instance_id=row.id, gpu_id=gpu_id, milli=row.gpu_share_milli, allocated_at=now
        )
    )


def _check_unshared(session: Session, gpu_ids: tuple[str, ...]) -> None:
    """Whole GPUs carry no shares (the GPU rows locked, as `_claim_share` locks them)."""
    if not gpu_ids:
        return
    list(
        session.scalars(
            select(GpuDeviceModel).where(GpuDeviceModel.id.in_(gpu_ids)).with_for_update()
        )
    )
    if session.scalar(select(GpuShareModel.gpu_id).where(GpuShareModel.gpu_id.in_(gpu_ids))):
        raise _ShareTaken(",".join(gpu_ids))
