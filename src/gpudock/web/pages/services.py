"""The instance page's services card: Open buttons for its published ports, the
link to copy (shown once) and revoking links, publishing a port, and "Start
JupyterLab" on an image that may not have it.

The card loads itself once from the instance page and each of its forms posts
with htmx and swaps in the card the answer renders; it does not poll, so a
link shown once stays on screen. A refusal (a taken name, a stopped instance,
an image without JupyterLab) is the service's own message in the card.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from gpudock.errors import Conflict, GpudockError, InvalidRequest, RuntimeFailure
from gpudock.services.accounts.logins import WebSession
from gpudock.services.context import ServiceContext
from gpudock.services.instances import actions as instances
from gpudock.services.instances import launch, published
from gpudock.services.instances.published import SharedLink
from gpudock.web.deps import ConsoleRoute, Context, CsrfViewer, Viewer, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
REFUSALS = (InvalidRequest, Conflict, RuntimeFailure)


def _card(
    request: Request,
    ctx: ServiceContext,
    viewer: WebSession,
    instance_id: str,
    *,
    link: SharedLink | None = None,
    link_service: str | None = None,
    error: GpudockError | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    instance = instances.get_instance(ctx, viewer.user, instance_id)
    services = published.list_services(ctx, viewer.user, instance.id)
    return render(
        request,
        "fragments/services.html",
        viewer,
        instance=instance,
        services=services,
        running=instance.status.value == "running",
        has_jupyter=any(s.name == published.KIND_JUPYTER for s in services),
        link=link,
        link_service=link_service,
        error=error.message if error else None,
        form=form or {},
    )


@router.get("/instances/{instance_id}/services")
def services_card(request: Request, ctx: Context, viewer: Viewer, instance_id: str) -> Response:
    return _card(request, ctx, viewer, instance_id)


@router.post("/instances/{instance_id}/services/expose")
def expose(
    request: Request,
    ctx: Context,
    viewer: CsrfViewer,
    instance_id: str,
    name: Annotated[str, Form(max_length=32)] = "",
    port: Annotated[str, Form(max_length=8)] = "",
) -> Response:
    form = {"name": name, "port": port}
    try:
        number = int(port.strip())
    except ValueError:
        error = InvalidRequest(f"bad port {port!r}: use a number from 1 to 65535", field="port")
        return _card(request, ctx, viewer, instance_id, error=error, form=form)
    try:
        published.publish(ctx, viewer.user, instance_id, number, name.strip())
    except REFUSALS as exc:
        return _card(request, ctx, viewer, instance_id, error=exc, form=form)
    return _card(request, ctx, viewer, instance_id)


@router.post("/instances/{instance_id}/services/{name}/link")
def create_link(
    request: Request, ctx: Context, viewer: CsrfViewer, instance_id: str, name: str
) -> Response:
    """The link is in this answer only: it is not shown again."""
    link = published.share_link(ctx, viewer.user, instance_id, name, str(request.base_url))
    return _card(request, ctx, viewer, instance_id, link=link, link_service=name)


@router.post("/instances/{instance_id}/services/{name}/revoke")
def revoke_links(
    request: Request, ctx: Context, viewer: CsrfViewer, instance_id: str, name: str
) -> Response:
    published.revoke_links(ctx, viewer.user, instance_id, name)
    return _card(request, ctx, viewer, instance_id)


@router.post("/instances/{instance_id}/services/{name}/remove")
def unexpose(
    request: Request, ctx: Context, viewer: CsrfViewer, instance_id: str, name: str
) -> Response:
    published.unpublish(ctx, viewer.user, instance_id, name)
    return _card(request, ctx, viewer, instance_id)


@router.post("/instances/{instance_id}/services/{name}/start")
def start(
    request: Request, ctx: Context, viewer: CsrfViewer, instance_id: str, name: str
) -> Response:
    """JupyterLab or TensorBoard on the instance's own image; a 200 with the
    service's message in the card when the image lacks it (htmx swaps 200s)."""
    try:
        launch.start_service(ctx, viewer.user, instance_id, name)
    except REFUSALS as exc:
        return _card(request, ctx, viewer, instance_id, error=exc)
    return _card(request, ctx, viewer, instance_id)
