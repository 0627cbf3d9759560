from __future__ import annotations

from fastapi import APIRouter

from gpudock.api.deps import AdminUser, Context, CurrentUser
from gpudock.api.errors import error_responses
from gpudock.api.links import links
from gpudock.api.schemas import (
    PasswordSetRequest,
    UserCreateRequest,
    UserPublic,
    UserWithTokenPublic,
)
from gpudock.db.models import UserModel
from gpudock.services import accounts, users

router = APIRouter(prefix="/users", tags=["users"])


def _public(user: UserModel) -> UserPublic:
    return UserPublic(
        id=user.id, name=user.name, is_admin=user.is_admin, created_at=user.created_at
    )


@router.get("/me", response_model=UserPublic)
def whoami(user: CurrentUser) -> UserPublic:
    return _public(user)


@router.get("", response_model=list[UserPublic])
def list_users(ctx: Context, _admin: AdminUser) -> list[UserPublic]:
    return [_public(u) for u in users.list_users(ctx)]


@router.post(
    "",
    response_model=UserWithTokenPublic,
    status_code=201,
    responses={
        **error_responses(409),
        **links(201, "name", "name", {"set_password": ("PUT", "/users/{name}/password")}),
    },
)
def create_user(ctx: Context, _admin: AdminUser, body: UserCreateRequest) -> UserWithTokenPublic:
    created = users.create_user(ctx, body.name, is_admin=body.is_admin)
    return UserWithTokenPublic(**_public(created.user).model_dump(), token=created.token)


@router.put("/{name}/password", response_model=UserPublic, responses=error_responses(404))
def set_password(
    ctx: Context, _admin: AdminUser, name: str, body: PasswordSetRequest
) -> UserPublic:
    """Set a user's web-console password (admin); ends their console sessions."""
    return _public(accounts.set_password(ctx, name, body.password))
