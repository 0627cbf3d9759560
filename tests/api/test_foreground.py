"""The API counts the requests it answers, for the passes to step aside
(`api/foreground.py`); the real app wires its context's counter."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.api.foreground import ForegroundMiddleware
from gpudock.services.foreground import Foreground
from tests.support.platforms import PlatformFactory


def test_a_request_is_in_flight_while_it_is_answered_and_not_after() -> None:
    foreground = Foreground()

    async def seen(_request: Request) -> JSONResponse:
        return JSONResponse({"busy": foreground.busy()})

    def fails(_request: Request) -> JSONResponse:
        raise RuntimeError("boom")

    app = Starlette(routes=[Route("/seen", seen), Route("/fails", fails)])
    app.add_middleware(ForegroundMiddleware, foreground=foreground)
    client = TestClient(app, raise_server_exceptions=False)
    assert client.get("/seen").json() == {"busy": True}
    assert client.get("/fails").status_code == 500
    assert not foreground.busy()  # a failed request left too


def test_the_apps_requests_are_counted_on_its_context(platform_factory: PlatformFactory) -> None:
    platform = platform_factory()
    app = create_app(platform, run_reconciler=False)
    [counting] = [m for m in app.user_middleware if m.cls is ForegroundMiddleware]
    assert counting.kwargs["foreground"] is platform.ctx.foreground
    assert TestClient(app).get("/healthz").status_code == 200
    assert not platform.ctx.foreground.busy()
