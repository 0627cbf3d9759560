"""The host loss pass: an agent host silent for `GPUDOCK_HOST_LOST_AFTER_S` is
lost, and found again when its agent heartbeats.

Lost: its GPUs are faulted and unhealthy (`services.fleet.host_outage`), its
instances follow their policy (`services.instances.host_loss`: wait, billed
up to the last heartbeat only, or restart elsewhere), their owners are told.
Found: the GPUs are healthy again and the instances that waited run again;
so do those of a host that was removed while they ran and is enrolled again.
Each host is one transaction, guarded on `agent_hosts.lost_at`, so two
servers never declare one loss twice.

A server that has just started waits `GPUDOCK_HOST_LOST_AFTER_S` before it
declares anything: while it was down no server heard any agent, which says
nothing about the hosts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpudock.services.agents import links
from gpudock.services.context import ServiceContext
from gpudock.services.fleet.host_outage import bring_back_host, take_out_host
from gpudock.services.instances import host_loss

log = logging.getLogger(__name__)


@dataclass
class LossWatch:
    """When this server began to watch (the first pass)."""

    since: datetime | None = None


def host_loss_pass(ctx: ServiceContext, watch: LossWatch) -> None:
    now = ctx.clock()
    watch.since = watch.since or now
    after = timedelta(seconds=ctx.settings.host_lost_after_s)
    with ctx.reader() as session:
        silent = links.silent_hosts(session, now - after) if now - watch.since >= after else []
        back = links.heard_again(session)
        heard = dict(links.heard_since(session, now - after))
        stranded = host_loss.stranded_on(session, list(heard))
    for host in silent:
        _declare_lost(ctx, host.host_id, now - after)
    for host_id in back:
        _bring_back(ctx, host_id)
    for host_id in stranded:  # removed while they ran there, and enrolled again
        _resume(ctx, host_id, heard[host_id])


def _declare_lost(ctx: ServiceContext, host_id: str, cutoff: datetime) -> None:
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        lost = links.mark_lost(session, host_id, cutoff, now)
        if lost is None:
            return
        waited = f"{ctx.settings.host_lost_after_s:g}"
        message = f"host {lost.name} lost: no heartbeat from its agent for {waited} s"
        instances = host_loss.on_host_lost(session, host_id, lost.name, lost.last_heard, now)
        take_out_host(session, host_id, message, "link", now)
    log.error("%s; %d instance(s) on it", message, len(instances))
    ctx.wake_reconciler()  # those restarting elsewhere wait for placement


def _bring_back(ctx: ServiceContext, host_id: str) -> None:
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        name = links.mark_found(session, host_id)
        if name is None:
            return
        resumed = host_loss.on_host_back(session, host_id, name, now)
        bring_back_host(session, host_id, f"host {name} is back: its agent heartbeats again", now)
    log.warning("host %s is back; %d instance(s) running again", name, resumed)
    ctx.wake_reconciler()


def _resume(ctx: ServiceContext, host_id: str, name: str) -> None:
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        resumed = host_loss.on_host_back(session, host_id, name, now)
        bring_back_host(session, host_id, f"host {name} was enrolled again", now)
    log.warning("host %s enrolled again; %d instance(s) running again", name, resumed)
