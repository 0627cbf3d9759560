"""Users. Each is created with one API token named "default" (see `services.tokens`)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from sqlalchemy import select

from gpudock.db.models import UserModel, UserState
from gpudock.errors import Conflict, InvalidRequest
from gpudock.services.accounts import tokens
from gpudock.services.context import ServiceContext

ADMIN_NAME = "admin"
FIRST_TOKEN_NAME = "default"  # noqa: S105 (a name, not a secret)
_USER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class NewUser:
    user: UserModel
    token: str


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


def create_user(ctx: ServiceContext, name: str, *, is_admin: bool = False) -> NewUser:
    if not _USER_NAME.match(name):
        raise InvalidRequest(
            f"bad user name {name!r}: use 1-32 characters, lowercase letters, digits, "
            "'-' or '_', starting with a letter",
            field="name",
        )
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        taken = session.scalar(select(UserModel).where(UserModel.name == name))
        if taken is not None:
            deleted = taken.state == UserState.DELETED
            gone = " (a deleted user's name stays taken)" if deleted else ""
            raise Conflict(f"user {name!r} already exists{gone}", field="name")
        user = UserModel(
            id=_new_id(), name=name, is_admin=is_admin, created_at=now, state=UserState.ACTIVE
        )
        session.add(user)
        _row, token = tokens.add_token(session, user, FIRST_TOKEN_NAME, now)
    return NewUser(user=user, token=token)


def list_users(ctx: ServiceContext, *, include_deleted: bool = False) -> list[UserModel]:
    query = select(UserModel).order_by(UserModel.created_at)
    if not include_deleted:
        query = query.where(UserModel.state != UserState.DELETED)
    with ctx.sessions() as session:
        return list(session.scalars(query))


def ensure_admin(ctx: ServiceContext) -> str | None:
    """Create the first admin on first start; return its token then, else None."""
    with ctx.sessions() as session:
        if session.scalar(select(UserModel).where(UserModel.is_admin.is_(True))) is not None:
            return None
    return create_user(ctx, ADMIN_NAME, is_admin=True).token
