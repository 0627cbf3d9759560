"""Operator pages (admins only): hosts and GPUs with their tenants, hosts with
agents and what the fence kept on them; users and their states."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, Response

from gpudock.billing.money import format_amount
from gpudock.errors import Conflict, GpudockError, InvalidRequest, NotFound
from gpudock.gpu.xid import XID_RULES
from gpudock.messages import Message
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import states as user_states
from gpudock.services.accounts import users
from gpudock.services.accounts.logins import WebSession
from gpudock.services.agents import hosts as agent_hosts
from gpudock.services.agents.hosts import AgentHost
from gpudock.services.context import ServiceContext
from gpudock.services.fleet import inventory, kept
from gpudock.services.fleet.kept import KeptContainer
from gpudock.services.instances import overview
from gpudock.web.deps import AdminCsrfViewer, AdminViewer, ConsoleRoute, Context, render

router = APIRouter(prefix="/admin", route_class=ConsoleRoute, include_in_schema=False)


HOST_STATES = {
    "pending": "waiting for its agent",
    "active": "active",
    "draining": "draining",
    "lost": "lost",
}
LINK_STATES = {"up": "link up", "down": "link down", "none": "never linked"}
# What the fence kept changes rarely (a host's return, a removal) and costs calls over
# the host's link: each host's list is a fragment of its own, not part of the 2 s refresh.
KEPT_REFRESH_S = 30


def hosts_values(ctx: ServiceContext) -> dict[str, Any]:
    """Hosts with their GPUs, and for each allocated GPU its instance and owner;
    the hosts with agents, with their link, agent and labels."""
    agents = agent_hosts.list_hosts(ctx)
    return {
        "agents": agents,
        "agent_gpus": {a.id: _gpu_summary(a) for a in agents},
        "agent_ids": {a.id for a in agents},
        "host_states": HOST_STATES,
        "link_states": LINK_STATES,
        "hosts": inventory.list_hosts(ctx),
        "tenants": overview.gpu_tenants(ctx),
        "gpu_health": True,
        "xids": XID_RULES.values(),
        "fault_error": None,
        "fault_form": {},
        "kept_done": None,
        "kept_error": None,
    }


def _gpu_summary(host: AgentHost) -> str:
    """'2 × H100-80GB, 1 × A100-80GB' as its agent reports them; '' for none."""
    models = Counter(gpu.model for gpu in host.gpus)
    return ", ".join(f"{count} × {model}" for model, count in sorted(models.items()))


def _hosts_page(
    request: Request, ctx: Context, viewer: WebSession, status_code: int = 200, **extra: object
) -> Response:
    values = hosts_values(ctx) | extra
    return render(request, "admin_hosts.html", viewer, status_code, **values)


@router.get("/hosts")
def hosts(request: Request, ctx: Context, viewer: AdminViewer) -> Response:
    return _hosts_page(request, ctx, viewer)


@router.get("/hosts/live")
def hosts_live(request: Request, ctx: Context, viewer: AdminViewer) -> Response:
    return render(request, "fragments/hosts_live.html", viewer, **hosts_values(ctx))


@router.get("/hosts/{name}/kept")
def kept_fragment(request: Request, ctx: Context, viewer: AdminViewer, name: str) -> Response:
    """What the fence kept on agent host `name`. When it cannot be read (the host's
    link is down, the host is gone, its agent did not answer) the fragment says
    why, in that host's place: the rest of the page is not affected."""
    found: list[KeptContainer] = []
    unreadable: str | None = None
    try:
        found = kept.list_kept(ctx, name)
    except GpudockError as exc:
        unreadable = exc.message
    return render(
        request,
        "fragments/kept.html",
        viewer,
        kept_loaded=True,
        kept_host=name,
        kept=found,
        unreadable=unreadable,
        refresh_s=KEPT_REFRESH_S,
    )


