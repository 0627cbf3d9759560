"""Dependencies as `Annotated` aliases."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpudock import messages
from gpudock.db.models import UserModel
from gpudock.errors import Forbidden
from gpudock.services.accounts import tokens
from gpudock.services.accounts.tokens import Caller
from gpudock.services.context import ServiceContext

_bearer = HTTPBearer(auto_error=False, description="API token: `Authorization: Bearer gpd_…`")


# The dependencies that only read the request are `async def`: FastAPI runs a plain
# `def` dependency in its thread pool, a hop (and a GIL hand-over) each, on every
# request; these do no I/O, so they run on the event loop instead.


async def get_context(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


Context = Annotated[ServiceContext, Depends(get_context)]


async def get_language(request: Request) -> str:
    """The language of the human texts in an answer (errors, reasons, events, ledger
    lines), from `Accept-Language`; codes, statuses and amounts never change with it."""
    return messages.negotiate(request.headers.get("accept-language"))


Language = Annotated[str, Depends(get_language)]


def get_caller(
    ctx: Context,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    return tokens.authenticate(ctx, credentials.credentials if credentials else None)


CurrentCaller = Annotated[Caller, Depends(get_caller)]


async def get_current_user(caller: CurrentCaller) -> UserModel:
    return caller.user


CurrentUser = Annotated[UserModel, Depends(get_current_user)]


async def get_admin(user: CurrentUser) -> UserModel:
    if not user.is_admin:
        raise Forbidden("this needs an admin token")
    return user


AdminUser = Annotated[UserModel, Depends(get_admin)]
ADMIN_ONLY_RESPONSE = {
    "description": "Not an admin token (answered before anything is looked up)",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorPublic"}}},
}


def _needs_admin(dependant: Dependant) -> bool:
    return any(d.call is get_admin or _needs_admin(d) for d in dependant.dependencies)


def document_admin_only(app: FastAPI, prefix: str, routers: Iterable[APIRouter]) -> None:
    """Every route that takes an `AdminUser` documents its 403, so no router can forget."""
    admin_only = {
        (prefix + route.path, method.lower())
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute) and _needs_admin(route.dependant)
        for method in route.methods or ()
    }
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for path, method in admin_only:
                operation = schema["paths"].get(path, {}).get(method)
                if operation is not None:
                    operation["responses"].setdefault("403", ADMIN_ONLY_RESPONSE)
        return build()

    app.openapi = openapi  # type: ignore[method-assign]
