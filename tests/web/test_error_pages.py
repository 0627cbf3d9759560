"""One mapping of the error tree to HTTP: a console page answers each domain
error with the status the API answers it with, and renders it as a page."""

from __future__ import annotations

import pytest
from fastapi import APIRouter, FastAPI

from gpudock.errors import (
    Conflict,
    Forbidden,
    GpudockError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    PaymentRequired,
    RateLimited,
    RuntimeFailure,
    RuntimeUnavailable,
)
from gpudock.platform import Platform
from gpudock.services.accounts.states import AccountDisabled
from gpudock.web.deps import ConsoleRoute
from tests.support.web import log_in

EXPECTED = [
    (InvalidRequest("bad input"), 422),
    (Forbidden("not yours"), 403),
    (AccountDisabled("disabled"), 403),  # a subclass answers with its parent's status
    (NotFound("no such thing"), 404),
    (Conflict("wrong state"), 409),
    (PaymentRequired("top up first"), 402),
    (PayloadTooLarge("too big"), 413),
    (RateLimited("slow down", retry_after_s=3), 429),
    (RuntimeFailure("engine failed"), 502),
    (RuntimeUnavailable("engine away"), 503),
    (GpudockError("anything else"), 500),
]


@pytest.mark.parametrize(("error", "status"), EXPECTED, ids=lambda v: type(v).__name__)
def test_console_and_api_answer_an_error_with_one_status(
    console: Platform, error: GpudockError, status: int
) -> None:
    alice = log_in(console, "alice")
    page, api = APIRouter(route_class=ConsoleRoute), APIRouter()

    @page.get("/test-error")
    @api.get("/api/v1/test-error")
    def fail() -> None:
        raise error

    app = alice.client.app
    assert isinstance(app, FastAPI)
    app.include_router(page)
    app.include_router(api)

    as_json = alice.client.get("/api/v1/test-error")
    assert as_json.status_code == status and as_json.json()["error"]["message"] == error.message
    as_page = alice.client.get("/test-error")
    assert as_page.status_code == status
    assert as_page.headers["content-type"].startswith("text/html")
    assert error.message in as_page.text and "alice" in as_page.text


def test_a_page_that_does_not_exist_is_a_console_page_with_the_navigation(
    console: Platform,
) -> None:
    alice = log_in(console, "alice")
    page = alice.client.get("/no-such-page")
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "there is no page at /no-such-page" in page.text
    assert "<nav" in page.text and "alice" in page.text and 'href="/instances"' in page.text


def test_the_api_still_answers_json_for_a_path_it_does_not_have(console: Platform) -> None:
    alice = log_in(console, "alice")
    answer = alice.client.get("/api/v1/no-such-thing")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"


def test_every_page_has_an_icon(console: Platform) -> None:
    alice = log_in(console, "alice")
    icon = alice.client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.content.startswith(b"<svg")
    assert 'rel="icon"' in alice.client.get("/").text


def test_a_page_that_fails_shows_the_navigation_and_keeps_the_details_in_the_log(
    console: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    alice = log_in(console, "alice")
    page = APIRouter(route_class=ConsoleRoute)

    @page.get("/test-crash")
    def crash() -> None:
        raise RuntimeError("secret detail from deep inside")

    app = alice.client.app
    assert isinstance(app, FastAPI)
    app.include_router(page)

    answer = alice.client.get("/test-crash")
    assert answer.status_code == 500
    assert "<nav" in answer.text and "alice" in answer.text
    assert "secret detail" not in answer.text
    assert "secret detail from deep inside" in caplog.text
