"""Login, logout, change password and the language switch."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request, Response
from fastapi.responses import HTMLResponse

from gpudock.errors import InvalidRequest, Unauthenticated
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts.logins import NewWebSession, WebSession
from gpudock.services.accounts.states import AccountDisabled
from gpudock.web.deps import (
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    ConsoleRoute,
    Context,
    CsrfViewer,
    Viewer,
    check_login_csrf,
    optional_viewer,
    redirect,
    render,
)
from gpudock.web.i18n import LANG_COOKIE, LANGUAGES

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
YEAR_S = 365 * 24 * 3600


def safe_next(target: str | None) -> str:
    """Only same-site paths: never redirect a login to another site."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


def _set_cookie(response: Response, ctx: Context, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        httponly=True,
        samesite="lax",
        secure=ctx.settings.session_cookie_secure,
        path="/",
    )


def _login_page(
    request: Request,
    ctx: Context,
    next_url: str,
    error: str | None,
    status: int = 200,
    username: str = "",
) -> HTMLResponse:
    token = secrets.token_urlsafe(32)
    values = {"csrf_token": token, "next_url": next_url, "error": error, "username": username}
    response = render(request, "login.html", None, status, **values)
    _set_cookie(response, ctx, LOGIN_CSRF_COOKIE, token, 3600)
    return response


@router.get("/login")
def login_form(
    request: Request,
    ctx: Context,
    viewer: Annotated[WebSession | None, Depends(optional_viewer)],
    next: str = "/",
) -> Response:
    if viewer is not None:
        return redirect(safe_next(next))
    return _login_page(request, ctx, safe_next(next), None)


@router.post("/login", dependencies=[Depends(check_login_csrf)])
def login(
    request: Request,
    ctx: Context,
    username: Annotated[str, Form(max_length=64)],
    password: Annotated[str, Form(max_length=accounts.MAX_PASSWORD)],
    next_url: Annotated[str, Form()] = "/",
) -> Response:
    try:
        opened = accounts.log_in(ctx, username, password)
    except Unauthenticated as exc:
        return _login_page(request, ctx, safe_next(next_url), exc.message, 401, username)
    except AccountDisabled as exc:
        return _login_page(request, ctx, safe_next(next_url), exc.message, 403, username)
    response = redirect(safe_next(next_url))
    _start_session(response, ctx, opened)
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/")
    return response


def _start_session(response: Response, ctx: Context, opened: NewWebSession) -> None:
    max_age = int(ctx.settings.session_ttl_h * 3600)
    _set_cookie(response, ctx, SESSION_COOKIE, opened.cookie, max_age)


@router.post("/logout")
def logout(request: Request, ctx: Context, _viewer: CsrfViewer) -> Response:
    accounts.log_out(ctx, request.cookies.get(SESSION_COOKIE))
    response = redirect("/login")
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/account")
def account(request: Request, viewer: Viewer, changed: bool = False) -> Response:
    return render(request, "account.html", viewer, changed=changed, error=None)


@router.post("/account/password")
def change_password(
    request: Request,
    ctx: Context,
    viewer: CsrfViewer,
    current: Annotated[str, Form(max_length=accounts.MAX_PASSWORD)],
    new: Annotated[str, Form(max_length=accounts.MAX_PASSWORD)],
    repeat: Annotated[str, Form(max_length=accounts.MAX_PASSWORD)],
) -> Response:
    try:
        if new != repeat:
            raise InvalidRequest("the two new passwords differ", field="repeat")
        opened = accounts.change_password(ctx, viewer.user, current, new)
    except InvalidRequest as exc:
        return render(request, "account.html", viewer, 422, changed=False, error=exc.message)
    response = redirect("/account?changed=true")
    _start_session(response, ctx, opened)
    return response


@router.get("/lang/{code}")
def switch_language(code: str, ctx: Context, next: str = "/") -> Response:
    """A preference, not an action on data: a plain link, remembered in a cookie."""
    response = redirect(safe_next(next))
    if code in LANGUAGES:
        response.set_cookie(
            LANG_COOKIE,
            code,
            max_age=YEAR_S,
            samesite="lax",
            secure=ctx.settings.session_cookie_secure,
            path="/",
        )
    return response
