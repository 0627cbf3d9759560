"""What the server holding an agent's link records: who the agent is, its
heartbeats (with what it reports), and whether its link is up; and which
hosts have gone silent or been heard again (`reconcile.host_loss`).

Every function taking a context is one short transaction, called off the
event loop; those taking a session work in the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpudock.db.models import AgentHostModel, AgentHostState, LinkState
from gpudock.errors import Unauthenticated
from gpudock.link.wire import HostReport
from gpudock.services.agents.hosts import AgentHost, record_report
from gpudock.services.context import ServiceContext


class AgentNotEnrolled(Unauthenticated):
    """An agent key no host holds: never enrolled, or its host was removed."""

    code = "agent_not_enrolled"


def enrolled_host(ctx: ServiceContext, agent_key: str) -> AgentHost | None:
    """The host whose agent holds `agent_key`; None: unknown or removed (revoked)."""
    with ctx.sessions() as session:
        row = session.scalars(
            select(AgentHostModel).where(AgentHostModel.agent_key == agent_key)
        ).first()
        return None if row is None else AgentHost.of(row)


def require_enrolled(ctx: ServiceContext, agent_key: str) -> AgentHost:
    host = enrolled_host(ctx, agent_key)
    if host is None:
        raise AgentNotEnrolled(
            "this agent is not enrolled with this server (its host was removed, or it never "
            "joined): on the server run `gpudock hosts add NAME`, then the join command it "
            "prints on this host"
        )
    return host


def record_link_up(
    ctx: ServiceContext, host_id: str, report: HostReport, peer: str
) -> AgentHost | None:
    """The agent connected and said hello; None: the host is gone meanwhile."""
    with ctx.sessions.begin() as session:
        now = ctx.clock()  # in the write transaction: see `_heard`
        row = session.get(AgentHostModel, host_id)
        if row is None:
            return None
        grown = record_report(session, row, report, now) or row.lost_at is not None
        row.link_state, row.link_changed_at, row.link_peer = LinkState.UP, now, peer
        _heard(row, now)
        session.flush()
        linked = AgentHost.of(row)
    if grown:
        ctx.wake_reconciler()
    return linked


def record_heartbeat(ctx: ServiceContext, host_id: str, report: HostReport) -> bool:
    """False: the host was removed, so its agent is revoked and the link must close."""
    with ctx.sessions.begin() as session:
        now = ctx.clock()  # in the write transaction: see `_heard`
        row = session.get(AgentHostModel, host_id)
        if row is None:
            return False
        grown = record_report(session, row, report, now)
        _heard(row, now)
        if row.link_state is not LinkState.UP:  # another server's drop was written late
            row.link_state, row.link_changed_at = LinkState.UP, row.last_heartbeat_at
        grown |= row.lost_at is not None  # back: the host loss pass restores it
    if grown:
        ctx.wake_reconciler()
    return True


def _heard(row: AgentHostModel, now: datetime) -> None:
    """The last heartbeat never goes back. Two reports of one host can be written in
    either order (each waits its turn for the write lock); a loss pass may already
    have closed billing at the later one, which must stay the host's last."""
    if row.last_heartbeat_at is None or now > row.last_heartbeat_at:
        row.last_heartbeat_at = now


def record_link_down(ctx: ServiceContext, host_id: str, up_since: datetime | None) -> None:
    """The link that came up at `up_since` ended. A newer link of the same agent (it
    redialled before this one was seen gone) wrote a later time: it stays up."""
    with ctx.sessions.begin() as session:
        row = session.get(AgentHostModel, host_id)
        if row is None or row.link_state is not LinkState.UP:
            return
        newer = up_since is not None and row.link_changed_at is not None
        if newer and row.link_changed_at > up_since:  # type: ignore[operator]
            return
        row.link_state, row.link_changed_at = LinkState.DOWN, ctx.clock()


@dataclass(frozen=True)
class Silence:
    """An enrolled host whose agent has not been heard since `last_heard`."""

    host_id: str
    name: str
    last_heard: datetime


def silent_hosts(session: Session, cutoff: datetime) -> list[Silence]:
    """Enrolled hosts not yet lost whose last heartbeat is older than `cutoff`."""
    rows = session.execute(
        select(AgentHostModel.id, AgentHostModel.name, AgentHostModel.last_heartbeat_at).where(
            AgentHostModel.state != AgentHostState.PENDING,
            AgentHostModel.lost_at.is_(None),
            AgentHostModel.last_heartbeat_at < cutoff,
        )
    )
    return [Silence(host_id, name, heard) for host_id, name, heard in rows if heard is not None]


def heard_again(session: Session) -> list[str]:
    """Ids of lost hosts whose agent has sent a heartbeat since."""
    return list(
        session.scalars(
            select(AgentHostModel.id).where(
                AgentHostModel.lost_at.is_not(None),
                AgentHostModel.last_heartbeat_at >= AgentHostModel.lost_at,
            )
        )
    )


def mark_lost(session: Session, host_id: str, cutoff: datetime, at: datetime) -> Silence | None:
    """Declare the host lost, if it is still silent and no other server did
    first (a guarded update, in the caller's transaction); None otherwise."""
    marked = session.execute(
        update(AgentHostModel)
        .where(
            AgentHostModel.id == host_id,
            AgentHostModel.lost_at.is_(None),
            AgentHostModel.last_heartbeat_at < cutoff,
        )
        .values(lost_at=at)
    )
    if marked.rowcount != 1:  # type: ignore[attr-defined]
        return None
    row = session.get(AgentHostModel, host_id, populate_existing=True)
    assert row is not None and row.last_heartbeat_at is not None, "a silent host was heard once"
    return Silence(row.id, row.name, row.last_heartbeat_at)


def mark_found(session: Session, host_id: str) -> str | None:
    """The lost host was heard again: no longer lost (guarded as `mark_lost`); its name."""
    found = session.execute(
        update(AgentHostModel)
        .where(
            AgentHostModel.id == host_id,
            AgentHostModel.lost_at.is_not(None),
            AgentHostModel.last_heartbeat_at >= AgentHostModel.lost_at,
        )
        .values(lost_at=None)
    )
    if found.rowcount != 1:  # type: ignore[attr-defined]
        return None
    return session.scalar(select(AgentHostModel.name).where(AgentHostModel.id == host_id))


def heard_since(session: Session, cutoff: datetime) -> list[tuple[str, str]]:
    """(id, name) of enrolled hosts not lost whose agent was heard after `cutoff`."""
    rows = session.execute(
        select(AgentHostModel.id, AgentHostModel.name).where(
            AgentHostModel.state != AgentHostState.PENDING,
            AgentHostModel.lost_at.is_(None),
            AgentHostModel.last_heartbeat_at >= cutoff,
        )
    )
    return [(host_id, name) for host_id, name in rows]
