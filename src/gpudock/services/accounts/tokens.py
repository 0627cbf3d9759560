"""Named API tokens: created with an optional expiry, shown once, stored as SHA-256.

A token is usable until it expires or is revoked, and only while its user is
active. Revoked and expired tokens keep their rows, so that presenting one is
answered with what happened to it and how to get a new one, not "unknown".

Last use is recorded to the minute: a request writes `last_used_at` only when
the stored value is a minute old or more, with the condition in the UPDATE
itself, so a busy token costs one write a minute, not one per request.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import secrets
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpudock.db.models import ApiTokenModel, UserModel
from gpudock.errors import Conflict, InvalidRequest, NotFound, Unauthenticated
from gpudock.services.accounts import states as user_states
from gpudock.services.accounts.token_cache import KnownToken, TokenCache, TokenFacts
from gpudock.services.context import ServiceContext
from gpudock.syntax import DURATION_PATTERN, TOKEN_NAME_PATTERN

TOKEN_PREFIX = "gpd_"  # noqa: S105 (a prefix, not a secret)
MAX_TOKEN_LENGTH = 256
LAST_USED_RESOLUTION = timedelta(minutes=1)
_NAME = re.compile(TOKEN_NAME_PATTERN)
_DURATION = re.compile(DURATION_PATTERN)
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
HOW_TO_RENEW = (
    "create a new one with `gpudock tokens create NAME` (signed in with another token) "
    "or on the console's API tokens page"
)


class TokenState(enum.StrEnum):
    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


class TokenExpired(Unauthenticated):
    code = "token_expired"


class TokenRevoked(Unauthenticated):
    code = "token_revoked"


@dataclass(frozen=True)
class Caller:
    """Who sent a request, and with which token."""

    user: UserModel
    token_id: str


@dataclass(frozen=True)
class TokenView:
    token: ApiTokenModel
    state: TokenState


@dataclass(frozen=True)
class NewToken:
    view: TokenView
    value: str  # shown once


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token_value() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)  # 256 bits


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


def _when(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def token_state(token: ApiTokenModel | TokenFacts, now: datetime) -> TokenState:
    """Expired wins over revoked when it came first (a name reused after expiry)."""
    expired_at = token.expires_at if token.expires_at and token.expires_at <= now else None
    if token.revoked_at is not None and (expired_at is None or token.revoked_at < expired_at):
        return TokenState.REVOKED
    return TokenState.EXPIRED if expired_at is not None else TokenState.ACTIVE


# -- authentication ------------------------------------------------------------------------
def authenticate(ctx: ServiceContext, token: str | None) -> Caller:
    """The token's user, if the token is known, unexpired and unrevoked and the
    user active; else Unauthenticated (or AccountDisabled) saying which. The row
    is read at most once per `GPUDOCK_TOKEN_CACHE_S` (`token_cache`)."""
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_LENGTH:
        raise Unauthenticated("missing or malformed API token: send 'Authorization: Bearer gpd_…'")
    digest = hash_token(token)
    cache = ctx.memo.get(TokenCache)
    known = cache.recall(digest, ctx.settings.token_cache_s)
    if known is None:
        known = _read_token(ctx, digest, cache)
    now = ctx.clock()
    _check_usable(known.facts, known.user, now)
    if known.last_used_at is None or known.last_used_at <= now - LAST_USED_RESOLUTION:
        _record_use(ctx, known.facts.id, now)
        known.last_used_at = now
    return Caller(user=known.user, token_id=known.facts.id)


def _read_token(ctx: ServiceContext, digest: str, cache: TokenCache) -> KnownToken:
    epoch = cache.epoch()
    with ctx.reader() as session:
        row = session.execute(
            select(ApiTokenModel, UserModel)
            .join(UserModel, UserModel.id == ApiTokenModel.user_id)
            .where(ApiTokenModel.token_hash == digest)
        ).first()
        if row is None or not hmac.compare_digest(row[0].token_hash, digest):
            raise Unauthenticated("unknown API token: check GPUDOCK_TOKEN or `gpudock login`")
        found, user = row
        session.expunge_all()
    facts = TokenFacts(found.id, found.name, found.expires_at, found.revoked_at)
    known = KnownToken(facts, user, found.last_used_at, time.monotonic())
    if ctx.settings.token_cache_s > 0:
        cache.remember(digest, known, epoch)
    return known


def _check_usable(token: TokenFacts, user: UserModel, now: datetime) -> None:
    user_states.check_not_deleted(user)
    state = token_state(token, now)
    if state == TokenState.EXPIRED:
        assert token.expires_at is not None
        raise TokenExpired(
            f"API token {token.name!r} expired at {_when(token.expires_at)}: {HOW_TO_RENEW}"
        )
    if state == TokenState.REVOKED:
        assert token.revoked_at is not None
        raise TokenRevoked(
            f"API token {token.name!r} was revoked at {_when(token.revoked_at)}: {HOW_TO_RENEW}"
        )
    user_states.check_active(user)


def _record_use(ctx: ServiceContext, token_id: str, now: datetime) -> None:
    stale = or_(
        ApiTokenModel.last_used_at.is_(None),
        ApiTokenModel.last_used_at <= now - LAST_USED_RESOLUTION,
    )
    with ctx.sessions.begin() as session:
        session.execute(
            update(ApiTokenModel)
            .where(ApiTokenModel.id == token_id, stale)
            .values(last_used_at=now)
        )


# -- the user's own tokens -----------------------------------------------------------------
def expiry(
    now: datetime, expires_in: str | None = None, expires_at: datetime | None = None
) -> datetime | None:
    """When a token asked to expire `expires_in` ('90d', '12h', '30m', '2w') from
    now, or at `expires_at`, will expire; None: never. Not both; not in the past."""
    if expires_in is not None and expires_at is not None:
        raise InvalidRequest("give expires_in or expires_at, not both", field="expires_in")
    if expires_in is not None:
        if not _DURATION.fullmatch(expires_in):
            raise InvalidRequest(
                f"bad duration {expires_in[:32]!r}: use a number and a unit, m, h, d or w "
                "(e.g. 90d)",
                field="expires_in",
            )
        return now + timedelta(**{_UNITS[expires_in[-1]]: int(expires_in[:-1])})
    if expires_at is None:
        return None
    if expires_at.tzinfo is None:
        raise InvalidRequest("expires_at needs a time zone (e.g. ...Z)", field="expires_at")
    try:
        at = expires_at.astimezone(UTC)
    except OverflowError as exc:
        raise InvalidRequest("expires_at is out of range", field="expires_at") from exc
    if at <= now:
        raise InvalidRequest(
            f"expires_at {_when(at)} is not in the future (now: {_when(now)})", field="expires_at"
        )
    return at


def create_token(
    ctx: ServiceContext,
    user: UserModel,
    name: str,
    *,
    expires_in: str | None = None,
    expires_at: datetime | None = None,
) -> NewToken:
    """A new token for `user`, shown once, expiring as `expiry()` reads the two
    options. Its name is unique among the user's unrevoked tokens; an expired
    one of that name is retired to make room."""
    if not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"bad token name {name[:64]!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            field="name",
        )
    now = ctx.clock()
    expires = expiry(now, expires_in, expires_at)
    try:
        with ctx.sessions.begin() as session:
            _make_room(session, user, name, now)
            row, value = add_token(session, user, name, now, expires)
    except IntegrityError as exc:  # a concurrent create of the same name
        raise Conflict(f"you already have a token named {name!r}", field="name") from exc
    return NewToken(view=TokenView(row, token_state(row, now)), value=value)


def _make_room(session: Session, user: UserModel, name: str, now: datetime) -> None:
    held = session.scalars(
        select(ApiTokenModel).where(
            ApiTokenModel.user_id == user.id,
            ApiTokenModel.name == name,
            ApiTokenModel.revoked_at.is_(None),
        )
    ).first()
    if held is None:
        return
    if token_state(held, now) != TokenState.EXPIRED:
        raise Conflict(
            f"you already have a token named {name!r}: pick another name, or revoke it "
            f"first (`gpudock tokens revoke {name}`)",
            field="name",
        )
    held.revoked_at = now
    session.flush()  # the partial unique index sees the name free before the insert


def add_token(
    session: Session,
    user: UserModel,
    name: str,
    now: datetime,
    expires_at: datetime | None = None,
) -> tuple[ApiTokenModel, str]:
    """Insert a token row in the caller's transaction; return it and the value."""
    value = new_token_value()
    row = ApiTokenModel(
        id=_new_id(),
        user_id=user.id,
        token_hash=hash_token(value),
        name=name,
        created_at=now,
        expires_at=expires_at,
    )
    session.add(row)
    return row, value


