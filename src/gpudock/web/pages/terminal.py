"""The browser terminal's WebSocket: `/instances/{id}/terminal`, for the instance page.

Only the console's session cookie opens it, for the instance's owner or an admin
(another tenant's instance is 404, as its page is). Browsers send cookies with a
WebSocket upgrade from any site, so the `Origin` header must be this server's own
(scheme and host, as the request reached it: behind a TLS proxy run uvicorn with
`--proxy-headers`); a cross-origin upgrade is refused (403) and audited on the
instance. Upgrades are counted per client address (`GPUDOCK_RATE_LIMIT_TERMINAL_ADDRESS`).
A refused upgrade gets a plain HTTP answer with the reason; a shell that cannot
start (the instance is stopped) is told to the page over the socket.
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Response, WebSocket
from fastapi.responses import PlainTextResponse
from starlette.datastructures import QueryParams

from gpudock.db.models import SshSessionOrigin
from gpudock.errors import Forbidden, GpudockError, InvalidRequest, RateLimited, Unauthenticated
from gpudock.services.accounts import logins as accounts
from gpudock.services.context import ServiceContext
from gpudock.services.rate_limits import address_of
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.services.ssh.sessions import Attempt, WebTerminalGrant
from gpudock.web.deps import SECURITY_HEADERS, SESSION_COOKIE
from gpudock.web.terminals import TerminalHub, TerminalRequest, TerminalSize, serve

router = APIRouter(include_in_schema=False)
MAX_TOKEN = 64
NONCE_KEY = "terminal_nonce"


def page_values(ctx: ServiceContext) -> dict[str, Any]:
    """What fragments/terminal.html needs of the page that includes it."""
    return {
        NONCE_KEY: secrets.token_urlsafe(18),
        "terminal_grace_s": ctx.settings.terminal_reattach_grace_s,
    }


def allow_terminal_styles(response: Response, values: dict[str, Any]) -> Response:
    """The console's CSP, plus what xterm.js needs on the page that shows it: its
    <style> elements, admitted by this response's nonce (terminal.js stamps it on
    them), and inline style attributes (the DOM renderer colours cells with them;
    a style attribute cannot run code). Scripts stay 'self' only."""
    policy = SECURITY_HEADERS["Content-Security-Policy"]
    nonce = values[NONCE_KEY]
    extra = (
        f"style-src 'self'; style-src-elem 'self' 'nonce-{nonce}'; style-src-attr 'unsafe-inline'"
    )
    response.headers["Content-Security-Policy"] = f"{policy}; {extra}"
    return response


@router.websocket("/instances/{instance_id}/terminal")
async def terminal_socket(socket: WebSocket, instance_id: str) -> None:
    hub: TerminalHub = socket.app.state.terminals
    client_address = f"{socket.client.host}:{socket.client.port}" if socket.client else "unknown"
    try:
        request = parse_request(socket.query_params)
        grant = await authorise(socket, hub, instance_id, client_address)
    except GpudockError as exc:
        await refuse(socket, exc)
        return
    await socket.accept()
    await serve(hub, socket, grant, request, client_address)


def parse_request(query: QueryParams) -> TerminalRequest:
    def number(name: str, default: int) -> int:
        value = query.get(name, "")
        if not value:
            return default
        if not value.isdigit() or len(value) > 12:
            raise InvalidRequest(f"{name} must be a whole number, not {value[:20]!r}", field=name)
        return int(value)

    token = query.get("session", "")
    if len(token) > MAX_TOKEN:
        raise InvalidRequest("session is not a terminal token", field="session")
    size = TerminalSize.clamped(number("cols", 80), number("rows", 24))
    return TerminalRequest(size=size, token=token, offset=number("offset", 0))


async def authorise(
    socket: WebSocket, hub: TerminalHub, instance_id: str, client_address: str
) -> WebTerminalGrant:
    if hub.gate is not None:
        address = address_of(client_address)
        hub.gate.check(address, address)
    viewer = await hub.call(accounts.resolve_session, socket.cookies.get(SESSION_COOKIE))
    if viewer is None:
        raise Unauthenticated("log in to the console to open a terminal")
    grant = await hub.call(ssh_sessions.authorize_web_terminal, viewer.user, instance_id)
    origin = socket.headers.get("origin")
    if origin is None or origin.lower() != own_origin(socket):
        reason = (
            f"terminal WebSocket from origin {(origin or 'none')[:100]!r} refused: "
            f"only pages of {own_origin(socket)} may open it"
        )
        attempt = Attempt(
            login=grant.instance_name,
            client_address=client_address,
            user_id=grant.user_id,
            instance_id=grant.instance_id,
            origin=SshSessionOrigin.WEB,
        )
        await hub.best_effort(
            "audit a refused terminal", ssh_sessions.record_refusal, attempt, reason
        )
        raise Forbidden(reason)
    return grant


def own_origin(socket: WebSocket) -> str:
    """This server's origin as the request reached it: ws → http, wss → https."""
    scheme = "https" if socket.url.scheme == "wss" else "http"
    return f"{scheme}://{socket.headers.get('host', '')}".lower()


async def refuse(socket: WebSocket, error: GpudockError) -> None:
    """Answer the upgrade with the error's HTTP status and message, where the server
    can (uvicorn can); else close it before accepting (the browser sees 403)."""
    headers = {}
    if isinstance(error, RateLimited) and error.retry_after_s:
        headers["Retry-After"] = str(error.retry_after_s)
    answer = PlainTextResponse(error.message + "\n", error.http_status, headers=headers)
    if "websocket.http.response" in socket.scope.get("extensions", {}):
        await socket.send_denial_response(answer)
    else:
        await socket.close(code=1008, reason=error.message[:120])
