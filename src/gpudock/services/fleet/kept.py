"""What the fence kept on an agent host, and the operator's say over it.

When a host comes back after its instances moved away (or were deleted) while
it was out of reach, their old containers are stopped, never removed
(`reconcile/fencing.py`): the host may hold the only copy of what a tenant
wrote after the last move — an instance that restarted elsewhere with an
empty data volume left its data there. Here the operator lists those
containers and removes one, with or without its old data volume, once they
have decided nothing in it is needed. A data volume left without its
container (removed without its data) stays listed until it goes too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select

from gpudock.db.models import (
    AgentHostModel,
    HostModel,
    InstanceModel,
    InstanceStatus,
    UserModel,
)
from gpudock.errors import Conflict, InvalidRequest, NotFound
from gpudock.runtime.base import LABEL_INSTANCE, ContainerState, Runtime
from gpudock.services import leases
from gpudock.services.context import ServiceContext
from gpudock.services.instances import container_spec as containers

log = logging.getLogger(__name__)
# An instance settled on another host: nothing of it on this one is in use (a move
# or a start in progress may still be reading this host's copy of its data).
_SETTLED = (InstanceStatus.RUNNING, InstanceStatus.STOPPED, InstanceStatus.FAILED)


@dataclass(frozen=True)
class KeptContainer:
    instance_id: str
    instance_name: str  # "" when the instance is gone from the database
    owner: str
    container: str  # "" when only its data volume is left
    running: bool
    volumes: tuple[str, ...]  # its old data volume(s) on this host
    reason: str  # why it is not the instance's any more


def list_kept(ctx: ServiceContext, host_name: str) -> list[KeptContainer]:
    """The instance containers on agent host `host_name` that are no longer their
    instance's: it lives on another host now, or was deleted."""
    host_id, runtime = _linked_host(ctx, host_name)
    return [kept for kept, _state in _kept_on(ctx, host_id, runtime)]


def remove_kept(
    ctx: ServiceContext, host_name: str, instance_id: str, *, with_data: bool = False
) -> KeptContainer:
    """Remove the container the fence kept for `instance_id` on `host_name` (and its
    old data volume there, `with_data`). Under the instance's lease, after its row
    is read again: a container the instance came back to is never removed."""
    host_id, runtime = _linked_host(ctx, host_name)
    found = {kept.instance_id: (kept, state) for kept, state in _kept_on(ctx, host_id, runtime)}
    if instance_id not in found:
        raise NotFound(
            f"host {host_name} keeps no container of instance {instance_id}: "
            f"`gpudock hosts kept {host_name}` lists what it keeps"
        )
    kept, state = found[instance_id]
    if state is None and not with_data:
        raise InvalidRequest(
            f"only the data volume of instance {instance_id} is left on {host_name}: "
            "remove it with its data (--with-data)",
            field="with_data",
        )
    token = leases.try_lease(ctx, instance_id)
    if token is None and kept.instance_name:
        raise Conflict(f"instance {instance_id} is changing now: try again in a moment")
    try:
        if token is not None and not leases.with_lease(
            ctx, instance_id, token, lambda _session, row: _still_kept(row, host_id)
        ):
            raise Conflict(f"instance {instance_id} is not settled elsewhere now: not removed")
        if state is not None:
            runtime.remove_container(state.id)
        for volume in kept.volumes if with_data else ():
            runtime.remove_volume(volume)
    finally:
        if token is not None:
            leases.release(ctx, instance_id, token)
    log.warning(
        "removed the kept container of instance %s on host %s%s",
        instance_id,
        host_name,
        " and its old data volume" if with_data and kept.volumes else "",
    )
    return kept


def _still_kept(row: InstanceModel, host_id: str) -> bool:
    return row.status == InstanceStatus.DELETED or (
        row.host_id != host_id and row.status in _SETTLED
    )


def _linked_host(ctx: ServiceContext, host_name: str) -> tuple[str, Runtime]:
    with ctx.reader() as session:
        host_id = session.scalar(select(AgentHostModel.id).where(AgentHostModel.name == host_name))
    if host_id is None:
        raise NotFound(f"no agent host {host_name!r}: `gpudock hosts list` shows them")
    if ctx.hosts is None or not ctx.hosts.linked(host_id):
        raise Conflict(
            f"host {host_name}'s agent is not connected to this server: what it keeps "
            "can be seen once its link is up (`gpudock hosts list`)"
        )
    return host_id, ctx.hosts.for_host(host_id)


def _kept_on(
    ctx: ServiceContext, host_id: str, runtime: Runtime
) -> list[tuple[KeptContainer, ContainerState | None]]:
    """Each instance with a container or a data volume here that is not its own any
    more, with that container (None: only its volume is left). Both are known by
    their instance label, whatever a move named the volume."""
    found: dict[str, ContainerState | None] = dict(
        containers.instance_containers(ctx.cluster_id, runtime)
    )
    volumes: dict[str, list[str]] = {}  # by instance: its data volumes here
    for volume in runtime.list_volumes(containers.cluster_labels(ctx.cluster_id)):
        if (owner := volume.labels.get(LABEL_INSTANCE)) is not None:
            volumes.setdefault(owner, []).append(volume.name)
            found.setdefault(owner, None)
    if not found:
        return []
    with ctx.reader() as session:
        rows = {
            row.id: row
            for row in session.scalars(select(InstanceModel).where(InstanceModel.id.in_(found)))
        }
        where = {r.id: r.name for r in session.execute(select(HostModel.id, HostModel.name))}
        users = {row.user_id for row in rows.values()}
        named = select(UserModel.id, UserModel.name).where(UserModel.id.in_(users))
        owners = {r.id: r.name for r in session.execute(named)}
    kept = []
    for instance_id, state in sorted(found.items()):
        row = rows.get(instance_id)
        if row is None or row.status == InstanceStatus.DELETED:
            reason = "the instance was deleted"
        elif row.host_id != host_id and row.status in _SETTLED:
            reason = f"the instance lives on host {where.get(row.host_id or '', '?')} now"
        else:
            continue  # its own (running or stopped), or on its way somewhere
        entry = KeptContainer(
            instance_id=instance_id,
            instance_name=row.name if row is not None else "",
            owner=owners.get(row.user_id, "") if row is not None else "",
            container=state.name if state is not None else "",
            running=state is not None and state.running,
            volumes=tuple(sorted(volumes.get(instance_id, ()))),
            reason=reason,
        )
        kept.append((entry, state))
    return kept
