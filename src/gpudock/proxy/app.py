"""The service-URL proxy, an ASGI middleware in front of the API and console.

A request is the proxy's when its path is `/i/<instance>/<service>/…` or, with
`GPUDOCK_SERVICE_DOMAIN` set, its host is `<service>-<instance id>.<domain>`;
everything else goes on to the app untouched. Raw ASGI rather than routes: no
framework work on a path that carries every byte of a notebook session.

For one request: the address's rate limit; a link's first visit
(`?gpudock_token=…`: checked, set as a cookie for that service only, and
redirected to the same URL without it, so the token leaves the address bar
and the instance never sees it); the credentials (`access.Gatekeeper`); then
HTTP (`upstream`) or a WebSocket (`websocket`). With a service domain, the
console's own `/i/…` URLs hand a logged-in user over to the service's host
with a link that lasts as long as a login.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
from collections.abc import AsyncIterator, Coroutine
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from gpudock.errors import GpudockError, NotFound, RateLimited, RuntimeFailure, Unauthenticated
from gpudock.proxy import headers as crossing
from gpudock.proxy import websocket
from gpudock.proxy.access import LINK_COOKIE, Addressed, Gatekeeper, from_host, from_path
from gpudock.proxy.activity import UseRecorder
from gpudock.proxy.rates import AddressRates
from gpudock.proxy.upstream import Upstream, UpstreamFailure, open_port
from gpudock.services.context import ServiceContext
from gpudock.services.instances import published
from gpudock.services.instances.published import ProxyTarget

log = logging.getLogger(__name__)
SESSION_COOKIE = "gpudock_session"  # the console's (web.deps), read here too


class ServiceProxy:
    def __init__(self, app: ASGIApp, ctx: ServiceContext) -> None:
        self.app = app
        self._ctx = ctx
        settings = ctx.settings
        self._domain = settings.service_domain
        self._idle = settings.service_idle_timeout_s
        self._secure = settings.session_cookie_secure
        self._upstream = Upstream(ctx.runtime_for, self._idle)
        self._access = Gatekeeper(ctx)
        self._use = UseRecorder(ctx)
        self._gate = (
            AddressRates(
                "requests to service URLs from one address", settings.rate_limit_service_address
            )
            if settings.rate_limits_enabled
            else None
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw_path = scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        conn = HTTPConnection(scope)
        on_host = from_host(conn.headers.get("host", "").split(":")[0], self._domain, raw_path)
        addressed = on_host or from_path(raw_path)
        if addressed is None:
            await self.app(scope, receive, send)
            return
        try:
            await self._serve(conn, receive, send, addressed)
        except GpudockError as exc:
            await self._refuse(conn, receive, send, exc, addressed)

    async def _serve(
        self, conn: HTTPConnection, receive: Receive, send: Send, addressed: Addressed
    ) -> None:
        if self._gate is not None:
            address = conn.client.host if conn.client else "unknown"
            self._gate.check(address)
        link = conn.query_params.get(published.LINK_PARAMETER)
        if link is not None and conn.scope["type"] == "http":
            await self._first_visit(conn, send, addressed, link)
            return
        if addressed.prefix and addressed.rest == "":
            await _redirect(send, addressed.prefix + "/" + _query(conn))
            return
        target = await self._access.authorise(
            conn.cookies.get(SESSION_COOKIE),
            conn.cookies.get(LINK_COOKIE),
            addressed.instance_ref,
            addressed.service,
        )
        if addressed.prefix and self._domain:
            await self._hand_over(conn, send, addressed)
            return
        if addressed.prefix and target.instance_id != addressed.instance_ref:
            path = published.service_path(target.instance_id, target.service)
            await _redirect(send, path.rstrip("/") + addressed.rest + _query(conn))
            return
        if conn.scope["type"] == "websocket":
            await self._websocket(conn, receive, send, addressed, target)
        else:
            await self._http(conn, receive, send, addressed, target)

    # -- links and hand-overs ----------------------------------------------
    async def _first_visit(
        self, conn: HTTPConnection, send: Send, addressed: Addressed, token: str
    ) -> None:
        await asyncio.to_thread(
            self._access.check_link, token, addressed.instance_ref, addressed.service
        )
        query = [(k, v) for k, v in conn.query_params.multi_items() if k != "gpudock_token"]
        clean = (addressed.prefix + addressed.rest or "/") + (
            "?" + urlencode(query) if query else ""
        )
        cookie = f"{LINK_COOKIE}={token}; Path={addressed.prefix or ''}/; HttpOnly; SameSite=Lax"
        await _redirect(
            send, clean, [("set-cookie", cookie + ("; Secure" if self._secure else ""))]
        )

    async def _hand_over(self, conn: HTTPConnection, send: Send, addressed: Addressed) -> None:
        """Console host, service domain set: on to the service's own host name."""
        viewer_link = await asyncio.to_thread(self._handover_link, conn, addressed)
        host = f"{addressed.service}-{addressed.instance_ref}.{self._domain}"
        query = urlencode([*conn.query_params.multi_items(), ("gpudock_token", viewer_link)])
        await _redirect(send, f"{conn.url.scheme}://{host}{addressed.rest or '/'}?{query}")

    def _handover_link(self, conn: HTTPConnection, addressed: Addressed) -> str:
        from gpudock.services.accounts import logins

        viewer = logins.resolve_session(self._ctx, conn.cookies.get(SESSION_COOKIE))
        if viewer is None:
            raise Unauthenticated("log in to the console first")
        ttl = timedelta(hours=self._ctx.settings.session_ttl_h)
        return published.create_link(
            self._ctx, viewer.user, addressed.instance_ref, addressed.service, ttl=ttl
        )

    # -- HTTP ----------------------------------------------------------------
    def _headers(self, conn: HTTPConnection, target: ProxyTarget, prefix: str) -> crossing.Headers:
        return crossing.to_instance(
            list(conn.scope["headers"]),
            client=conn.client.host if conn.client else "",
            scheme=conn.url.scheme.replace("ws", "http"),
            host=conn.headers.get("host", ""),
            prefix="" if target.keeps_prefix else prefix,
            service_token=target.service_token if target.kind == published.KIND_JUPYTER else None,
        )

    def _upstream_target(self, conn: HTTPConnection, addressed: Addressed, t: ProxyTarget) -> str:
        path = (addressed.prefix + addressed.rest) if t.keeps_prefix else addressed.rest
        return (path or "/") + _query(conn)

    async def _http(
        self,
        conn: HTTPConnection,
        receive: Receive,
        send: Send,
        addressed: Addressed,
        target: ProxyTarget,
    ) -> None:
        await self._use.touch(target.instance_id)
        headers = self._headers(conn, target, addressed.prefix)
        if "chunked" in conn.headers.get("transfer-encoding", "").lower():
            headers.append((b"transfer-encoding", b"chunked"))
        body = _request_body(receive)
        started = False
        try:
            async with self._upstream.request(
                target.host_id,
                target.container_id,
                target.port,
                conn.scope["method"],
                self._upstream_target(conn, addressed, target),
                headers,
                body,
            ) as response:
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status,
                        "headers": crossing.to_browser(response.headers),
                    }
                )
                started = True
                whole = response.arrived_whole()
                if whole is not None:  # no stream to watch: no tasks for it
                    await send({"type": "http.response.body", "body": whole})
                    return
                chunks = self._used_while(target.instance_id, response.body())
                await _until_disconnect(_pump(chunks, send), receive)
        except UpstreamFailure as exc:
            if not started:
                raise _unreachable(target, exc) from exc
            # Too late for an error page: an unfinished response makes the ASGI
            # server drop the browser's connection, so the download shows as broken.
            log.warning("a response from instance %s broke off: %s", target.instance_id, exc)

    async def _used_while(
        self, instance_id: str, chunks: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        """A long response (an event stream, a download) is use while it flows."""
        async for chunk in chunks:
            await self._use.touch(instance_id)
            yield chunk

    # -- WebSockets ----------------------------------------------------------
    async def _websocket(
        self,
        conn: HTTPConnection,
        receive: Receive,
        send: Send,
        addressed: Addressed,
        target: ProxyTarget,
    ) -> None:
        origin = conn.headers.get("origin")
        if origin is not None and origin.split("://", 1)[-1] != conn.headers.get("host"):
            # Cookies ride along on a cross-site handshake: refuse other sites' pages.
            raise NotFound("a WebSocket to a service must come from the service's own pages")
        await self._use.touch(target.instance_id)
        try:
            runtime = self._ctx.runtime_for(target.host_id)
            sock = await open_port(runtime, target.container_id, target.port)
        except OSError as exc:
            raise _unreachable(target, exc) from exc
        await websocket.bridge(
            conn.scope,
            receive,
            send,
            sock=sock,
            target=self._upstream_target(conn, addressed, target),
            headers=self._headers(conn, target, addressed.prefix),
            origin=origin,
            idle_timeout_s=self._idle,
            while_open=lambda interval: self._use.while_open(target.instance_id, interval),
        )

    # -- refusals ------------------------------------------------------------
    async def _refuse(
        self,
        conn: HTTPConnection,
        receive: Receive,
        send: Send,
        exc: GpudockError,
        addressed: Addressed,
    ) -> None:
        if conn.scope["type"] == "websocket":
            await receive()  # websocket.connect; closing before accepting is a 403
            await send({"type": "websocket.close", "code": 1008})
            return
        if isinstance(exc, Unauthenticated) and _wants_page(conn):
            await _redirect(send, self._login_url(conn, addressed))
            return
        if isinstance(exc, ServiceUnreachable) and _wants_page(conn):
            await _retrying_page(send, exc)
            return
        extra = []
        if isinstance(exc, RateLimited):
            extra.append(("retry-after", str(exc.retry_after_s)))
        await _text(send, exc.http_status, exc.message, extra)

    def _login_url(self, conn: HTTPConnection, addressed: Addressed) -> str:
        if addressed.prefix:
            return "/login?next=" + quote(addressed.prefix + addressed.rest)
        # On a service's own host: log in on the console, whose /i/ URL hands back.
        back = published.service_path(addressed.instance_ref, addressed.service)
        next_path = back.rstrip("/") + addressed.rest
        return f"{conn.url.scheme}://{self._domain}/login?next={quote(next_path)}"


class ServiceUnreachable(RuntimeFailure):
    """The instance runs, but nothing answers on the service's port."""

    code = "service_unreachable"


def _unreachable(target: ProxyTarget, exc: BaseException) -> GpudockError:
    return ServiceUnreachable(
        f"nothing answers on port {target.port} inside instance {target.instance_id} "
        f"({exc or type(exc).__name__}): is the service running and listening there?"
    )


def _query(conn: HTTPConnection) -> str:
    query = conn.scope.get("query_string", b"").decode("latin-1")
    return "?" + query if query else ""


def _wants_page(conn: HTTPConnection) -> bool:
    return conn.scope["method"] in ("GET", "HEAD") and "text/html" in conn.headers.get("accept", "")


async def _request_body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body"):
            return


async def _pump(chunks: AsyncIterator[bytes], send: Send) -> None:
    async for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _until_disconnect(pumping: Coroutine[Any, Any, None], receive: Receive) -> None:
    """Run the response's pump until it ends or the browser goes away (the ASGI
    server then drops what is sent, and an endless stream would run on)."""
    pump = asyncio.ensure_future(pumping)

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({pump, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not pump.done():
            pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump  # its errors are the caller's


async def _redirect(send: Send, location: str, extra: list[tuple[str, str]] | None = None) -> None:
    headers = [("location", location), ("cache-control", "no-store"), *(extra or [])]
    await _respond(send, 303, b"", headers)


async def _text(send: Send, status: int, message: str, extra: list[tuple[str, str]]) -> None:
    await _respond(
        send,
        status,
        (message + "\n").encode(),
        [("content-type", "text/plain; charset=utf-8"), *extra],
    )


async def _retrying_page(send: Send, exc: GpudockError) -> None:
    """A page a browser reloads every few seconds: a service that is still
    starting (JupyterLab takes a while) opens by itself once it answers."""
    body = (
        '<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="3">'
        f"<title>Waiting for the service</title><p>{html.escape(exc.message)}</p>"
        "<p>This page tries again every 3 seconds.</p>"
    ).encode()
    headers = [("content-type", "text/html; charset=utf-8"), ("cache-control", "no-store")]
    await _respond(send, exc.http_status, body, headers)


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
    encoded = [(k.encode(), v.encode("latin-1")) for k, v in headers]
    encoded.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": encoded})
    await send({"type": "http.response.body", "body": body})
