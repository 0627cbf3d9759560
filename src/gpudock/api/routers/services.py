"""Service URLs: ports an instance publishes through the server's proxy, the
links that open them, and starting JupyterLab or TensorBoard in an instance."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from gpudock.api.deps import Context, CurrentUser
from gpudock.api.errors import error_responses
from gpudock.api.service_schemas import (
    ServiceExposeRequest,
    ServiceLinkPublic,
    ServiceLinksRevokedPublic,
    ServicePublic,
)
from gpudock.services.context import ServiceContext
from gpudock.services.instances import launch, published
from gpudock.services.instances.published import PublishedService

router = APIRouter(prefix="/instances/{instance_id}/services", tags=["services"])
NOT_FOUND = error_responses(404)


def _public(ctx: ServiceContext, request: Request, service: PublishedService) -> ServicePublic:
    url = published.service_url(
        ctx.settings, str(request.base_url), service.instance_id, service.name
    )
    return ServicePublic(
        instance_id=service.instance_id,
        name=service.name,
        port=service.port,
        kind=service.kind,
        url=url,
    )


@router.get("", response_model=list[ServicePublic], responses=NOT_FOUND)
def list_services(
    ctx: Context, user: CurrentUser, request: Request, instance_id: str
) -> list[ServicePublic]:
    return [_public(ctx, request, s) for s in published.list_services(ctx, user, instance_id)]


@router.post("", response_model=ServicePublic, status_code=201, responses=error_responses(404, 409))
def expose(
    ctx: Context, user: CurrentUser, request: Request, instance_id: str, body: ServiceExposeRequest
) -> ServicePublic:
    service = published.publish(ctx, user, instance_id, body.port, body.name)
    return _public(ctx, request, service)


@router.delete("/{name}", status_code=204, responses=NOT_FOUND)
def unexpose(ctx: Context, user: CurrentUser, instance_id: str, name: str) -> Response:
    published.unpublish(ctx, user, instance_id, name)
    return Response(status_code=204)


@router.post(
    "/{name}/links", response_model=ServiceLinkPublic, status_code=201, responses=NOT_FOUND
)
def create_link(
    ctx: Context, user: CurrentUser, request: Request, instance_id: str, name: str
) -> ServiceLinkPublic:
    link = published.share_link(ctx, user, instance_id, name, str(request.base_url))
    return ServiceLinkPublic(url=link.url, token=link.token)


@router.delete("/{name}/links", response_model=ServiceLinksRevokedPublic, responses=NOT_FOUND)
def revoke_links(
    ctx: Context, user: CurrentUser, instance_id: str, name: str
) -> ServiceLinksRevokedPublic:
    return ServiceLinksRevokedPublic(revoked=published.revoke_links(ctx, user, instance_id, name))


@router.post(
    "/{name}/start", response_model=ServicePublic, responses=error_responses(404, 409, 422)
)
def start(
    ctx: Context, user: CurrentUser, request: Request, instance_id: str, name: str
) -> ServicePublic:
    """Start JupyterLab (`jupyter`) or TensorBoard (`tensorboard`) in the instance
    and publish it; installs nothing: 409 naming what the image lacks."""
    return _public(ctx, request, launch.start_service(ctx, user, instance_id, name))
