"""The reconciler: converges the runtime to the database's desired state.

One thread runs the loop; slow runtime I/O runs on a worker pool, each row
under a lease. The loop wakes on every API change and at a fixed interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpudock.db.models import (
    DesiredState,
    GpuAllocationModel,
    HostModel,
    InstanceEventModel,
    InstanceModel,
    InstanceStatus,
)
from gpudock.errors import GpudockError
from gpudock.runtime.base import LABEL_BUILD, LABEL_OWNER, ContainerState
from gpudock.scheduler.placement import HostCapacity, Placement, PlacementRequest, place
from gpudock.services import (
    billing,
    charging,
    containers,
    health,
    images,
    lifecycle,
    migration,
    system_disks,
)
from gpudock.services.context import ServiceContext
from gpudock.services.instances import switch_instance_status
from gpudock.services.inventory import capacity_snapshot
from gpudock.services.leases import release_all

log = logging.getLogger(__name__)
S = InstanceStatus
GC_INTERVAL_S = 60.0
BUILD_GRACE_S = 60.0  # past a build's time limit, before its containers count as leftovers
WAITING = (S.PENDING, S.STARTING, S.MIGRATING)  # unplaced rows the placement pass serves


class Reconciler:
    def __init__(self, ctx: ServiceContext) -> None:
        self._ctx = ctx
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(ctx.settings.reconcile_workers, "gpudock-reconcile")
        self._in_flight: dict[str, Future[None]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last_health = 0.0
        self._last_gc = 0.0
        self._last_billing = 0.0
        self._last_gpu_health = 0.0
        self._last_disks = 0.0
        self._health_watch = health.HealthWatch()
        self._disk_watch = system_disks.DiskWatch()

    # -- lifecycle of the loop itself ---------------------------------------
    def start(self) -> None:
        release_all(self._ctx)
        self._thread = threading.Thread(target=self._loop, name="gpudock-reconciler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                self.tick()
            except Exception:  # the loop must survive anything one pass hits
                log.exception("reconciler pass failed")
            self._wake.wait(self._ctx.settings.reconcile_interval_s)

    # -- one pass --------------------------------------------------------------
    def tick(self) -> None:
        now = time.monotonic()
        if now - self._last_gc >= GC_INTERVAL_S:
            self._last_gc = now
            collect_garbage(self._ctx)
        health.converge(self._ctx)  # issue 6: finish drains, re-request lost moves
        place_waiting(self._ctx)
        with self._ctx.reader() as session:
            ids = lifecycle.active_instance_ids(session)
        for instance_id in ids:
            self._submit(instance_id)
        if now - self._last_gpu_health >= self._ctx.settings.gpu_health_interval_s:  # issue 6
            self._last_gpu_health = now
            health.health_pass(self._ctx, self._health_watch)
        if now - self._last_health >= self._ctx.settings.health_check_interval_s:
            self._last_health = now
            check_running(self._ctx)
        if now - self._last_billing >= self._ctx.settings.billing_tick_s:  # issue 4
            self._last_billing = now
            charging.charge_pass(self._ctx)
        if now - self._last_disks >= self._ctx.settings.system_disk_check_interval_s:
            self._last_disks = now
            system_disks.check_system_disks(self._ctx, self._disk_watch)

    def _submit(self, instance_id: str) -> None:
        with self._lock:
            running = self._in_flight.get(instance_id)
            if running is not None and not running.done():
                return
            future = self._pool.submit(self._advance, instance_id)
            self._in_flight[instance_id] = future

    def _advance(self, instance_id: str) -> None:
        try:
            lifecycle.advance(self._ctx, instance_id)
        except Exception:
            log.exception("instance %s: step failed", instance_id)
        finally:
            self._wake.set()  # a step may unlock the next one (e.g. placement)

    def drain(self, timeout_s: float = 60.0) -> None:
        """Run passes until one changes nothing and nothing is in flight (tests)."""
        deadline = time.monotonic() + timeout_s
        last_seen = -1
        while time.monotonic() < deadline:
            self.tick()
            with self._lock:
                futures = list(self._in_flight.values())
            for future in futures:
                future.result(timeout=max(0.1, deadline - time.monotonic()))
            with self._ctx.sessions() as session:
                newest = session.scalar(select(func.max(InstanceEventModel.id))) or 0
                if newest == last_seen and not lifecycle.active_instance_ids(session):
                    return
            last_seen = newest
        raise TimeoutError("the reconciler did not settle in time")


# -- placement pass ----------------------------------------------------------------
def place_waiting(ctx: ServiceContext) -> None:
    """Place waiting instances in queue order; the database rejects a GPU
    given twice (primary key on the allocation), whatever the timing."""
    with ctx.sessions() as session:
        waiting = list(
            session.scalars(
                select(InstanceModel)
                .where(
                    InstanceModel.desired_state == DesiredState.RUNNING,
                    InstanceModel.placed.is_(False),
                    InstanceModel.status.in_(WAITING),
                )
                .order_by(InstanceModel.queued_at, InstanceModel.id)
            )
        )
        if not waiting:
            return
        snapshot = capacity_snapshot(session)
    for instance in waiting:
        request = _request_of(instance)
        hosts = images.runnable_hosts(ctx, instance.image, instance.gpu_model)  # issue 7
        if instance.stay_on_host and instance.host_id is not None:  # issue 6: --stay
            own = frozenset({instance.host_id})
            hosts = own if hosts is None else hosts & own
        request = replace(request, allowed_hosts=hosts)
        placement = place(snapshot, request)
        if placement is None:
            _note_waiting(ctx, instance)
            continue
        if _commit_placement(ctx, instance, placement):
            snapshot = _after(snapshot, placement, request)
            ctx.crash_point("after_placement")
        else:
            with ctx.sessions() as session:
                snapshot = capacity_snapshot(session)


def _request_of(instance: InstanceModel) -> PlacementRequest:
    previous = frozenset(g for g in instance.container_gpus.split(",") if g)
    return PlacementRequest(
        gpu_model=instance.gpu_model,
        gpu_count=instance.gpu_count,
        cpus=instance.cpu,
        memory_gb=instance.memory_gb,
        preferred_gpus=previous if len(previous) == instance.gpu_count else frozenset(),
        preferred_host=instance.host_id,
    )


def waiting_reason(instance: InstanceModel) -> str:
    if instance.gpu_count:
        what = f"{instance.gpu_count} × {instance.gpu_model}"
        if instance.stay_on_host:
            what += " on its own host (started with --stay)"
    else:
        what = f"{instance.cpu:g} CPU and {instance.memory_gb} GB of memory"
    if instance.status == S.MIGRATING:
        return f"moving: waiting for a healthy {what}; no capacity free now"
    return f"waiting for {what}"


def _note_waiting(ctx: ServiceContext, instance: InstanceModel) -> None:
    reason = waiting_reason(instance)
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
            if refused is not None:  # issue 4: the balance is checked again at placement
                row.desired_state = DesiredState.STOPPED
                switch_instance_status(session, row, S.STOPPED, f"not started: {refused}", now)
                return False
            for gpu_id in placement.gpu_uuids:
                session.add(GpuAllocationModel(gpu_id=gpu_id, instance_id=row.id, allocated_at=now))
            row.placed, row.host_id = True, placement.host_id
            session.flush()
            new_status = S.CREATING if row.status == S.PENDING else S.STARTING
            reason = "placed; starting the container"
            if row.status == S.MIGRATING:
                reason = "placed on healthy GPUs; moving"
            switch_instance_status(session, row, new_status, reason, now)
    except IntegrityError:
        log.info("placement of %s lost a race for a GPU; will retry", instance.id)
        return False
    ctx.wake_reconciler()
    return True


def _after(
    snapshot: list[HostCapacity], placement: Placement, request: PlacementRequest
) -> list[HostCapacity]:
    taken = set(placement.gpu_uuids)
    return [
        replace(
            host,
            free_cpus=host.free_cpus - request.cpus,
            free_memory_gb=host.free_memory_gb - request.memory_gb,
            free_gpus=tuple(g for g in host.free_gpus if g.uuid not in taken),
        )
        if host.host_id == placement.host_id
        else host
        for host in snapshot
    ]


# -- health of running instances -----------------------------------------------------
def check_running(ctx: ServiceContext) -> None:
    """Restart containers that exited on their own; recreate vanished ones."""
    # Rows first: a row that says running now had its container started before the listing.
    with ctx.sessions() as session:
        running = session.scalars(
            select(InstanceModel).where(
                InstanceModel.status == S.RUNNING,
                InstanceModel.desired_state == DesiredState.RUNNING,
                InstanceModel.lock_token.is_(None),
            )
        ).all()
    try:
        labels = containers.cluster_labels(ctx.cluster_id)
        found = {c.name: c for c in ctx.runtime.list_containers(labels)}
    except GpudockError as exc:
        log.warning("health check skipped: %s", exc)
        return
    for instance in running:
        container = found.get(containers.container_name(ctx.cluster_id, instance.id))
        if container is None or not container.running:
            _recover(ctx, instance.id, container is None)


def _recover(ctx: ServiceContext, instance_id: str, vanished: bool) -> None:
    reason = "container disappeared; recreating" if vanished else "container exited; restarting"
    at = ctx.clock() if vanished else _exited_at(ctx, instance_id)
    with ctx.sessions.begin() as session:
        row = session.get(InstanceModel, instance_id, with_for_update=True)
        if row is None or row.status != S.RUNNING or row.lock_token is not None:
            return
        switch_instance_status(session, row, S.CREATING, reason, at)
    ctx.wake_reconciler()


def _exited_at(ctx: ServiceContext, instance_id: str) -> datetime:
    """When the runtime says the container stopped (metering closes there), else now."""
    name = containers.container_name(ctx.cluster_id, instance_id)
    try:
        state = ctx.runtime.inspect_container(name)
    except GpudockError:
        state = None
    if state is None or state.running or state.finished_at is None:
        return ctx.clock()
    return min(state.finished_at, ctx.clock())


# -- garbage: containers and volumes no live instance owns ----------------------------
def collect_garbage(ctx: ServiceContext, *, at_startup: bool = False) -> int:
    """Remove this cluster's containers and volumes whose instance is deleted
    or unknown (and, at start-up, every build's: no build survives a restart).
    Returns how many objects were removed."""
    labels = containers.cluster_labels(ctx.cluster_id)
    try:
        found_containers = ctx.runtime.list_containers(labels)
        found_volumes = ctx.runtime.list_volumes(labels)
    except GpudockError as exc:
        log.warning("garbage collection skipped: %s", exc)
        return 0
    with ctx.sessions() as session:
        live_rows = session.scalars(
            select(InstanceModel).where(InstanceModel.status != S.DELETED)
        ).all()
        live = {row.id for row in live_rows}
        kept_volumes = _volumes_in_use(ctx, session, live_rows)
    removed = 0
    for container in found_containers:
        if LABEL_BUILD in container.labels:
            removed += _collect_build_container(ctx, container, at_startup)
            continue
        owner = container.labels.get("gpudock.instance")
        if (
            owner is not None
            and owner in live
            and container.name != containers.container_name(ctx.cluster_id, owner)
        ):
            if not container.running:  # a data-move helper a crash left behind (issue 6)
                log.info("removing leftover helper container %s", container.name)
                ctx.runtime.remove_container(container.id)
                removed += 1
            continue
        if owner not in live:
            log.info("removing orphan container %s", container.name)
            ctx.runtime.remove_container(container.id)
            removed += 1
    for volume in found_volumes:
        if volume.name not in kept_volumes:
            log.info("removing orphan volume %s", volume.name)
            try:
                ctx.runtime.remove_volume(volume.name)
            except GpudockError as exc:  # still mounted by a container removed later
                log.warning("could not remove volume %s yet: %s", volume.name, exc)
                continue
            removed += 1
    collect_networks(ctx)  # issue 9
    return removed


def _collect_build_container(
    ctx: ServiceContext, container: ContainerState, at_startup: bool
) -> int:
    """A build step's container: its build removes it; one older than any build
    may run was left by a crash."""
    limit = timedelta(seconds=ctx.settings.build_timeout_s + BUILD_GRACE_S)
    young = container.created_at is None or ctx.clock() - container.created_at < limit
    if young and not at_startup:
        return 0
    log.info("removing leftover build container %s", container.name)
    ctx.runtime.remove_container(container.id, keep_network=True)
    return 1


def _volumes_in_use(
    ctx: ServiceContext, session: Session, live_rows: Sequence[InstanceModel]
) -> set[str]:
    """Each live instance's data volume, and the target of a move in progress
    (issue 6: after a move, the volume left on the old host is garbage)."""
    hosts = {h.id: h for h in session.scalars(select(HostModel))}
    kept = set()
    for row in live_rows:
        kept.add(containers.data_volume_of(ctx.cluster_id, row))
        if row.host_id in hosts:
            kept.add(migration.data_volume_on(ctx.cluster_id, row, hosts[row.host_id]))
    return kept


def collect_networks(ctx: ServiceContext) -> None:
    """Remove tenant networks whose tenant has no live instance (the runtime
    keeps any that a container is still on)."""
    try:
        found = ctx.runtime.list_networks(containers.cluster_labels(ctx.cluster_id))
    except GpudockError as exc:
        log.warning("network garbage collection skipped: %s", exc)
        return
    with ctx.sessions() as session:
        tenants = set(
            session.scalars(select(InstanceModel.user_id).where(InstanceModel.status != S.DELETED))
        )
    for network in found:
        if network.labels.get(LABEL_OWNER) in tenants:
            continue
        try:
            ctx.runtime.remove_network(network.name)
        except GpudockError as exc:
            log.warning("could not remove network %s: %s", network.name, exc)
