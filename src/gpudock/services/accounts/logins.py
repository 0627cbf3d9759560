"""Console accounts: argon2id passwords and server-side login sessions.

The session cookie holds 256 random bits; the database keeps only their
SHA-256 (as with API tokens), the owner, a per-session CSRF token and an
expiry. Logging out deletes the row, so a copied cookie stops working; so does
disabling the user (and a session of a user who is not active is never honoured).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, select

from gpudock.db.models import UserModel, UserPasswordModel, UserState, WebSessionModel
from gpudock.errors import InvalidRequest, NotFound, Unauthenticated
from gpudock.services.accounts import states as user_states
from gpudock.services.context import ServiceContext

MIN_PASSWORD = 8
MAX_PASSWORD = 1024


class _Hashing:
    """argon2id with the library's recommended costs (RFC 9106); tests may lower them."""

    hasher = PasswordHasher()
    dummy: str | None = None  # verified for unknown users: a wrong name costs as much


def configure_hashing(hasher: PasswordHasher) -> None:
    _Hashing.hasher, _Hashing.dummy = hasher, None


def _dummy_hash() -> str:
    if _Hashing.dummy is None:
        _Hashing.dummy = _Hashing.hasher.hash("not a password of anyone")
    return _Hashing.dummy


@dataclass(frozen=True)
class WebSession:
    """A live console login: the user and the CSRF token its forms must carry."""

    user: UserModel
    csrf_token: str


@dataclass(frozen=True)
class NewWebSession:
    cookie: str
    session: WebSession


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def check_password_rules(password: str) -> None:
    if len(password) < MIN_PASSWORD:
        raise InvalidRequest(
            f"the password is too short: use at least {MIN_PASSWORD} characters",
            field="password",
        )
    if len(password) > MAX_PASSWORD:
        raise InvalidRequest(f"the password is longer than {MAX_PASSWORD} characters")


def set_password(ctx: ServiceContext, user_name: str, password: str) -> UserModel:
    """Set (or replace) a user's console password; ends all their console sessions."""
    check_password_rules(password)
    hashed = _Hashing.hasher.hash(password)  # slow: outside the transaction
    with ctx.sessions.begin() as session:
        user = session.scalar(select(UserModel).where(UserModel.name == user_name))
        if user is None or user.state == UserState.DELETED:
            raise NotFound(f"no user {user_name!r}: `gpudock users list` shows them")
        row = session.get(UserPasswordModel, user.id)
        if row is None:
            session.add(
                UserPasswordModel(user_id=user.id, password_hash=hashed, updated_at=ctx.clock())
            )
        else:
            row.password_hash, row.updated_at = hashed, ctx.clock()
        session.execute(delete(WebSessionModel).where(WebSessionModel.user_id == user.id))
        session.expunge(user)
    return user


def _verify(stored: str | None, password: str) -> bool:
    try:
        return _Hashing.hasher.verify(stored or _dummy_hash(), password) and stored is not None
    except (VerificationError, InvalidHashError):
        return False


def log_in(ctx: ServiceContext, user_name: str, password: str) -> NewWebSession:
    """Check name and password; open a session. Same message for either mistake;
    only the right password learns that the account is disabled."""
    with ctx.sessions() as session:
        row = session.execute(
            select(UserModel, UserPasswordModel.password_hash)
            .outerjoin(UserPasswordModel, UserPasswordModel.user_id == UserModel.id)
            .where(UserModel.name == user_name.strip())
        ).first()
    user, stored = (row[0], row[1]) if row is not None else (None, None)
    if len(password) > MAX_PASSWORD or not _verify(stored, password) or user is None:
        raise Unauthenticated("wrong user name or password")
    user_states.check_active(user)
    return _open_session(ctx, user)


def _open_session(ctx: ServiceContext, user: UserModel) -> NewWebSession:
    cookie = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        session.execute(delete(WebSessionModel).where(WebSessionModel.expires_at <= now))
        session.add(
            WebSessionModel(
                id_hash=_digest(cookie),
                user_id=user.id,
                csrf_token=csrf,
                created_at=now,
                expires_at=now + timedelta(hours=ctx.settings.session_ttl_h),
            )
        )
    return NewWebSession(cookie=cookie, session=WebSession(user=user, csrf_token=csrf))


def resolve_session(ctx: ServiceContext, cookie: str | None) -> WebSession | None:
    """The live session a cookie names, or None (unknown, expired or logged out)."""
    if not cookie or len(cookie) > 128:
        return None
    with ctx.sessions() as session:
        row = session.execute(
            select(WebSessionModel, UserModel)
            .join(UserModel, UserModel.id == WebSessionModel.user_id)
            .where(WebSessionModel.id_hash == _digest(cookie), UserModel.state == UserState.ACTIVE)
        ).first()
        if row is None or row[0].expires_at <= ctx.clock():
            return None
        web, user = row[0], row[1]
        session.expunge(user)
        return WebSession(user=user, csrf_token=web.csrf_token)


def log_out(ctx: ServiceContext, cookie: str | None) -> None:
    if not cookie:
        return
    with ctx.sessions.begin() as session:
        session.execute(delete(WebSessionModel).where(WebSessionModel.id_hash == _digest(cookie)))


def change_password(ctx: ServiceContext, user: UserModel, current: str, new: str) -> NewWebSession:
    """Check the current password, set the new one, end every other session."""
    with ctx.sessions() as session:
        row = session.get(UserPasswordModel, user.id)
        stored = row.password_hash if row is not None else None
    if not _verify(stored, current):
        raise InvalidRequest("the current password is wrong", field="current")
    set_password(ctx, user.name, new)
    return _open_session(ctx, user)


def csrf_matches(expected: str, given: str | None) -> bool:
    return bool(given) and secrets.compare_digest(expected.encode(), (given or "").encode())
