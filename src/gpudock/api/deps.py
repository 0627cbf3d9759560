"""Dependencies as `Annotated` aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpudock.db.models import UserModel
from gpudock.errors import Forbidden
from gpudock.services import users
from gpudock.services.context import ServiceContext

_bearer = HTTPBearer(auto_error=False, description="API token: `Authorization: Bearer gpd_…`")


def get_context(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


Context = Annotated[ServiceContext, Depends(get_context)]


def get_current_user(
    ctx: Context,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> UserModel:
    return users.authenticate(ctx, credentials.credentials if credentials else None)


CurrentUser = Annotated[UserModel, Depends(get_current_user)]


def get_admin(user: CurrentUser) -> UserModel:
    if not user.is_admin:
        raise Forbidden("this needs an admin token")
    return user


AdminUser = Annotated[UserModel, Depends(get_admin)]
