"""Rate limits on the HTTP side: REST requests per token and per client address,
and web console logins per client address. Past a limit: 429, `Retry-After`, and
the usual error body.

An ASGI middleware rather than a dependency, so that it runs before
authentication (token guessing is limited too) and covers every route,
including ones added later. The client address is the connection's peer; behind
a reverse proxy, run uvicorn with `--proxy-headers` so that it is the client's.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from gpudock.api.errors import error_response
from gpudock.errors import RateLimited
from gpudock.services.rate_limits import RateGate, token_key
from gpudock.settings import Settings

API_PREFIX = "/api/v1"
LOGIN_PATH = "/login"
BEARER = "bearer "


@dataclass(frozen=True)
class HttpGates:
    api_token: RateGate
    api_address: RateGate
    login_address: RateGate

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpGates:
        return cls(
            api_token=RateGate("API requests with this token", settings.rate_limit_api_token),
            api_address=RateGate("API requests from one address", settings.rate_limit_api_address),
            login_address=RateGate(
                "console logins from one address", settings.rate_limit_login_address
            ),
        )

    def check(self, scope: Scope) -> None:
        """Count the request against every gate that applies; raise `RateLimited`."""
        path: str = scope["path"]
        client = scope.get("client")
        address = client[0] if client else "unknown"
        if path == API_PREFIX or path.startswith(API_PREFIX + "/"):
            self.api_address.check(address, address)
            token = _bearer_token(scope)
            if token:
                self.api_token.check(token_key(token))
        elif path == LOGIN_PATH and scope["method"] == "POST":
            self.login_address.check(address, address)


def _bearer_token(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            text = value.decode("latin-1")
            if text[: len(BEARER)].lower() == BEARER:
                return text[len(BEARER) :].strip() or None
    return None


class RateLimitMiddleware:
    def __init__(self, app: ASGIApp, gates: HttpGates) -> None:
        self.app = app
        self.gates = gates

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                self.gates.check(scope)
            except RateLimited as exc:
                await error_response(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)
