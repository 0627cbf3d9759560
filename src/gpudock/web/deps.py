"""What every console route needs: the viewer, CSRF, rendering, HTML errors.

Routes here are thin, like the API's: parse the form, call one service
function, render. `ConsoleRoute` turns a domain error into an HTML page with the
status the error tree gives it, the one the API answers with (its handlers answer
JSON), and a missing login into a redirect.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpudock.errors import Forbidden, GpudockError, Unauthenticated
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts.logins import WebSession
from gpudock.services.context import ServiceContext
from gpudock.services.instances.usage import CpuMeter
from gpudock.web.i18n import LANG_COOKIE, LANGUAGES, pick_language, translator
from gpudock.web.navigation import nav_entries

SESSION_COOKIE = "gpudock_session"
LOGIN_CSRF_COOKIE = "gpudock_login_csrf"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
ERROR_TITLES = {
    402: "Not enough balance",
    403: "Forbidden",
    404: "Not found",
    405: "Not found",
}
# What a page says when the server itself failed: the details go to the log, never
# to the page (a traceback can hold another tenant's data or a secret).
SERVER_FAULT_MESSAGE = "the server could not show this page; the error is in the server's log"
LOG = logging.getLogger(__name__)
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class LoginRequired(Exception):
    """No live session: pages redirect to /login, htmx fragments ask htmx to."""


def context_of(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


# Dependencies that do no I/O are `async def`: FastAPI runs a plain `def` one in
# its thread pool, a hop (and a GIL hand-over) each, on every request.


async def get_context(request: Request) -> ServiceContext:
    return context_of(request)


Context = Annotated[ServiceContext, Depends(get_context)]


async def get_cpu_meter(request: Request) -> CpuMeter:
    """The console's one meter (made by `mount_console`): CPU % compares each
    poll of the usage fragment with the previous one of the same container."""
    meter: CpuMeter = request.app.state.cpu_meter
    return meter


Meter = Annotated[CpuMeter, Depends(get_cpu_meter)]


def optional_viewer(request: Request, ctx: Context) -> WebSession | None:
    return accounts.resolve_session(ctx, request.cookies.get(SESSION_COOKIE))


async def get_viewer(viewer: Annotated[WebSession | None, Depends(optional_viewer)]) -> WebSession:
    if viewer is None:
        raise LoginRequired
    return viewer


Viewer = Annotated[WebSession, Depends(get_viewer)]


def _admin_only(viewer: WebSession) -> WebSession:
    if not viewer.user.is_admin:
        raise Forbidden("this page is for admins")
    return viewer


async def get_admin_viewer(viewer: Viewer) -> WebSession:
    return _admin_only(viewer)


AdminViewer = Annotated[WebSession, Depends(get_admin_viewer)]


async def _submitted_csrf(request: Request) -> str | None:
    header = request.headers.get(CSRF_HEADER)
    if header:
        return header
    form = await request.form()
    value = form.get(CSRF_FIELD)
    return value if isinstance(value, str) else None


async def check_csrf(request: Request, viewer: Viewer) -> WebSession:
    """Every POST of a logged-in user carries the session's CSRF token."""
    if not accounts.csrf_matches(viewer.csrf_token, await _submitted_csrf(request)):
        raise Forbidden("missing or wrong CSRF token: reload the page and try again")
    return viewer


CsrfViewer = Annotated[WebSession, Depends(check_csrf)]


async def check_login_csrf(request: Request) -> None:
    """Before login there is no session: the form's token must match a cookie."""
    cookie = request.cookies.get(LOGIN_CSRF_COOKIE) or ""
    if not cookie or not accounts.csrf_matches(cookie, await _submitted_csrf(request)):
        raise Forbidden("missing or wrong CSRF token: reload the page and try again")


def language(request: Request) -> str:
    return pick_language(request.cookies.get(LANG_COOKIE), request.headers.get("accept-language"))


