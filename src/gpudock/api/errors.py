"""The API's answers to errors: domain errors as JSON with the status the error
tree gives them (`gpudock.errors`), and the framework's own errors in the same
body."""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from gpudock.api.schemas import ErrorPublic
from gpudock.errors import GpudockError, RateLimited
from gpudock.messages import localize, negotiate

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field}}


def error_response(exc: GpudockError, accept_language: str | None = None) -> JSONResponse:
    """The response for a domain error (also used by middleware, outside the handlers),
    with the status the error tree gives it (`GpudockError.http_status`) and its
    message in the language `accept_language` asks for; the code never changes."""
    headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else {}
    if isinstance(exc, RateLimited):
        headers["Retry-After"] = str(exc.retry_after_s)
    message = localize(exc.message, negotiate(accept_language))
    return JSONResponse(_body(exc.code, message, exc.field), exc.http_status, headers=headers)


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GpudockError)
    return error_response(exc, request.headers.get("accept-language"))


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


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:  # the framework could not read the body (e.g. not UTF-8)
        message = f"invalid request: {exc.detail} (send a UTF-8 JSON body)"
        return JSONResponse(_body("invalid_request", message, "body"), 422)
    code = {401: "unauthenticated", 404: "not_found", 405: "method_not_allowed"}.get(
        exc.status_code, "http_error"
    )
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
    return JSONResponse(_body(code, str(exc.detail)), exc.status_code, headers=headers or None)


def allowed_methods(request: Request) -> list[str]:
    """The methods to name in `Allow` (Starlette names only the first route's).

    For a path of the API: the methods its OpenAPI schema documents there, where
    (as in OpenAPI) a concrete path shadows templated ones: /images/build is not
    also /images/{image_id}. Elsewhere: every method some route serves."""
    documented = _documented_methods(request.app.openapi()["paths"], request.url.path)
    if documented:
        return documented
    served = set()
    for method in METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in request.app.router.routes):
            served.add(method)
    return sorted(served)


def _documented_methods(paths: dict[str, dict[str, Any]], path: str) -> list[str]:
    concrete: set[str] = set()
    templated: set[str] = set()
    for template, operations in paths.items():
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            methods = {m.upper() for m in operations if m.upper() in METHODS}
            (templated if "{" in template else concrete).update(methods)
    return sorted(concrete or templated)


ERROR_DESCRIPTIONS: dict[int, str] = {
    401: "Missing or unknown token",
    402: "The balance or the monthly budget does not cover it",
    403: "Authenticated, but not allowed (e.g. it needs an admin token)",
    404: "No such object (or another tenant's)",
    409: "Valid input, but the object's state does not allow it",
    422: "Invalid input",
    413: "The upload is over its size limit",
    429: "Too many requests: retry after `Retry-After` seconds",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for the domain errors a route can answer with."""
    return {s: {"model": ErrorPublic, "description": ERROR_DESCRIPTIONS[s]} for s in statuses}


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(GpudockError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
