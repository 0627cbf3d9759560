from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpudock.api.deps import AdminUser, Context, CurrentUser
from gpudock.api.errors import error_responses
from gpudock.api.links import links
from gpudock.api.schemas import (
    PasswordSetRequest,
    UserCreateRequest,
    UserDeletionPublic,
    UserDisableRequest,
    UserPublic,
    UserStateChangePublic,
    UserWithTokenPublic,
)
from gpudock.billing.money import format_amount
from gpudock.db.models import UserModel
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import states as user_states
from gpudock.services.accounts import users

router = APIRouter(prefix="/users", tags=["users"])
_ONE = "/users/{name}"
CHANGE = error_responses(404, 409)
NO_REASON = UserDisableRequest()  # the body is optional


def _public(user: UserModel) -> UserPublic:
    return UserPublic.model_validate(user, from_attributes=True)


@router.get("/me", response_model=UserPublic)
def whoami(user: CurrentUser) -> UserPublic:
    return _public(user)


@router.get("", response_model=list[UserPublic])
def list_users(
    ctx: Context,
    _admin: AdminUser,
    include_deleted: Annotated[bool, Query(description="Also list deleted users")] = False,
) -> list[UserPublic]:
    return [_public(u) for u in users.list_users(ctx, include_deleted=include_deleted)]


@router.post(
    "",
    response_model=UserWithTokenPublic,
    status_code=201,
    responses={
        **error_responses(409),
        **links(
            201,
            "name",
            "name",
            {
                "set_password": ("PUT", _ONE + "/password"),
                "disable": ("POST", _ONE + "/disable"),
                "delete": ("DELETE", _ONE),
            },
        ),
    },
)
def create_user(ctx: Context, _admin: AdminUser, body: UserCreateRequest) -> UserWithTokenPublic:
    """A user and their first API token (named "default"), shown once."""
    created = users.create_user(ctx, body.name, is_admin=body.is_admin)
    return UserWithTokenPublic(**_public(created.user).model_dump(), token=created.token)


@router.put("/{name}/password", response_model=UserPublic, responses=error_responses(404))
def set_password(
    ctx: Context, _admin: AdminUser, name: str, body: PasswordSetRequest
) -> UserPublic:
    """Set a user's web-console password (admin); ends their console sessions."""
    return _public(accounts.set_password(ctx, name, body.password))


@router.post("/{name}/disable", response_model=UserStateChangePublic, responses=CHANGE)
def disable_user(
    ctx: Context, admin: AdminUser, name: str, body: UserDisableRequest = NO_REASON
) -> UserStateChangePublic:
    """Their tokens, console sessions and SSH keys stop working at once; their
    instances stop (GPUs released, containers and data kept). Not yourself,
    nor the last active admin."""
    change = user_states.disable_user(ctx, admin, name, body.reason)
    return UserStateChangePublic.model_validate(change, from_attributes=True)


@router.post("/{name}/enable", response_model=UserPublic, responses=CHANGE)
def enable_user(ctx: Context, admin: AdminUser, name: str) -> UserPublic:
    """Access comes back; their instances stay stopped until they start them."""
    return _public(user_states.enable_user(ctx, admin, name))


@router.delete(
    "/{name}",
    response_model=UserDeletionPublic,
    responses=CHANGE,
    description=user_states.RETENTION,
)
def delete_user(
    ctx: Context,
    admin: AdminUser,
    name: str,
    force: Annotated[
        bool, Query(description="Also delete their instances and data (else: 409 if any)")
    ] = False,
) -> UserDeletionPublic:
    deletion = user_states.delete_user(ctx, admin, name, force=force)
    return UserDeletionPublic(
        user=_public(deletion.change.user),
        instances=deletion.change.instances,
        balance=format_amount(deletion.balance),
        private_images=deletion.private_images,
        retention=user_states.RETENTION,
    )
