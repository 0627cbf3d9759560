"""One instance's way from what it is to what it should be, a step at a time.

Each step reads the row under a lease, does its runtime I/O outside any
transaction, and writes back guarded by the lease token. Every step is
idempotent, so a crash anywhere is repaired by running the same step again.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, delete, func, or_, select
from sqlalchemy.orm import Session

from gpudock.db.models import (
    DesiredState,
    GpuAllocationModel,
    GpuDeviceModel,
    GpuShareModel,
    GpuState,
    HostModel,
    InstanceModel,
    InstanceStatus,
)
from gpudock.errors import GpudockError, RuntimeFailure, RuntimeUnavailable
from gpudock.messages import Message
from gpudock.runtime.base import LABEL_CLUSTER, LABEL_GPUS, LABEL_OWNER, ContainerState, Runtime
from gpudock.services.billing import intervals as metering
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import moves as migration
from gpudock.services.fleet.inventory import allocated_gpu_ids
from gpudock.services.images import access as image_access
from gpudock.services.images import catalog as images
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.auto_stop import AUTO_STOP_PREFIX
from gpudock.services.instances.status import current_reason, switch_instance_status
from gpudock.services.leases import LeaseHeartbeat, release, try_lease, with_lease

log = logging.getLogger(__name__)
S = InstanceStatus
MAX_STEPS = 6


class Step(enum.StrEnum):
    """What a row needs next."""

    NONE = "none"  # where it should be, or waiting for the placement pass
    MARK_STOPPED = "mark_stopped"
    MARK_STARTING = "mark_starting"
    RUN = "run"
    STOP = "stop"
    DELETE = "delete"
    EVACUATE = "evacuate"


def plan(instance: InstanceModel) -> Step:
    return plan_step(instance.status, instance.desired_state, instance.placed)


def plan_step(status: InstanceStatus, desired: DesiredState, placed: bool) -> Step:
    """The next step for a row in this status, wanting that state."""
    if status == S.DELETED:
        return Step.NONE
    if desired == DesiredState.DELETED or status == S.DELETING:
        return Step.DELETE
    if desired == DesiredState.STOPPED:
        if status in (S.STOPPED, S.FAILED):
            return Step.NONE
        if status in (S.PENDING, S.STARTING, S.MIGRATING) and not placed:
            return Step.MARK_STOPPED
        return Step.STOP
    if status == S.STOPPING:
        return Step.STOP
    if status == S.MIGRATING:  # off its GPUs first, then the placement pass
        return Step.EVACUATE if placed else Step.NONE
    if status in (S.STOPPED, S.FAILED):
        return Step.MARK_STARTING
    if status in (S.CREATING, S.STARTING) and placed:
        return Step.RUN
    return Step.NONE


def advance(ctx: ServiceContext, instance_id: str) -> None:
    """Take the instance as far as it can go now; return early if it is leased."""
    token = try_lease(ctx, instance_id)
    if token is None:
        return
    try:
        with LeaseHeartbeat(ctx, instance_id, token):
            for _ in range(MAX_STEPS):
                step, run = with_lease(
                    ctx, instance_id, token, lambda s, i: _next_step(s, i, ctx.clock())
                )
                if step == Step.NONE:
                    return
                if step == Step.RUN:
                    _run(ctx, instance_id, token, run)
                else:
                    _STEPS[step](ctx, instance_id, token)
    except _StopHere:
        return
    finally:
        release(ctx, instance_id, token)


def _next_step(
    session: Session, instance: InstanceModel, now: datetime
) -> tuple[Step, _RunPlan | None]:
    """The step, and for a run what it needs, read in the same transaction
    (one fewer on the way to running)."""
    step = plan(instance)
    return step, _read_run_plan(session, instance, now) if step == Step.RUN else None


# -- database-only steps ------------------------------------------------------
def _mark_stopped(ctx: ServiceContext, instance_id: str, token: str) -> None:
    def mutate(session: Session, instance: InstanceModel) -> None:
        _release_placement(session, instance)
        switch_instance_status(session, instance, S.STOPPED, Message("stop requested"), ctx.clock())

    with_lease(ctx, instance_id, token, mutate)


def _mark_starting(ctx: ServiceContext, instance_id: str, token: str) -> None:
    with_lease(
        ctx,
        instance_id,
        token,
        lambda session, instance: switch_instance_status(
            session, instance, S.STARTING, Message("start requested"), ctx.clock()
        ),
    )


def _release_placement(session: Session, instance: InstanceModel) -> None:
    session.execute(delete(GpuAllocationModel).where(GpuAllocationModel.instance_id == instance.id))
    session.execute(delete(GpuShareModel).where(GpuShareModel.instance_id == instance.id))
    instance.placed = False


# -- run: make the container exist with the allocated GPUs and start it ------
@dataclass(frozen=True)
class _RunPlan:
    instance: InstanceModel
    host: HostModel
    gpus: list[str]
    gpu_memory_mb: int  # of its GPUs (a share's limits are parts of it)


def _read_run_plan(session: Session, instance: InstanceModel, now: datetime) -> _RunPlan | None:
    host = session.get(HostModel, instance.host_id)
    if host is None:
        raise RuntimeFailure(f"instance {instance.id} is placed on a host that does not exist")
    held = allocated_gpu_ids(session, instance.id)
    unfit = session.scalars(
        select(GpuDeviceModel).where(
            GpuDeviceModel.id.in_(held), GpuDeviceModel.state != GpuState.HEALTHY
        )
    ).first()
    if unfit is not None:  # never start on a GPU that is not healthy
        _release_placement(session, instance)
        reason = Message(
            "GPU {index} of {host} is {state}; moving to a healthy GPU",
            index=unfit.index,
            host=host.name,
            state=Message(unfit.state.value),
        )
        switch_instance_status(session, instance, S.MIGRATING, reason, now)
        return None
    session.expunge(host)
    memory = session.scalar(
        select(func.min(GpuDeviceModel.memory_mb)).where(GpuDeviceModel.id.in_(held))
    )
    return _RunPlan(instance, host, held, int(memory or 0))


def _run(ctx: ServiceContext, instance_id: str, token: str, run: _RunPlan | None) -> None:
    """`run`: what `_read_run_plan` read, None when it moved the row off unfit GPUs."""
    if run is None:
        return
    instance = run.instance
    runtime = containers.runtime_of(ctx, instance)
    came_from = instance.data_host_id
    try:
        instance = migration.carry_writable_layer_across(ctx, instance, run.host, token)
        if image_access.never_pulled(instance.system_image):
            migration.bring_local_image(ctx, instance, run.host, token)
        runtime.ensure_image(instance.system_image)
        instance = migration.ensure_data_volume(ctx, instance, run.host, token)
        ctx.crash_point("after_volume")
        instance, state, replaced = _make_container(ctx, runtime, instance, run, token)
        if instance.gpu_share_milli is not None:
            _install_share_hook(ctx, runtime, state.id)
        if replaced:  # the old container held the old host's copy of the data
            migration.remove_stale_volumes(ctx, instance)
        ctx.crash_point("after_create")
        state = runtime.start_container(state.id)
        ctx.crash_point("after_start")
    except RuntimeUnavailable as exc:
        _note_retry(ctx, instance_id, token, exc)
        return
    except RuntimeFailure as exc:
        _fail(
            ctx,
            instance_id,
            token,
            Message("could not start the container: {error}", error=exc.message),
        )
        return
    _mark_running(ctx, instance_id, token, state, run)
    migration.leave_other_engine(ctx, instance, came_from)
    # After 'running' is reported: the copy costs a round trip the user need not wait for.
    images.install_doctor(runtime, state.id)  # gpudock-doctor in every instance


def _make_container(
    ctx: ServiceContext, runtime: Runtime, instance: InstanceModel, run: _RunPlan, token: str
) -> tuple[InstanceModel, ContainerState, bool]:
    """Create the container, asking nothing first: a create finds the one an
    earlier attempt made. One made for other GPUs is replaced (True), its
    writable layer carried over."""
    spec = containers.build_spec(
        ctx.settings, ctx.cluster_id, instance, run.host, run.gpus, run.gpu_memory_mb
    )
    state = runtime.create_container(spec)
    if state.labels.get(LABEL_GPUS) == ",".join(run.gpus):
        return instance, state, False
    instance = _carry_writable_layer(ctx, runtime, instance, state, token)
    spec = containers.build_spec(
        ctx.settings, ctx.cluster_id, instance, run.host, run.gpus, run.gpu_memory_mb
    )
    return instance, runtime.create_container(spec), True


def _install_share_hook(ctx: ServiceContext, runtime: Runtime, container_id: str) -> None:
    """HAMi-core into a share's container, preloaded for every process that starts
    there (an SSH session does not inherit a container's env-only preload)."""
    library = ctx.settings.share_hook_library
    if library is None:
        return
    runtime.put_file(container_id, containers.SHARE_HOOK_PATH, library.read_bytes())
    runtime.put_file(
        container_id, containers.LD_SO_PRELOAD, f"{containers.SHARE_HOOK_PATH}\n".encode(), 0o644
    )


def _carry_writable_layer(
    ctx: ServiceContext,
    runtime: Runtime,
    instance: InstanceModel,
    existing: ContainerState,
    token: str,
) -> InstanceModel:
    """The container was made for other GPUs: commit its writable layer so
    packages installed outside /root/data come along, then replace it."""
    repository = containers.system_image_repository(ctx.cluster_id, instance.id)
    ref = runtime.commit_container(
        existing.id,
        repository,
        f"t{int(ctx.clock().timestamp())}",
        {LABEL_OWNER: instance.user_id, LABEL_CLUSTER: ctx.cluster_id},
    )

    def mutate(session: Session, row: InstanceModel) -> InstanceModel:
        row.system_image = ref
        return row

    updated = with_lease(ctx, instance.id, token, mutate)
    runtime.remove_container(existing.id, keep_network=True)  # its successor joins it
    if instance.system_image != instance.image and instance.system_image != ref:
        runtime.remove_image(instance.system_image)
    return updated


def _mark_running(
    ctx: ServiceContext, instance_id: str, token: str, state: ContainerState, run: _RunPlan
) -> None:
    def mutate(session: Session, instance: InstanceModel) -> None:
        instance.container_id = state.id
        instance.container_gpus = ",".join(run.gpus)
        migration.record_first_home(instance, run.host.id, ctx.cluster_id)
        gpus = (
            Message("{count} × {models}", count=len(run.gpus), models=instance.gpu_model)
            if run.gpus
            else Message("no GPU")
        )
        at = state.started_at or ctx.clock()
        reason = Message("running on {host} ({gpus})", host=run.host.name, gpus=gpus)
        switch_instance_status(session, instance, S.RUNNING, reason, at)

    with_lease(ctx, instance_id, token, mutate)


def _fail(ctx: ServiceContext, instance_id: str, token: str, reason: str) -> None:
    def mutate(session: Session, instance: InstanceModel) -> None:
        _release_placement(session, instance)
        # A failure waits for the user: `start` retries, `delete` cleans up.
        instance.desired_state = DesiredState.STOPPED
        switch_instance_status(session, instance, S.FAILED, reason, ctx.clock())

    log.warning("instance %s failed: %s", instance_id, reason)
    with_lease(ctx, instance_id, token, mutate)


def _said(exc: Exception) -> str:
    """What an error says, a `Message` where it is one of ours."""
    return exc.message if isinstance(exc, GpudockError) else str(exc)


def _note_retry(ctx: ServiceContext, instance_id: str, token: str, exc: Exception) -> None:
    def mutate(session: Session, instance: InstanceModel) -> None:
        reason = Message("retrying: {error}", error=_said(exc))
        if instance.status_reason != reason:
            switch_instance_status(session, instance, instance.status, reason, ctx.clock())

    log.warning("instance %s: %s", instance_id, exc)
    with_lease(ctx, instance_id, token, mutate)


# -- stop: stop the container, keep it and the volume -------------------------
def _stop(ctx: ServiceContext, instance_id: str, token: str) -> None:
    def begin(session: Session, instance: InstanceModel) -> Runtime:
        if instance.status != S.STOPPING:
            reason = Message("stop requested")
            switch_instance_status(session, instance, S.STOPPING, reason, ctx.clock())
        return containers.runtime_of(ctx, instance)

    runtime = with_lease(ctx, instance_id, token, begin)
    name = containers.container_name(ctx.cluster_id, instance_id)
    try:
        state = runtime.stop_container(name, ctx.settings.stop_timeout_s)
    except RuntimeFailure as exc:
        _note_retry(ctx, instance_id, token, exc)
        raise _StopHere from exc
    ctx.crash_point("after_stop")
    at = (state.finished_at if state else None) or ctx.clock()

    def finish(session: Session, instance: InstanceModel) -> None:
        if instance.desired_state == DesiredState.RUNNING:  # a restart: keep the GPUs
            switch_instance_status(session, instance, S.STARTING, Message("restarting"), at)
        else:
            _release_placement(session, instance)
            reason = Message("stopped; data kept")
            if instance.status_reason.startswith((metering.BILLING_STOP_PREFIX, AUTO_STOP_PREFIX)):
                reason = Message("{reason}; data kept", reason=current_reason(instance))
            switch_instance_status(session, instance, S.STOPPED, reason, at)

    with_lease(ctx, instance_id, token, finish)


# -- evacuate: off failed GPUs -----------------------------------------
def _evacuate(ctx: ServiceContext, instance_id: str, token: str) -> None:
    """Stop the container (its CUDA work is lost with the GPU anyway, so the
    grace is short), keep it for its writable layer, release the GPUs; the
    placement pass then finds healthy ones."""
    name = containers.container_name(ctx.cluster_id, instance_id)
    runtime = with_lease(ctx, instance_id, token, lambda _s, row: containers.runtime_of(ctx, row))
    try:
        runtime.stop_container(name, ctx.settings.migration_stop_timeout_s)
    except RuntimeFailure as exc:
        _note_retry(ctx, instance_id, token, exc)
        raise _StopHere from exc
    ctx.crash_point("after_evacuate")

    def release_gpus(session: Session, instance: InstanceModel) -> None:
        _release_placement(session, instance)
        reason = Message(
            "{reason}; stopped, waiting for a healthy GPU", reason=current_reason(instance)
        )
        switch_instance_status(session, instance, S.MIGRATING, reason, ctx.clock())

    with_lease(ctx, instance_id, token, release_gpus)
    ctx.wake_reconciler()


# -- delete: container, volume and committed system image go ------------------
def _delete(ctx: ServiceContext, instance_id: str, token: str) -> None:
    def begin(session: Session, instance: InstanceModel) -> InstanceModel:
        if instance.status != S.DELETING:
            switch_instance_status(session, instance, S.DELETING, "delete requested", ctx.clock())
        return instance

    instance = with_lease(ctx, instance_id, token, begin)
    runtime = containers.runtime_of(ctx, instance)
    try:
        runtime.remove_container(containers.container_name(ctx.cluster_id, instance_id))
        ctx.crash_point("after_container_remove")
        _data_runtime(ctx, instance).remove_volume(
            containers.data_volume_of(ctx.cluster_id, instance)
        )
        ctx.crash_point("after_volume_remove")
        if instance.system_image != instance.image:
            runtime.remove_image(instance.system_image)
    except RuntimeFailure as exc:
        _note_retry(ctx, instance_id, token, exc)
        raise _StopHere from exc

    def finish(session: Session, row: InstanceModel) -> None:
        _release_placement(session, row)
        row.container_id = None
        switch_instance_status(session, row, S.DELETED, "deleted with its data volume", ctx.clock())

    with_lease(ctx, instance_id, token, finish)


def _data_runtime(ctx: ServiceContext, instance: InstanceModel) -> Runtime:
    """Where its data volume is (the host it was on before a move cut short)."""
    return containers.runtime_of(ctx, instance, instance.data_host_id)


class _StopHere(Exception):
    """Leave the step loop; the next reconciler pass retries."""


# Step.RUN is `_run`, given what `_next_step` read with the plan.
_STEPS: dict[Step, Callable[[ServiceContext, str, str], None]] = {
    Step.MARK_STOPPED: _mark_stopped,
    Step.MARK_STARTING: _mark_starting,
    Step.STOP: _stop,
    Step.DELETE: _delete,
    Step.EVACUATE: _evacuate,
}


# Rows that need no step whatever else they hold (`plan_step` says NONE for each):
# where they should be, or waiting for the placement pass. At fleet scale they
# are nearly all rows; the scan leaves them in the database.
SETTLED = or_(
    and_(InstanceModel.status == S.RUNNING, InstanceModel.desired_state == DesiredState.RUNNING),
    and_(
        InstanceModel.status.in_((S.STOPPED, S.FAILED)),
        InstanceModel.desired_state == DesiredState.STOPPED,
    ),
    and_(
        InstanceModel.status.in_((S.PENDING, S.STARTING, S.MIGRATING)),
        InstanceModel.desired_state == DesiredState.RUNNING,
        InstanceModel.placed.is_(False),
    ),
    InstanceModel.status == S.DELETED,
)
# The same rows' complement, said as what the (status, desired_state) index can
# search: each term names its statuses and desired states, so the scan reads the
# few unsettled rows' index entries instead of the whole table
# (tests/reconcile/test_lifecycle_plan.py checks it is exactly NOT SETTLED).
UNSETTLED = or_(
    InstanceModel.status.in_((S.CREATING, S.STOPPING, S.DELETING, S.UNREACHABLE)),
    and_(
        InstanceModel.status == S.RUNNING,
        InstanceModel.desired_state.in_((DesiredState.STOPPED, DesiredState.DELETED)),
    ),
    and_(
        InstanceModel.status.in_((S.STOPPED, S.FAILED)),
        InstanceModel.desired_state.in_((DesiredState.RUNNING, DesiredState.DELETED)),
    ),
    and_(
        InstanceModel.status.in_((S.PENDING, S.STARTING, S.MIGRATING)),
        or_(
            InstanceModel.desired_state.in_((DesiredState.STOPPED, DesiredState.DELETED)),
            InstanceModel.placed.is_not(False),
        ),
    ),
)


def active_instance_ids(session: Session) -> list[str]:
    """Rows that are not where they should be and need a step (not placement)."""
    rows = session.execute(
        select(
            InstanceModel.id,
            InstanceModel.status,
            InstanceModel.desired_state,
            InstanceModel.placed,
        )
        .where(UNSETTLED)
        .order_by(InstanceModel.queued_at)
    ).all()
    return [
        row.id for row in rows if plan_step(row.status, row.desired_state, row.placed) != Step.NONE
    ]
