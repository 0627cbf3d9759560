"""SSH keys: the user's public keys, added by pasting one and removed with a button."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from gpudock.errors import Conflict, InvalidRequest
from gpudock.services import ssh_keys
from gpudock.services.accounts import WebSession
from gpudock.services.context import ServiceContext
from gpudock.web.deps import ConsoleRoute, Context, CsrfViewer, Viewer, redirect, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


def _page(
    request: Request,
    ctx: ServiceContext,
    viewer: WebSession,
    status_code: int = 200,
    *,
    error: InvalidRequest | Conflict | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    return render(
        request,
        "ssh_keys.html",
        viewer,
        status_code,
        keys=ssh_keys.list_keys(ctx, viewer.user),
        error=error.message if error else None,
        error_field=(error.field or "form") if error else None,
        form=form or {},
    )


@router.get("/ssh-keys")
def ssh_keys_page(request: Request, ctx: Context, viewer: Viewer) -> Response:
    return _page(request, ctx, viewer)


@router.post("/ssh-keys")
def add_key(
    request: Request,
    ctx: Context,
    viewer: CsrfViewer,
    public_key: Annotated[str, Form(max_length=ssh_keys.MAX_KEY_TEXT)],
    name: Annotated[str, Form(max_length=128)] = "",
) -> Response:
    try:
        ssh_keys.add_key(ctx, viewer.user, public_key, name.strip() or None)
    except (InvalidRequest, Conflict) as exc:
        form = {"public_key": public_key, "name": name}
        return _page(request, ctx, viewer, 422, error=exc, form=form)
    return redirect("/ssh-keys")


@router.post("/ssh-keys/{key_id}/delete")
def remove_key(ctx: Context, viewer: CsrfViewer, key_id: str) -> Response:
    """Another user's key id is a 404 (the service looks among the viewer's own)."""
    ssh_keys.remove_key(ctx, viewer.user, key_id)
    return redirect("/ssh-keys")