def render(
    request: Request,
    template: str,
    viewer: WebSession | None,
    status_code: int = 200,
    **values: Any,
) -> HTMLResponse:
    lang = language(request)
    context = {
        "request": request,
        "lang": lang,
        "languages": LANGUAGES,
        "t": translator(lang),
        "viewer": viewer,
        "user": viewer.user if viewer else None,
        "csrf_token": viewer.csrf_token if viewer else values.pop("csrf_token", ""),
        "nav_extra": nav_entries(viewer.user.is_admin) if viewer else [],
        "path": request.url.path,
        "system_disk_kept": _system_disk_kept(request),
        "home_kept": _home_kept(request),
        **values,
    }
    response = TEMPLATES.TemplateResponse(request, template, context, status_code=status_code)
    response.headers.update(SECURITY_HEADERS)
    return response


def _system_disk_kept(request: Request) -> bool:
    """Whether a stop keeps an instance's system disk (its files outside /root/data):
    on Kubernetes a stopped instance's pod is deleted, and its files with it."""
    context: ServiceContext | None = getattr(request.app.state, "context", None)
    return context is None or context.settings.runtime != "kubernetes"


def _home_kept(request: Request) -> bool:
    """Whether a stop on Kubernetes keeps /root (`GPUDOCK_KUBERNETES_HOME`)."""
    context: ServiceContext | None = getattr(request.app.state, "context", None)
    return context is not None and context.settings.kubernetes_home


def form_error(error: GpudockError | None) -> dict[str, str | None]:
    """A form's error for its template: the service's message as it is (what the API
    and the CLI say too) and the field it names, `form` when it names none."""
    if error is None:
        return {"error": None, "error_field": None}
    return {"error": error.message, "error_field": error.field or "form"}


def is_htmx(request: Request) -> bool:
    return request.headers.get("HX-Request") == "true"


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _error_page(request: Request, exc: GpudockError) -> Response:
    """The page for a domain error, with the status the API answers it with."""
    if isinstance(exc, Unauthenticated):
        return _login_redirect(request)
    viewer = optional_viewer(request, context_of(request))
    title = ERROR_TITLES.get(exc.http_status, "Something went wrong")
    return render(request, "error.html", viewer, exc.http_status, title=title, message=exc.message)


def _page_not_found(request: Request) -> Response:
    viewer = optional_viewer(request, context_of(request))
    message = f"there is no page at {request.url.path}"
    return render(request, "error.html", viewer, 404, title="Not found", message=message)


def _server_fault_page(request: Request) -> Response:
    viewer = optional_viewer(request, context_of(request))
    title = "Something went wrong"
    return render(request, "error.html", viewer, 500, title=title, message=SERVER_FAULT_MESSAGE)


HttpErrorHandler = Callable[[Request, Any], Response | Awaitable[Response]]


def console_http_errors(
    api_handler: HttpErrorHandler,
) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The framework's own errors (no route, wrong method) as a console page for
    what a browser asks outside the API; the API keeps its JSON bodies."""

    async def handle(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        outside_api = not request.url.path.startswith("/api/")
        if outside_api and exc.status_code in (404, 405) and request.method in ("GET", "HEAD"):
            return _page_not_found(request)
        answer = api_handler(request, exc)
        return await answer if inspect.isawaitable(answer) else answer

    return handle


def _login_redirect(request: Request) -> Response:
    target = "/login?next=" + quote(request.url.path)
    if is_htmx(request):
        return Response(status_code=401, headers={"HX-Redirect": target})
    return redirect(target)


class ConsoleRoute(APIRoute):
    """Domain errors become HTML error pages; no session becomes a login redirect."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except LoginRequired:
                return _login_redirect(request)
            except GpudockError as exc:
                return _error_page(request, exc)
            except Exception:
                LOG.exception("console page %s %s failed", request.method, request.url.path)
                return _server_fault_page(request)

        return handle


async def get_admin_csrf_viewer(viewer: CsrfViewer) -> WebSession:
    return _admin_only(viewer)


AdminCsrfViewer = Annotated[WebSession, Depends(get_admin_csrf_viewer)]
