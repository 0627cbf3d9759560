"""Counts the HTTP requests being answered (`services.foreground`)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from gpudock.services.foreground import Foreground


class ForegroundMiddleware:
    def __init__(self, app: ASGIApp, foreground: Foreground) -> None:
        self.app = app
        self.foreground = foreground

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ticket = self.foreground.enter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.foreground.leave(ticket)
