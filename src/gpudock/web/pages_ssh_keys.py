"""SSH keys, read-only (issue 3 owns the service; keys are added with the CLI)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from gpudock.services import ssh_keys
from gpudock.web.deps import ConsoleRoute, Context, Viewer, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.get("/ssh-keys")
def ssh_keys_page(request: Request, ctx: Context, viewer: Viewer) -> Response:
    keys = ssh_keys.list_keys(ctx, viewer.user)
    return render(request, "ssh_keys.html", viewer, keys=keys)
