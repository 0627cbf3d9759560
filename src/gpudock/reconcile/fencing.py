"""Fencing on return: an agent host whose link comes up again may still run the
container of an instance that is no longer meant to run there: it was moved to
another host while this one could not be reached (its old copy could not be
stopped then), or it was stopped or failed meanwhile. Each such container is
stopped, never removed: the operator decides about what it holds (the host may
have the only copy of what the tenant wrote after the last move), and garbage
collection keeps a live instance's container and volumes on an agent host.

A host is checked when its link is new (each link-up) and once a minute while
it stays up. Each stop is made holding the instance's lease, after the row is
read again under it, so no lifecycle step of that instance runs meanwhile and
a container the instance has come back to is never stopped.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models import InstanceModel, InstanceStatus
from gpudock.errors import GpudockError
from gpudock.runtime.base import LABEL_INSTANCE, ContainerState, Runtime
from gpudock.services import leases
from gpudock.services.context import ServiceContext
from gpudock.services.instances import container_spec as containers

log = logging.getLogger(__name__)
S = InstanceStatus
RECHECK_S = 60.0  # a host whose link stays up is looked at again this often
NOT_MEANT_TO_RUN = (S.STOPPED, S.FAILED, S.DELETED)


@dataclass
class FenceWatch:
    """Per host: the link it was last checked over, and when (monotonic)."""

    checked: dict[str, tuple[object, float]] = field(default_factory=dict)


def fence_pass(ctx: ServiceContext, watch: FenceWatch) -> int:
    """Stop what runs where it should not, on each agent host due a check; how
    many containers were stopped."""
    if ctx.hosts is None:
        return 0
    stopped = 0
    now = time.monotonic()
    for host_id, runtime, link in ctx.hosts.linked_engines():
        last = watch.checked.get(host_id)
        if last is not None and last[0] is link and now - last[1] < RECHECK_S:
            continue
        try:
            stopped += _fence_host(ctx, host_id, runtime)
        except GpudockError as exc:
            log.warning("fencing skipped on host %s for now: %s", host_id, exc)
            continue
        watch.checked[host_id] = (link, now)
    return stopped


def _fence_host(ctx: ServiceContext, host_id: str, runtime: Runtime) -> int:
    running = {
        owner: container
        for owner, container in containers.instance_containers(ctx.cluster_id, runtime).items()
        if container.running
    }
    if not running:
        return 0
    with ctx.reader() as session:
        rows = session.scalars(select(InstanceModel).where(InstanceModel.id.in_(running))).all()
        astray = [row.id for row in rows if not _meant_to_run_on(row, host_id)]
    return sum(_fence(ctx, host_id, runtime, running[i]) for i in astray)


def _meant_to_run_on(instance: InstanceModel, host_id: str) -> bool:
    return instance.host_id == host_id and instance.status not in NOT_MEANT_TO_RUN


def _fence(ctx: ServiceContext, host_id: str, runtime: Runtime, container: ContainerState) -> int:
    instance_id = container.labels[LABEL_INSTANCE]
    token = leases.try_lease(ctx, instance_id)
    if token is None:
        return 0  # a step of it is under way: the next check looks again

    def still_astray(session: Session, instance: InstanceModel) -> bool:
        return not _meant_to_run_on(instance, host_id)

    try:
        if not leases.with_lease(ctx, instance_id, token, still_astray):
            return 0
        runtime.stop_container(container.id, ctx.settings.stop_timeout_s)
    finally:
        leases.release(ctx, instance_id, token)
    log.warning(
        "fenced instance %s on host %s: its container ran there though the instance is "
        "not meant to (moved away or stopped while the host was out of reach); stopped, "
        "kept for the operator",
        instance_id,
        host_id,
    )
    return 1