@router.post("/hosts/{name}/kept/{instance_id}/remove")
def remove_kept(
    request: Request,
    ctx: Context,
    viewer: AdminCsrfViewer,
    name: str,
    instance_id: str,
    with_data: Annotated[bool, Form()] = False,
) -> Response:
    """What was removed, or why nothing was, is shown at the top of the hosts page."""
    try:
        removed = kept.remove_kept(ctx, name, instance_id, with_data=with_data)
    except (InvalidRequest, Conflict, NotFound) as exc:
        return _hosts_page(request, ctx, viewer, exc.http_status, kept_error=exc.message)
    return _hosts_page(request, ctx, viewer, kept_done=_removed(name, removed, with_data))


def _removed(host: str, removed: KeptContainer, with_data: bool) -> Message:
    """What the page says was removed, in the reader's language when it is shown."""
    values = {"host": host, "instance": removed.instance_id}
    if not removed.container:
        return Message("Removed the old data volume {host} kept of instance {instance}.", **values)
    if with_data and removed.volumes:
        return Message(
            "Removed the container and the old data volume {host} kept of instance {instance}.",
            **values,
        )
    if removed.volumes:
        return Message(
            "Removed the container {host} kept of instance {instance}; its old data volume "
            "stays there until you remove it too.",
            **values,
        )
    return Message("Removed the container {host} kept of instance {instance}.", **values)


def _users_page(
    request: Request,
    ctx: Context,
    viewer: WebSession,
    status_code: int = 200,
    **extra: object,
) -> Response:
    values: dict[str, object] = {
        "created": None,
        "token": None,
        "error": None,
        "done": None,
        "action_error": None,
    }
    values.update(extra)
    return render(
        request,
        "admin_users.html",
        viewer,
        status_code,
        users=users.list_users(ctx),
        retention=user_states.RETENTION,
        **values,
    )


@router.get("/users")
def users_page(request: Request, ctx: Context, viewer: AdminViewer) -> Response:
    return _users_page(request, ctx, viewer)


@router.post("/users")
def create_user(
    request: Request,
    ctx: Context,
    viewer: AdminCsrfViewer,
    name: Annotated[str, Form(max_length=64)],
    password: Annotated[str, Form(max_length=accounts.MAX_PASSWORD)] = "",
    is_admin: Annotated[bool, Form()] = False,
) -> Response:
    try:
        if password:
            accounts.check_password_rules(password)
        created = users.create_user(ctx, name.strip(), is_admin=is_admin)
        if password:
            accounts.set_password(ctx, created.user.name, password)
    except (InvalidRequest, Conflict, NotFound) as exc:
        return _users_page(request, ctx, viewer, 422, error=exc.message, name=name)
    return _users_page(request, ctx, viewer, 201, created=created.user.name, token=created.token)


@router.post("/users/{name}/disable")
def disable_user(
    request: Request,
    ctx: Context,
    viewer: AdminCsrfViewer,
    name: str,
    reason: Annotated[str, Form(max_length=user_states.MAX_REASON)] = "",
) -> Response:
    change = user_states.disable_user(ctx, viewer.user, name, reason or None)
    stopped = ", ".join(change.instances)
    done = f"{name} is disabled; " + (
        f"stopping {stopped} (data kept)" if stopped else "no instance was running"
    )
    return _users_page(request, ctx, viewer, done=done)


@router.post("/users/{name}/enable")
def enable_user(request: Request, ctx: Context, viewer: AdminCsrfViewer, name: str) -> Response:
    user_states.enable_user(ctx, viewer.user, name)
    done = f"{name} is enabled; their instances stay stopped until they start them"
    return _users_page(request, ctx, viewer, done=done)


@router.post("/users/{name}/delete")
def delete_user(
    request: Request,
    ctx: Context,
    viewer: AdminCsrfViewer,
    name: str,
    force: Annotated[bool, Form()] = False,
) -> Response:
    """A refusal (instances without force, oneself) is shown on the page, not as an error page."""
    try:
        deletion = user_states.delete_user(ctx, viewer.user, name, force=force)
    except Conflict as exc:
        return _users_page(request, ctx, viewer, 409, action_error=exc.message)
    gone = ", ".join(deletion.change.instances)
    balance = f"{format_amount(deletion.balance)} {ctx.settings.currency}"
    done = f"{name} is deleted" + (f"; deleting {gone} with their data" if gone else "")
    done += f"; balance kept in the ledger: {balance}"
    return _users_page(request, ctx, viewer, done=done)
