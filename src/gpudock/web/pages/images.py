"""Images: the catalog with what runs on which GPU model, builds from a Dockerfile,
saving an instance's system disk, and deleting one's own images."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, Response

from gpudock.errors import Conflict, Forbidden, InvalidRequest
from gpudock.services.accounts.logins import WebSession
from gpudock.services.context import ServiceContext
from gpudock.services.images import builds as image_builds
from gpudock.services.images import catalog as images
from gpudock.web.deps import ConsoleRoute, Context, CsrfViewer, Viewer, form_error, redirect, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
MAX_DOCKERFILE = 64 * 1024
MAX_LOG_LINES = 400


def _page(
    request: Request,
    ctx: ServiceContext,
    viewer: WebSession,
    status_code: int = 200,
    **values: Any,
) -> Response:
    found = images.list_images(ctx, viewer.user)
    defaults: dict[str, Any] = {
        **form_error(None),
        "form": {"dockerfile": f"FROM {ctx.settings.default_image}\n"},
        "log": [],
        "built": None,
    }
    return render(
        request,
        "images.html",
        viewer,
        status_code,
        images=found,
        compat=images.compatibility_table(ctx, viewer.user, found),
        **(defaults | values),
    )


@router.get("/images")
def images_page(request: Request, ctx: Context, viewer: Viewer) -> Response:
    return _page(request, ctx, viewer)


@router.post("/images/build")
def build_image(
    request: Request,
    ctx: Context,
    viewer: CsrfViewer,
    name: Annotated[str, Form(max_length=128)],
    dockerfile: Annotated[str, Form(max_length=MAX_DOCKERFILE)],
) -> Response:
    """Runs the build to its end (the request waits) and shows its log."""
    form = {"name": name, "dockerfile": dockerfile}
    log: list[str] = []
    try:
        events = image_builds.build(
            ctx, viewer.user, name.strip(), dockerfile, image_builds.empty_context()
        )
        for event in events:
            if "log" in event:
                log.append(str(event["log"]))
            elif "error" in event:
                raise InvalidRequest(str(event["error"]), field="dockerfile")
            elif "image" in event:
                built = event["image"]
                tail = log[-MAX_LOG_LINES:]
                return _page(request, ctx, viewer, 201, built=built, log=tail)
    except (InvalidRequest, Conflict, Forbidden) as exc:
        return _page(request, ctx, viewer, 422, form=form, log=log, **form_error(exc))
    raise InvalidRequest("the build ended without an image")  # pragma: no cover


@router.post("/images/save")
def save_instance_image(
    ctx: Context,
    viewer: CsrfViewer,
    instance_id: Annotated[str, Form(max_length=64)],
    name: Annotated[str, Form(max_length=128)],
) -> Response:
    """From the instance page: commit its system disk as a private image."""
    images.save_instance_image(ctx, viewer.user, instance_id, name.strip())
    return redirect("/images")


@router.post("/images/{image_id}/delete")
def delete_image(ctx: Context, viewer: CsrfViewer, image_id: str) -> Response:
    """Another user's private image is a 404; a public one, for a non-admin, a 403."""
    images.delete_image(ctx, viewer.user, image_id)
    return redirect("/images")
