"""API tokens: the viewer's own, created with an optional expiry (shown once) and revoked."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from gpudock.errors import Conflict, InvalidRequest
from gpudock.services.accounts import tokens
from gpudock.services.accounts.logins import WebSession
from gpudock.services.accounts.tokens import NewToken
from gpudock.services.context import ServiceContext
from gpudock.web.deps import ConsoleRoute, Context, CsrfViewer, Viewer, form_error, redirect, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
EXPIRY_CHOICES = ("7d", "30d", "90d", "365d", "")  # "": never


def _page(
    request: Request,
    ctx: ServiceContext,
    viewer: WebSession,
    status_code: int = 200,
    *,
    created: NewToken | None = None,
    error: InvalidRequest | Conflict | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    return render(
        request,
        "tokens.html",
        viewer,
        status_code,
        tokens=tokens.list_tokens(ctx, viewer.user),
        created=created,
        **form_error(error),
        form=form or {"expires_in": "90d"},
        choices=EXPIRY_CHOICES,
    )


@router.get("/tokens")
def tokens_page(request: Request, ctx: Context, viewer: Viewer) -> Response:
    return _page(request, ctx, viewer)


@router.post("/tokens")
def create_token(
    request: Request,
    ctx: Context,
    viewer: CsrfViewer,
    name: Annotated[str, Form(max_length=64)],
    expires_in: Annotated[str, Form(max_length=8)] = "",
) -> Response:
    """The value is on this page only: it is not shown again (no redirect)."""
    try:
        created = tokens.create_token(ctx, viewer.user, name.strip(), expires_in=expires_in or None)
    except (InvalidRequest, Conflict) as exc:
        form = {"name": name, "expires_in": expires_in}
        return _page(request, ctx, viewer, 422, error=exc, form=form)
    return _page(request, ctx, viewer, 201, created=created)


@router.post("/tokens/{token_id}/revoke")
def revoke_token(ctx: Context, viewer: CsrfViewer, token_id: str) -> Response:
    """Another user's token id is a 404 (the service looks among the viewer's own)."""
    tokens.revoke_token(ctx, viewer.user, token_id)
    return redirect("/tokens")
