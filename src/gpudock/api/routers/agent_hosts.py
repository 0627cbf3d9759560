"""Hosts with a gpudock agent (admin): add (with its join command), list, label,
drain, remove."""

from __future__ import annotations

from fastapi import APIRouter

from gpudock.api.deps import AdminUser, Context
from gpudock.api.errors import error_responses
from gpudock.api.host_schemas import (
    AgentGpuPublic,
    AgentHostCreateRequest,
    AgentHostInvitationPublic,
    AgentHostLabelsRequest,
    AgentHostPublic,
    KeptContainerPublic,
)
from gpudock.services.agents import hosts
from gpudock.services.agents.hosts import AgentHost
from gpudock.services.fleet import kept

router = APIRouter(prefix="/agent-hosts", tags=["hosts"])


def _public(host: AgentHost) -> AgentHostPublic:
    return AgentHostPublic(
        name=host.name,
        state=host.state.value,
        link_state=host.link_state.value,
        link_changed_at=host.link_changed_at,
        link_peer=host.link_peer,
        last_heartbeat_at=host.last_heartbeat_at,
        agent_version=host.agent_version,
        engine_version=host.engine_version,
        driver_version=host.driver_version,
        gpus=[AgentGpuPublic(**gpu.model_dump()) for gpu in host.gpus],
        created_at=host.created_at,
        enrolled_at=host.enrolled_at,
        labels=host.labels,
        lost_at=host.lost_at,
    )


@router.post(
    "",
    response_model=AgentHostInvitationPublic,
    status_code=201,
    responses=error_responses(409),
)
def add_host(
    ctx: Context, _admin: AdminUser, body: AgentHostCreateRequest
) -> AgentHostInvitationPublic:
    """Add a host and get the one-time command that enrolls its agent. Adding a host
    that has no agent yet again gives a new command and voids the earlier one."""
    invitation = hosts.add_host(ctx, body.name, body.labels)
    return AgentHostInvitationPublic(
        host=_public(invitation.host),
        join_command=invitation.join_command,
        expires_at=invitation.expires_at,
    )


@router.get("", response_model=list[AgentHostPublic])
def list_hosts(ctx: Context, _admin: AdminUser) -> list[AgentHostPublic]:
    """Every added host: its agent, link, last heartbeat and GPUs."""
    return [_public(host) for host in hosts.list_hosts(ctx)]


@router.get("/{name}", response_model=AgentHostPublic, responses=error_responses(404))
def get_host(ctx: Context, _admin: AdminUser, name: str) -> AgentHostPublic:
    return _public(hosts.get_host(ctx, name))


@router.post("/{name}/labels", response_model=AgentHostPublic, responses=error_responses(404))
def label_host(
    ctx: Context, _admin: AdminUser, name: str, body: AgentHostLabelsRequest
) -> AgentHostPublic:
    """Set labels (a key the host has takes the new value) and take others off;
    placement from now on sees them."""
    return _public(hosts.label_host(ctx, name, body.set, tuple(body.remove)))


@router.post("/{name}/drain", response_model=AgentHostPublic, responses=error_responses(404, 409))
def drain_host(ctx: Context, _admin: AdminUser, name: str) -> AgentHostPublic:
    """The host keeps its instances and takes no new ones."""
    return _public(hosts.drain_host(ctx, name))


@router.post("/{name}/undrain", response_model=AgentHostPublic, responses=error_responses(404, 409))
def undrain_host(ctx: Context, _admin: AdminUser, name: str) -> AgentHostPublic:
    """The host takes new instances again."""
    return _public(hosts.drain_host(ctx, name, draining=False))


@router.delete("/{name}", response_model=AgentHostPublic, responses=error_responses(404))
def remove_host(ctx: Context, _admin: AdminUser, name: str) -> AgentHostPublic:
    """Forget the host and revoke its agent: its key is refused from now on and
    its live link closes at its next heartbeat."""
    return _public(hosts.remove_host(ctx, name))


@router.get(
    "/{name}/kept", response_model=list[KeptContainerPublic], responses=error_responses(404, 409)
)
def list_kept(ctx: Context, _admin: AdminUser, name: str) -> list[KeptContainerPublic]:
    """Containers the fence stopped and kept on the host (their instances moved away
    or were deleted while it was out of reach); its link must be up."""
    return [
        KeptContainerPublic.model_validate(k, from_attributes=True)
        for k in kept.list_kept(ctx, name)
    ]


@router.delete(
    "/{name}/kept/{instance_id}",
    response_model=KeptContainerPublic,
    responses=error_responses(404, 409),
)
def remove_kept(
    ctx: Context, _admin: AdminUser, name: str, instance_id: str, with_data: bool = False
) -> KeptContainerPublic:
    """Remove one kept container (`with_data`: its old data volume on the host too)."""
    removed = kept.remove_kept(ctx, name, instance_id, with_data=with_data)
    return KeptContainerPublic.model_validate(removed, from_attributes=True)
