"""Garbage: this installation's containers, volumes and networks that no live
instance owns (also at start-up), data volumes left on a host an instance
moved away from (on this server's engine; on an agent host they stay for the
operator, since a host back from a loss may hold the only copy), stopped
data-move helpers, and build and check containers a crash left.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models import (
    HostModel,
    InstanceModel,
    InstanceStatus,
)
from gpudock.errors import GpudockError
from gpudock.runtime.base import (
    LABEL_BUILD,
    LABEL_CHECK,
    LABEL_INSTANCE,
    LABEL_OWNER,
    ContainerState,
    NetworkState,
    Runtime,
    VolumeState,
)
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import moves as migration
from gpudock.services.instances import container_spec as containers

log = logging.getLogger(__name__)
S = InstanceStatus
GRACE_S = 60.0  # past a build's or check's time limit, before its containers count as leftovers


class _LiveInstance(NamedTuple):
    """The columns that name a live instance's data volumes: the pass reads
    every live instance, and ORM objects for them cost it most of its time."""

    id: str
    host_id: str | None
    data_volume: str | None
    data_host_id: str | None


def collect_garbage(ctx: ServiceContext, *, at_startup: bool = False) -> int:
    """Remove this cluster's containers and volumes whose instance is deleted
    or unknown (and, at start-up, every build's and check's: none survives a
    restart), on this server's engine and each linked agent host's. Returns
    how many objects were removed."""
    labels = containers.cluster_labels(ctx.cluster_id)
    found: list[tuple[Runtime, list[ContainerState], list[VolumeState]]] = []
    for runtime in ctx.every_engine():  # listed before the rows are read: see _collect_on
        try:
            found.append((runtime, runtime.list_containers(labels), runtime.list_volumes(labels)))
        except GpudockError as exc:
            log.warning("garbage collection skipped on one engine: %s", exc)
    with ctx.sessions() as session:
        live_rows = [
            _LiveInstance(*row)
            for row in session.execute(
                select(
                    InstanceModel.id,
                    InstanceModel.host_id,
                    InstanceModel.data_volume,
                    InstanceModel.data_host_id,
                ).where(InstanceModel.status != S.DELETED)
            )
        ]
        live = {row.id for row in live_rows}
        kept_volumes = _volumes_in_use(ctx, session, live_rows)
    removed = 0
    for runtime, found_containers, found_volumes in found:
        try:
            removed += _collect_containers(ctx, runtime, found_containers, live, at_startup)
            # On an agent host the data of a live instance that moved away stays
            # until the operator removes it: the host may come back from a loss
            # with the only copy of what the tenant wrote after the last move.
            spared = live if runtime is not ctx.runtime else set()
            removed += _collect_volumes(runtime, found_volumes, kept_volumes, spared)
        except GpudockError as exc:
            log.warning("garbage collection stopped on one engine: %s", exc)
    collect_networks(ctx)
    return removed


def _collect_containers(
    ctx: ServiceContext,
    runtime: Runtime,
    found: list[ContainerState],
    live: set[str],
    at_startup: bool,
) -> int:
    """What `runtime` listed before the live rows were read: an instance made
    since then has no container in the list, so none is taken for an orphan."""
    removed = 0
    for container in found:
        if container.labels.get(LABEL_BUILD) or LABEL_CHECK in container.labels:
            removed += _collect_throwaway(ctx, runtime, container, at_startup)
            continue
        owner = container.labels.get("gpudock.instance")
        if (
            owner is not None
            and owner in live
            and container.name != containers.container_name(ctx.cluster_id, owner)
        ):
            if not container.running:  # a data-move helper a crash left behind
                log.info("removing leftover helper container %s", container.name)
                runtime.remove_container(container.id)
                removed += 1
            continue
        if owner not in live:
            log.info("removing orphan container %s", container.name)
            runtime.remove_container(container.id)
            removed += 1
    return removed


def _collect_volumes(
    runtime: Runtime, found: list[VolumeState], kept: set[str], spared_owners: set[str]
) -> int:
    removed = 0
    for volume in found:
        if volume.labels.get(LABEL_INSTANCE) in spared_owners and volume.name not in kept:
            log.info("keeping volume %s of a live instance that moved off this host", volume.name)
            continue
        if volume.name not in kept:
            log.info("removing orphan volume %s", volume.name)
            try:
                runtime.remove_volume(volume.name)
            except GpudockError as exc:  # still mounted by a container removed later
                log.warning("could not remove volume %s yet: %s", volume.name, exc)
                continue
            removed += 1
    return removed


def _collect_throwaway(
    ctx: ServiceContext, runtime: Runtime, container: ContainerState, at_startup: bool
) -> int:
    """A build step's or a check's container: what made it removes it; one
    older than its time limit was left by a crash."""
    limit = timedelta(seconds=_time_limit_s(ctx, container) + GRACE_S)
    young = container.created_at is None or ctx.clock() - container.created_at < limit
    if young and not at_startup:
        return 0
    log.info("removing leftover container %s", container.name)
    runtime.remove_container(container.id, keep_network=True)
    return 1


def _time_limit_s(ctx: ServiceContext, container: ContainerState) -> float:
    """A check's limit is on its label; a build's is the setting's."""
    if LABEL_CHECK in container.labels:
        try:
            return float(container.labels[LABEL_CHECK])
        except ValueError:
            pass  # not written by `run_once`: judged by the builds' limit
    return ctx.settings.build_timeout_s


def _volumes_in_use(
    ctx: ServiceContext, session: Session, live_rows: Sequence[_LiveInstance]
) -> set[str]:
    """Each live instance's data volume, and the target of a move in progress
    (after a move, the volume left on the old host is garbage)."""
    hosts = {h.id: h for h in session.scalars(select(HostModel))}
    kept = set()
    for row in live_rows:
        kept.add(containers.data_volume_of(ctx.cluster_id, row))
        if row.host_id in hosts:
            kept.add(migration.data_volume_on(ctx.cluster_id, row, hosts[row.host_id]))
    return kept


def collect_networks(ctx: ServiceContext) -> None:
    """Remove tenant networks whose tenant has no live instance (the runtime
    keeps any that a container is still on), on every engine."""
    labels = containers.cluster_labels(ctx.cluster_id)
    found: list[tuple[Runtime, list[NetworkState]]] = []
    for runtime in ctx.every_engine():
        try:
            found.append((runtime, runtime.list_networks(labels)))
        except GpudockError as exc:
            log.warning("network garbage collection skipped on one engine: %s", exc)
    with ctx.sessions() as session:
        tenants = set(
            session.scalars(select(InstanceModel.user_id).where(InstanceModel.status != S.DELETED))
        )
    for runtime, networks in found:
        for network in networks:
            if network.labels.get(LABEL_OWNER) in tenants:
                continue
            try:
                runtime.remove_network(network.name)
            except GpudockError as exc:
                log.warning("could not remove network %s: %s", network.name, exc)
