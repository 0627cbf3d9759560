"""The one place domain errors become HTTP responses."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpudock.errors import (
    Conflict,
    Forbidden,
    GpudockError,
    InvalidRequest,
    NotFound,
    PaymentRequired,
    RuntimeFailure,
    RuntimeUnavailable,
    Unauthenticated,
)

STATUS_BY_ERROR: list[tuple[type[GpudockError], int]] = [
    (InvalidRequest, 422),
    (Unauthenticated, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
    (PaymentRequired, 402),
    (RuntimeUnavailable, 503),
    (RuntimeFailure, 502),
]


def status_for(exc: GpudockError) -> int:
    for error_type, status in STATUS_BY_ERROR:
        if isinstance(exc, error_type):
            return status
    return 500


def _body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field}}


async def _domain_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GpudockError)
    status = status_for(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(_body(exc.code, exc.message, exc.field), status, headers=headers)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = []
    first_field = None
    for error in exc.errors():
        location = [str(p) for p in error.get("loc", ()) if p not in ("body", "query", "path")]
        where = ".".join(location) or "body"
        first_field = first_field or where
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    message = "invalid request: " + "; ".join(problems)
    return JSONResponse(_body("invalid_request", message, first_field), 422)


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {401: "unauthenticated", 404: "not_found", 405: "method_not_allowed"}.get(
        exc.status_code, "http_error"
    )
    headers = getattr(exc, "headers", None)
    return JSONResponse(_body(code, str(exc.detail)), exc.status_code, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(GpudockError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