def list_tokens(
    ctx: ServiceContext, user: UserModel, *, include_revoked: bool = False
) -> list[TokenView]:
    """The user's own tokens, oldest first (never anyone else's, admins included)."""
    query = select(ApiTokenModel).where(ApiTokenModel.user_id == user.id)
    if not include_revoked:
        query = query.where(ApiTokenModel.revoked_at.is_(None))
    with ctx.reader() as session:
        rows = list(session.scalars(query.order_by(ApiTokenModel.created_at, ApiTokenModel.id)))
    now = ctx.clock()
    return [TokenView(row, token_state(row, now)) for row in rows]


def revoke_token(ctx: ServiceContext, user: UserModel, ref: str) -> TokenView:
    """By id or name among the user's unrevoked tokens; anyone else's → NotFound.
    It stops working at once (the token of this very request included)."""
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        row = session.scalars(
            select(ApiTokenModel)
            .where(
                ApiTokenModel.user_id == user.id,
                ApiTokenModel.revoked_at.is_(None),
                (ApiTokenModel.id == ref) | (ApiTokenModel.name == ref),
            )
            .order_by((ApiTokenModel.id == ref).desc())
            .with_for_update()
        ).first()
        if row is None:
            raise NotFound(f"no token {ref[:64]!r}: `gpudock tokens list` shows yours")
        row.revoked_at = now
    ctx.memo.get(TokenCache).forget_all()  # committed: no request after this meets the row
    return TokenView(row, token_state(row, now))
