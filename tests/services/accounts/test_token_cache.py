"""The server's copy of the API tokens it has read: a token's row is read once
per `token_cache_s`, and whatever ends or restores a token's use through this
server takes effect at the very next request, however long the copy would live."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from gpudock.db.models import UserModel
from gpudock.platform import Platform
from gpudock.services.accounts import states, tokens, users
from gpudock.services.accounts.states import AccountDeleted, AccountDisabled
from gpudock.services.accounts.token_cache import KnownToken, TokenCache, TokenFacts
from gpudock.services.accounts.tokens import TokenRevoked
from tests.support.platforms import PlatformFactory

FOR_AN_HOUR = 3600.0  # longer than any test: only an invalidation can end a copy


@contextmanager
def token_reads(platform: Platform) -> Iterator[list[str]]:
    """The statements that read the api_tokens table while the block runs."""
    seen: list[str] = []
    engine = platform.ctx.sessions.kw["bind"]

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "api_tokens" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _admin(platform: Platform) -> Any:
    return next(u for u in users.list_users(platform.ctx) if u.is_admin)


def test_a_token_is_read_once_while_its_copy_lives(platform_factory: PlatformFactory) -> None:
    platform = platform_factory(token_cache_s=FOR_AN_HOUR)
    made = users.create_user(platform.ctx, "ada")
    with token_reads(platform) as reads:
        callers = [tokens.authenticate(platform.ctx, made.token) for _ in range(5)]
    assert len(reads) == 1
    assert {c.user.id for c in callers} == {made.user.id}


def test_with_no_copy_every_request_reads_the_row(platform_factory: PlatformFactory) -> None:
    platform = platform_factory(token_cache_s=0)
    made = users.create_user(platform.ctx, "ada")
    with token_reads(platform) as reads:
        for _ in range(3):
            tokens.authenticate(platform.ctx, made.token)
    assert len(reads) == 3


def test_a_revoke_here_ends_the_token_at_the_next_request(
    platform_factory: PlatformFactory,
) -> None:
    platform = platform_factory(token_cache_s=FOR_AN_HOUR)
    made = users.create_user(platform.ctx, "ada")
    tokens.authenticate(platform.ctx, made.token)  # now in the copy
    tokens.revoke_token(platform.ctx, made.user, "default")
    with pytest.raises(TokenRevoked):
        tokens.authenticate(platform.ctx, made.token)


def test_disable_enable_and_delete_here_take_effect_at_the_next_request(
    platform_factory: PlatformFactory,
) -> None:
    platform = platform_factory(token_cache_s=FOR_AN_HOUR)
    ctx, admin = platform.ctx, _admin(platform)
    made = users.create_user(ctx, "ada")
    tokens.authenticate(ctx, made.token)
    states.disable_user(ctx, admin, "ada")
    with pytest.raises(AccountDisabled):
        tokens.authenticate(ctx, made.token)
    states.enable_user(ctx, admin, "ada")
    assert tokens.authenticate(ctx, made.token).user.state == "active"
    states.delete_user(ctx, admin, "ada", force=True)
    with pytest.raises(AccountDeleted):
        tokens.authenticate(ctx, made.token)


def test_another_servers_revoke_is_seen_at_once_without_a_copy(
    platform_factory: PlatformFactory, database_url: str | None, tmp_path: Path
) -> None:
    here = platform_factory(database_url=database_url, token_cache_s=0)
    shared = database_url or f"sqlite:///{tmp_path / 'data0' / 'gpudock.db'}"
    there = platform_factory(database_url=shared, token_cache_s=FOR_AN_HOUR)
    made = users.create_user(here.ctx, "ada")
    tokens.authenticate(here.ctx, made.token)
    tokens.revoke_token(there.ctx, made.user, "default")
    with pytest.raises(TokenRevoked):
        tokens.authenticate(here.ctx, made.token)


def test_a_read_that_began_before_a_change_is_never_kept() -> None:
    """The race: a request reads the row, a revoke commits and forgets, then
    the request would store what it read before the revoke."""
    cache = TokenCache()
    read = KnownToken(TokenFacts("t1", "default", None, None), UserModel(), None, time.monotonic())
    epoch = cache.epoch()  # the request's read begins
    cache.forget_all()  # a revoke commits meanwhile
    cache.remember("digest", read, epoch)
    assert cache.recall("digest", FOR_AN_HOUR) is None
    cache.remember("digest", read, cache.epoch())  # a read begun after it is kept
    assert cache.recall("digest", FOR_AN_HOUR) is read
