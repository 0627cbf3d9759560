"""Images, read-only (issue 7 owns the service): the catalog and the user's own."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from gpudock.services import images
from gpudock.web.deps import ConsoleRoute, Context, Viewer, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.get("/images")
def images_page(request: Request, ctx: Context, viewer: Viewer) -> Response:
    return render(request, "images.html", viewer, images=images.list_images(ctx, viewer.user))
