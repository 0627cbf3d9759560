"""Redeeming a join token: the agent that presents it is pinned to its host.

A token is good once, until it expires, and only for the host it was issued
for; the redemption marks it used in the same transaction that records the
agent's key, so two agents racing with one token cannot both enroll.
"""

from __future__ import annotations

import hmac

from sqlalchemy import select, update

from gpudock.db.models import AgentHostModel, AgentHostState, JoinTokenModel, LinkState
from gpudock.errors import Unauthenticated
from gpudock.link.tokens import secret_hash
from gpudock.link.wire import HostReport, JoinRequest
from gpudock.services.agents.hosts import AgentHost, record_report, switch_host_state
from gpudock.services.context import ServiceContext

_NEW_COMMAND = "ask the administrator for a new join command (`gpudock hosts add NAME`)"


class JoinRefused(Unauthenticated):
    """A join token that is unknown, wrong, expired or used; `reason` says which."""

    code = "join_refused"


def redeem(
    ctx: ServiceContext, join: JoinRequest, agent_key: str, report: HostReport, peer: str
) -> AgentHost:
    """Enroll the agent whose pinned key is `agent_key` with the token's host."""
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        token = session.get(JoinTokenModel, join.token_id)
        if token is None or not hmac.compare_digest(token.secret_hash, secret_hash(join.secret)):
            raise JoinRefused(f"the join token is not valid; {_NEW_COMMAND}", reason="unknown")
        if token.used_at is not None:
            raise JoinRefused(
                f"the join token was used already (at {token.used_at:%Y-%m-%d %H:%M:%S} UTC); "
                f"each one enrolls one agent once, so {_NEW_COMMAND}",
                reason="used",
            )
        if token.expires_at <= now:
            raise JoinRefused(
                f"the join token expired at {token.expires_at:%Y-%m-%d %H:%M:%S} UTC; "
                f"{_NEW_COMMAND}",
                reason="expired",
            )
        claimed = session.execute(
            update(JoinTokenModel)
            .where(JoinTokenModel.id == token.id, JoinTokenModel.used_at.is_(None))
            .values(used_at=now)
        )
        host = session.get(AgentHostModel, token.host_id)
        if claimed.rowcount != 1 or host is None or host.state is not AgentHostState.PENDING:  # type: ignore[attr-defined]
            raise JoinRefused(f"the join token was used already; {_NEW_COMMAND}", reason="used")
        taken = session.scalars(
            select(AgentHostModel.name).where(AgentHostModel.agent_key == agent_key)
        ).first()
        if taken is not None:
            raise JoinRefused(
                f"this agent is enrolled already as host {taken!r}; to move it, "
                f"`gpudock hosts remove {taken}` first",
                reason="enrolled",
            )
        host.agent_key = agent_key
        host.enrolled_at = now
        switch_host_state(host, AgentHostState.ACTIVE)
        record_report(session, host, report, now)
        host.link_state, host.link_changed_at, host.link_peer = LinkState.UP, now, peer
        host.last_heartbeat_at = now
        session.flush()
        enrolled = AgentHost.of(host)
    ctx.wake_reconciler()  # its GPUs are placeable now
    return enrolled
