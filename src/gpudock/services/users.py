"""Users and API tokens. Tokens are shown once and stored as SHA-256 digests."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models import ApiTokenModel, UserModel
from gpudock.errors import Conflict, InvalidRequest, Unauthenticated
from gpudock.services.context import ServiceContext

TOKEN_PREFIX = "gpd_"  # noqa: S105 (a prefix, not a secret)
ADMIN_NAME = "admin"
_USER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class NewToken:
    user: UserModel
    token: str


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token_value() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)  # 256 bits


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


def create_user(ctx: ServiceContext, name: str, *, is_admin: bool = False) -> NewToken:
    if not _USER_NAME.match(name):
        raise InvalidRequest(
            f"bad user name {name!r}: use 1-32 characters, lowercase letters, digits, "
            "'-' or '_', starting with a letter",
            field="name",
        )
    with ctx.sessions.begin() as session:
        if session.scalar(select(UserModel).where(UserModel.name == name)) is not None:
            raise Conflict(f"user {name!r} already exists", field="name")
        user = UserModel(id=_new_id(), name=name, is_admin=is_admin, created_at=ctx.clock())
        session.add(user)
        token = _add_token(ctx, session, user, "default")
    return NewToken(user=user, token=token)


def _add_token(ctx: ServiceContext, session: Session, user: UserModel, name: str) -> str:
    token = new_token_value()
    session.add(
        ApiTokenModel(
            id=_new_id(),
            user_id=user.id,
            token_hash=hash_token(token),
            name=name,
            created_at=ctx.clock(),
        )
    )
    return token


def authenticate(ctx: ServiceContext, token: str | None) -> UserModel:
    """Return the token's user, or raise Unauthenticated."""
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 256:
        raise Unauthenticated("missing or malformed API token: send 'Authorization: Bearer gpd_…'")
    digest = hash_token(token)
    with ctx.reader() as session:
        row = session.scalar(select(ApiTokenModel).where(ApiTokenModel.token_hash == digest))
        if row is None or not hmac.compare_digest(row.token_hash, digest):
            raise Unauthenticated("unknown API token: check GPUDOCK_TOKEN or `gpudock login`")
        user = row.user
        session.expunge(user)
    return user


def list_users(ctx: ServiceContext) -> list[UserModel]:
    with ctx.sessions() as session:
        return list(session.scalars(select(UserModel).order_by(UserModel.created_at)))


def ensure_admin(ctx: ServiceContext) -> str | None:
    """Create the first admin on first start; return its token then, else None."""
    with ctx.sessions() as session:
        if session.scalar(select(UserModel).where(UserModel.is_admin.is_(True))) is not None:
            return None
    return create_user(ctx, ADMIN_NAME, is_admin=True).token
