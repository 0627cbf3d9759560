"""Enrolled hosts as the operator sees and changes them: add, list, drain, remove.

A host's state changes only here (`switch_host_state`); the link's records
(heartbeats, link state, reported GPUs) are written by `links.py`.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpudock import syntax
from gpudock.db.models import AgentHostModel, AgentHostState, JoinTokenModel, LinkState
from gpudock.errors import Conflict, InvalidRequest, NotFound
from gpudock.gpu.base import GpuInfo, HostInfo
from gpudock.link.tokens import JoinToken, secret_hash
from gpudock.link.wire import GpuReport, HostReport
from gpudock.services.agents import server_key
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import agent_inventory

_HOST_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_TRANSITIONS = {
    AgentHostState.PENDING: {AgentHostState.ACTIVE},
    AgentHostState.ACTIVE: {AgentHostState.DRAINING},
    AgentHostState.DRAINING: {AgentHostState.ACTIVE},
}


@dataclass(frozen=True)
class AgentHost:
    id: str
    name: str
    state: AgentHostState
    link_state: LinkState
    link_changed_at: datetime | None
    link_peer: str
    last_heartbeat_at: datetime | None
    agent_version: str
    engine_version: str
    driver_version: str
    gpus: tuple[GpuReport, ...]
    created_at: datetime
    enrolled_at: datetime | None
    labels: dict[str, str]
    lost_at: datetime | None

    @classmethod
    def of(cls, row: AgentHostModel) -> AgentHost:
        return cls(
            id=row.id,
            name=row.name,
            state=row.state,
            link_state=row.link_state,
            link_changed_at=row.link_changed_at,
            link_peer=row.link_peer,
            last_heartbeat_at=row.last_heartbeat_at,
            agent_version=row.agent_version,
            engine_version=row.engine_version,
            driver_version=row.driver_version,
            gpus=tuple(GpuReport.model_validate(gpu) for gpu in json.loads(row.gpus)),
            created_at=row.created_at,
            enrolled_at=row.enrolled_at,
            labels=json.loads(row.labels or "{}"),
            lost_at=row.lost_at,
        )


@dataclass(frozen=True)
class HostInvitation:
    """A host added and the command that enrolls its agent (shown once)."""

    host: AgentHost
    token: JoinToken
    expires_at: datetime
    join_command: str


def add_host(
    ctx: ServiceContext, name: str, labels: dict[str, str] | None = None
) -> HostInvitation:
    """Record host `name` as pending (with `labels`) and issue its one-time join
    token. Adding a pending host again issues a fresh token and voids the earlier
    ones; labels given then replace its labels."""
    link_url = server_key.link_url(ctx.settings)
    if not _HOST_NAME.fullmatch(name):
        raise InvalidRequest(
            f"bad host name {name!r}: use 1–63 lower-case letters, digits and '-', "
            "starting and ending with a letter or digit",
            field="name",
        )
    _check_labels(labels or {})
    token = JoinToken.new(server_key.server_fingerprint(ctx.settings))
    now = ctx.clock()
    expires_at = now + timedelta(seconds=ctx.settings.agent_join_token_ttl_s)
    with ctx.sessions.begin() as session:
        row = session.scalars(select(AgentHostModel).where(AgentHostModel.name == name)).first()
        if row is not None and row.state is not AgentHostState.PENDING:
            raise Conflict(
                f"host {name!r} is enrolled already; to enroll it again, "
                f"`gpudock hosts remove {name}` first",
                field="name",
            )
        if row is None:
            row = _new_host(session, name, now)
        if labels is not None:
            row.labels = json.dumps(labels, sort_keys=True)
        session.execute(delete(JoinTokenModel).where(JoinTokenModel.host_id == row.id))
        session.add(
            JoinTokenModel(
                id=token.token_id,
                host_id=row.id,
                secret_hash=secret_hash(token.secret),
                created_at=now,
                expires_at=expires_at,
            )
        )
        session.flush()
        host = AgentHost.of(row)
    command = f"gpudock agent join {link_url} {token}"
    return HostInvitation(host, token, expires_at, command)


def _new_host(session: Session, name: str, now: datetime) -> AgentHostModel:
    row = AgentHostModel(
        id=agent_inventory.host_id_for(session, name) or secrets.token_hex(8),
        name=name,
        state=AgentHostState.PENDING,
        link_state=LinkState.NONE,
        agent_version="",
        engine_version="",
        driver_version="",
        gpus="[]",
        link_peer="",
        created_at=now,
    )
    session.add(row)
    return row


def list_hosts(ctx: ServiceContext) -> list[AgentHost]:
    with ctx.sessions() as session:
        rows = session.scalars(select(AgentHostModel).order_by(AgentHostModel.name))
        return [AgentHost.of(row) for row in rows]


def get_host(ctx: ServiceContext, name: str) -> AgentHost:
    with ctx.sessions() as session:
        return AgentHost.of(_find(session, name))


def drain_host(ctx: ServiceContext, name: str, *, draining: bool = True) -> AgentHost:
    """Draining: the host keeps its tenants and takes no new ones (`draining=False` undoes it)."""
    with ctx.sessions.begin() as session:
        row = _find(session, name)
        wanted = AgentHostState.DRAINING if draining else AgentHostState.ACTIVE
        if row.state is not wanted:
            switch_host_state(row, wanted)
        return AgentHost.of(row)


def label_host(
    ctx: ServiceContext, name: str, labels: dict[str, str], remove: tuple[str, ...] = ()
) -> AgentHost:
    """Set `labels` on the host (a key it has takes the new value) and take the
    keys in `remove` off; instances placed from now on see the new labels, the
    ones running there stay."""
    with ctx.sessions.begin() as session:
        row = _find(session, name)
        merged = {k: v for k, v in json.loads(row.labels or "{}").items() if k not in remove}
        merged.update(labels)
        _check_labels(merged)
        row.labels = json.dumps(merged, sort_keys=True)
        return AgentHost.of(row)


def _check_labels(labels: dict[str, str]) -> None:
    problem = syntax.labels_problem(labels)
    if problem is not None:
        raise InvalidRequest(problem, field="labels")


def remove_host(ctx: ServiceContext, name: str) -> AgentHost:
    """Forget the host: its agent's key is no longer accepted, and the server
    holding its link closes it at the next heartbeat. Its inventory rows stay,
    absent; the instances running there are unreachable (`agent_inventory`)."""
    with ctx.sessions.begin() as session:
        row = _find(session, name)
        removed = AgentHost.of(row)
        agent_inventory.retire_agent_host(session, row.id, ctx.clock())
        session.delete(row)
    return removed


def record_report(session: Session, row: AgentHostModel, report: HostReport, at: datetime) -> bool:
    """What the agent reported of its host (every heartbeat: GPUs come and go), here
    and in the scheduler's inventory once the host is enrolled. True: capacity
    grew (a new host or GPU, one back), so placement should run."""
    gpus = json.dumps([gpu.model_dump() for gpu in report.gpus])
    same_gpus = gpus == row.gpus
    row.agent_version = report.agent_version[:32]
    row.engine_version = report.engine_version[:32]
    row.driver_version = report.driver_version[:32]
    row.gpus = gpus
    if row.state is AgentHostState.PENDING:
        return False
    info = _host_info(row.name, report)
    if same_gpus and agent_inventory.is_recorded(session, row.id, info):
        return False  # the heartbeat of a host that did not change: nothing to write
    return agent_inventory.sync_agent_host(session, row.id, info, at)


def _host_info(name: str, report: HostReport) -> HostInfo:
    gpus = tuple(
        GpuInfo(
            uuid=gpu.uuid,
            index=gpu.index,
            model=gpu.model,
            memory_mb=gpu.memory_mb,
            pci_bus_id=gpu.pci_bus_id,
            numa_node=gpu.numa_node,
            nvlink_peers=tuple(gpu.nvlink_peers),
        )
        for gpu in report.gpus
    )
    return HostInfo(
        name=name,
        cpus=report.cpus,
        memory_gb=report.memory_gb,
        driver_version=report.driver_version[:32],
        cuda_version=report.cuda_version[:16],
        simulated=False,
        gpus=gpus,
    )


def switch_host_state(row: AgentHostModel, new: AgentHostState) -> None:
    """The one writer of `AgentHostModel.state`."""
    if new not in _TRANSITIONS[row.state]:
        if row.state is AgentHostState.PENDING:
            raise Conflict(
                f"host {row.name!r} has no agent yet: run the join command "
                f"`gpudock hosts add {row.name}` printed on it first"
            )
        raise Conflict(f"host {row.name!r} is {row.state.value}; it cannot become {new.value}")
    row.state = new


def _find(session: Session, name: str) -> AgentHostModel:
    row = session.scalars(select(AgentHostModel).where(AgentHostModel.name == name)).first()
    if row is None:
        raise NotFound(f"no host named {name!r}: `gpudock hosts list` shows them")
    return row
